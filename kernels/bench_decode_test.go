package kernels

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// Sizes of the decode benchmark.
const (
	benchBusyBytes   = 1 << 30   // a copy queued before each timed batch (about 0.5 ms)
	benchRotateBytes = 192 << 20 // weight copies rotated per variant: over 3× an H100's L2
	benchBatch       = 10        // products per timed batch
)

// benchDecode times the work of queue(i) for i = 0 … benchBatch-1 per
// b.Loop iteration and reports the GPU time per product. Before each batch
// it queues a large copy so that the host has queued the whole batch
// before the GPU reaches its first event: the time is the GPU's alone. It
// also reports the host's time to queue one product (host-us/op), which
// must stay well under the copy's time over benchBatch for that to hold.
func benchDecode(b *testing.B, d *Device, busy [2]*Buffer, queue func(i int) error) time.Duration {
	b.Helper()
	run := func() error {
		for i := range benchBatch {
			if err := queue(i); err != nil {
				return err
			}
		}
		return nil
	}
	if err := run(); err != nil { // warm-up
		b.Fatal(err)
	}
	var total, host time.Duration
	for b.Loop() {
		if err := busy[1].CopyFrom(busy[0]); err != nil {
			b.Fatal(err)
		}
		el, err := d.Elapsed(func() error {
			start := time.Now()
			err := run()
			host += time.Since(start)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		total += el
	}
	per := total / time.Duration(b.N*benchBatch)
	b.ReportMetric(float64(per.Nanoseconds())/1e3, "gpu-us/op")
	b.ReportMetric(float64(host.Nanoseconds())/1e3/float64(b.N*benchBatch), "host-us/op")
	return per
}

// rotation returns copies of buf (itself first) totalling at least
// benchRotateBytes.
func rotation(b *testing.B, d *Device, buf *Buffer) []*Buffer {
	b.Helper()
	out := []*Buffer{buf}
	for total := buf.Len(); total < benchRotateBytes; total += buf.Len() {
		c := alloc(b, d, int(buf.Len()))
		if err := c.CopyFrom(buf); err != nil {
			b.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// BenchmarkGPUDecode times the decode kernel (its default plan, 4-chunk
// stages, twice the slices, 2-, 4- and 8-warp CTAs), the general sparse kernel and
// DenseMatmul on the Llama-3 projections at decode token counts, in BF16
// (and F16 for 8B gate_up), rotating weight copies so that L2 holds none of
// them. It measures the device-to-device copy bandwidth first and reports,
// per sparse variant, the bytes it must move (packed + meta + x + y) over
// its time as a percentage of that bandwidth. A summary table ends the log.
func BenchmarkGPUDecode(b *testing.B) {
	d := openGPU(b)
	rng := rand.New(rand.NewPCG(11, 11))
	var busy [2]*Buffer
	for i := range busy {
		busy[i] = alloc(b, d, benchBusyBytes)
	}
	if err := busy[0].memset(0x3c); err != nil {
		b.Fatal(err)
	}
	var copyBW float64 // bytes read + written per second
	b.Run("copy", func(b *testing.B) {
		per := benchDecode(b, d, busy, func(int) error { return busy[0].CopyFrom(busy[1]) })
		copyBW = 2 * benchBusyBytes / per.Seconds()
		b.ReportMetric(copyBW/1e9, "GB/s")
	})
	type key struct {
		shape   string
		m       int
		variant string
	}
	res := map[key]time.Duration{}
	var rows []string
	shapes := []struct {
		dt DType
		modelShape
	}{}
	for _, s := range llama3Shapes() {
		shapes = append(shapes, struct {
			dt DType
			modelShape
		}{BF16, s})
	}
	shapes = append(shapes, struct {
		dt DType
		modelShape
	}{F16, modelShape{"llama3-8b", "gate_up", 14336, 4096}})
	ms := []int{1, 2, 4, 8, 16, 32, 64}
	for _, s := range shapes {
		name := fmt.Sprintf("%v/%s/%s_%dx%d", s.dt, s.model, s.proj, s.n, s.k)
		w := newWeight(b, d, rng, s.dt, s.n, s.k)
		packs, metas, denses := rotation(b, d, w.dPack), rotation(b, d, w.dMeta), rotation(b, d, w.dDense)
		x := upload16(b, d, randDense(rng, s.dt, gemvMaxTokens*s.k))
		y := alloc(b, d, 4*gemvMaxTokens*s.n)
		for _, m := range ms {
			sparseBytes := float64(s.n*s.k + s.n*s.k/8 + 2*m*s.k + 4*m*s.n)
			denseBytes := float64(2*s.n*s.k + 2*m*s.k + 4*m*s.n)
			auto, err := planGemv(m, s.n, s.k, d.fn.gemvLim, gemvOptions{})
			if err != nil {
				b.Fatal(err)
			}
			variants := []struct {
				name string
				c    sparseChoice
			}{
				{"decode", sparseChoice{kernel: sparseGemv}},
				{"decode-sc4", sparseChoice{kernel: sparseGemv, gemv: gemvOptions{sc: 4}}},
				{"decode-s*2", sparseChoice{kernel: sparseGemv, gemv: gemvOptions{splits: 2 * auto.splits}}},
				{"decode-w2", sparseChoice{kernel: sparseGemv, gemv: gemvOptions{warps: 2}}},
				{"decode-w4", sparseChoice{kernel: sparseGemv, gemv: gemvOptions{warps: 4}}},
				{"decode-w8", sparseChoice{kernel: sparseGemv, gemv: gemvOptions{warps: 8}}},
				{"general", sparseChoice{kernel: sparseGeneral}},
			}
			for _, v := range variants {
				b.Run(fmt.Sprintf("%s/m=%d/%s", name, m, v.name), func(b *testing.B) {
					if v.c.kernel == sparseGemv {
						if _, err := planGemv(m, s.n, s.k, d.fn.gemvLim, v.c.gemv); err != nil {
							b.Skip(err)
						}
					}
					per := benchDecode(b, d, busy, func(i int) error {
						return d.sparse(y, x, packs[i%len(packs)], metas[i%len(metas)], s.dt, m, s.n, s.k, v.c)
					})
					bw := sparseBytes / per.Seconds()
					b.ReportMetric(100*bw/copyBW, "%copy")
					res[key{name, m, v.name}] = per
				})
			}
			b.Run(fmt.Sprintf("%s/m=%d/dense", name, m), func(b *testing.B) {
				per := benchDecode(b, d, busy, func(i int) error {
					return d.DenseMatmul(y, x, denses[i%len(denses)], s.dt, m, s.n, s.k)
				})
				b.ReportMetric(100*denseBytes/per.Seconds()/copyBW, "%copy")
				res[key{name, m, "dense"}] = per
			})
			us := func(v string) float64 { return float64(res[key{name, m, v}].Nanoseconds()) / 1e3 }
			best := slices.MinFunc([]string{"decode", "decode-sc4", "decode-s*2", "decode-w2", "decode-w4", "decode-w8"}, func(a, c string) int {
				ra, rc := res[key{name, m, a}], res[key{name, m, c}]
				if ra == 0 { // skipped
					ra = time.Hour
				}
				if rc == 0 {
					rc = time.Hour
				}
				return cmp.Compare(ra, rc)
			})
			rows = append(rows, fmt.Sprintf("| %s | %d | %d×%d×%d | %.1f | %.0f%% | %s %.1f | %.1f | %.1f | %.2fx |",
				name, m, auto.warps, auto.splits, auto.cps, us("decode"), 100*sparseBytes/(us("decode")*1e-6)/copyBW,
				best, us(best), us("general"), us("dense"), us("dense")/us("decode")))
		}
		for _, bufs := range [][]*Buffer{packs[1:], metas[1:], denses[1:], {x, y}} {
			freeAll(b, bufs...)
		}
		w.free(b)
	}
	b.Logf("copy bandwidth %.0f GB/s (read + write), %v\n"+
		"| shape | m | warps×slices×chunks | decode µs | %% of copy BW | best variant µs | general µs | dense µs | dense/decode |\n"+
		"|---|---|---|---|---|---|---|---|---|\n%s", copyBW/1e9, d.Info(), strings.Join(rows, "\n"))
}
