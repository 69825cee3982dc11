package kernels

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// prefillBenchShapes returns the shapes BenchmarkGPUPrefill measures: the
// Llama-3 projections where the prefill kernel is nearest dense (q/o,
// k/v, down) and the qkv stacks serving engines run.
func prefillBenchShapes() []modelShape {
	return []modelShape{
		{"llama3-8b", "q_o", 4096, 4096},
		{"llama3-8b", "k_v", 1024, 4096},
		{"llama3-8b", "qkv", 6144, 4096},
		{"llama3-8b", "down", 4096, 14336},
		{"llama3-70b", "k_v", 1024, 8192},
		{"llama3-70b", "qkv", 10240, 8192},
	}
}

// BenchmarkGPUPrefill times the prefill kernel's candidate plans (the
// planner's first ones, SparseCandidates, each run by
// SparseMatmulCandidate) beside DenseMatmul on prefillBenchShapes at 128
// to 1024 tokens in BF16, with f32 output, rotating weight copies so that
// L2 holds none of them and timing batches behind a large copy
// (benchDecode). Each candidate reports gpu-us/op and x-dense, the dense
// run's time over its own in the same run. It reads the PTX that
// SFSURGERY_TEST_PTX_SM90A names, so a fresh build of the kernel is timed
// without rebuilding the binary (tools/gpu/prefill_run.sh bench): a
// preview, timed back to back; `sfsurgery bench` (CUDA graphs, every
// shape and token count) makes the documents. Skips where the device has
// no prefill kernel.
func BenchmarkGPUPrefill(b *testing.B) {
	d := openGPU(b)
	if !d.hasPrefill() {
		b.Skip("no sm_90a module: " + d.dec.note)
	}
	rng := rand.New(rand.NewPCG(13, 13))
	busy := benchBusy(b, d)
	ms := []int{128, 256, 512, 1024}
	maxM := ms[len(ms)-1]
	for _, s := range prefillBenchShapes() {
		w := newWeight(b, d, rng, checkpoint.BF16, s.n, s.k)
		packs, metas, denses := rotation(b, d, w.dPack), rotation(b, d, w.dMeta), rotation(b, d, w.dDense)
		x := upload16(b, d, randDense(rng, checkpoint.BF16, maxM*s.k))
		y := alloc(b, d, 4*maxM*s.n)
		for _, m := range ms {
			name := fmt.Sprintf("%s/%s_%dx%d/m=%d", s.model, s.proj, s.n, s.k, m)
			var dense time.Duration
			b.Run(name+"/dense", func(b *testing.B) {
				dense = benchDecode(b, d, busy, func(i int) error {
					return d.DenseMatmul(DenseOperands{Y: y, X: x, W: denses[i%len(denses)], DType: checkpoint.BF16, M: m, N: s.n, K: s.k})
				})
			})
			cands, err := d.SparseCandidates(checkpoint.BF16, m, s.n, s.k)
			if err != nil {
				b.Fatal(err)
			}
			for i, c := range cands {
				b.Run(fmt.Sprintf("%s/%d_%s", name, i, strings.ReplaceAll(c, " ", "_")), func(b *testing.B) {
					per := benchDecode(b, d, busy, func(j int) error {
						return d.SparseMatmulCandidate(SparseOperands{Y: y, X: x, Packed: packs[j%len(packs)], Meta: metas[j%len(metas)],
							DType: checkpoint.BF16, M: m, N: s.n, K: s.k}, i)
					})
					if dense > 0 {
						b.ReportMetric(dense.Seconds()/per.Seconds(), "x-dense")
					}
				})
			}
		}
		for _, bufs := range [][]*Buffer{packs[1:], metas[1:], denses[1:], {x, y}} {
			freeAll(b, bufs...)
		}
		w.free(b)
	}
}
