package kernels

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// BenchmarkGPUMatmul times, with CUDA events, the sparse kernel, the
// default dense path (cuBLASLt) and the own dense kernel on the two largest
// Llama-3-8B projections in BF16. gpu-us/op is GPU time per product;
// TFLOP/s counts the dense-equivalent 2·m·n·k.
func BenchmarkGPUMatmul(b *testing.B) {
	d := openGPU(b)
	rng := rand.New(rand.NewPCG(7, 7))
	for _, s := range []modelShape{{"llama3-8b", "gate_up", 14336, 4096}, {"llama3-8b", "down", 4096, 14336}} {
		w := newWeight(b, d, rng, checkpoint.BF16, s.n, s.k)
		for _, m := range []int{1, 16, 4096} {
			x := upload16(b, d, randDense(rng, checkpoint.BF16, m*s.k))
			y := alloc(b, d, 4*m*s.n)
			for _, v := range []struct {
				name string
				run  func() error
			}{
				{"sparse", func() error {
					return d.SparseMatmul(SparseOperands{Y: y, X: x, Packed: w.dPack, Meta: w.dMeta, DType: checkpoint.BF16, M: m, N: s.n, K: s.k})
				}},
				{"dense", func() error {
					return d.DenseMatmul(DenseOperands{Y: y, X: x, W: w.dDense, DType: checkpoint.BF16, M: m, N: s.n, K: s.k})
				}},
				{"own", func() error {
					return d.dense("DenseMatmul", DenseOperands{Y: y, X: x, W: w.dDense, DType: checkpoint.BF16, M: m, N: s.n, K: s.k}, true)
				}},
			} {
				b.Run(fmt.Sprintf("%s/%s_%dx%d/m=%d", v.name, s.proj, s.n, s.k, m), func(b *testing.B) {
					if err := v.run(); err != nil {
						b.Fatal(err)
					}
					if err := d.Synchronize(); err != nil {
						b.Fatal(err)
					}
					var total time.Duration
					for b.Loop() {
						el, err := d.Elapsed(v.run)
						if err != nil {
							b.Fatal(err)
						}
						total += el
					}
					per := total.Seconds() / float64(b.N)
					b.ReportMetric(per*1e6, "gpu-us/op")
					b.ReportMetric(2*float64(m)*float64(s.n)*float64(s.k)/per/1e12, "TFLOP/s")
				})
			}
			freeAll(b, x, y)
		}
		w.free(b)
	}
}

// BenchmarkGPUOpen times Open and Close of device 0 with the embedded PTX:
// the driver JIT-compiles both modules (about 7 MB of PTX, the sm_90a one
// only on compute capability 9.0) unless its compute cache
// (~/.nv/ComputeCache) already holds them, so the first iteration of a
// fresh machine is a user's first run and the rest are later runs; with
// CUDA_CACHE_DISABLE=1 every iteration compiles. On an H100: 14.3 s an
// iteration without the cache, 15.1 s for the first with it, 0.12 s
// after; the same under racecheck with the cache filled, 1.1 s.
func BenchmarkGPUOpen(b *testing.B) {
	cfg := defaultConfig()
	for b.Loop() {
		d, err := open(0, cfg)
		if errors.Is(err, ErrUnavailable) {
			b.Skipf("no CUDA driver or usable GPU: %v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := d.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(cfg.ptx)+len(cfg.ptx90a))/1e6, "ptx-MB")
}
