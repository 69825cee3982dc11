package kernels

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
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

// copyPrefix queues a device-to-device copy of the first n bytes of src
// into dst.
func copyPrefix(d *Device, dst, src *Buffer, n int64) error {
	return d.do(func() error {
		if err := d.operands("copyPrefix", operand{dst, "dst", n}, operand{src, "src", n}); err != nil {
			return err
		}
		return d.drv.MemcpyDtoDAsync(dst.ptr, src.ptr, n, d.stream)
	})
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

// decodeBenchShapes returns the shapes BenchmarkGPUDecode measures: the
// Llama-3 projections in BF16, and 8B gate_up in F16 too.
func decodeBenchShapes() []struct {
	dt checkpoint.DType
	modelShape
} {
	var out []struct {
		dt checkpoint.DType
		modelShape
	}
	for _, s := range llama3Shapes() {
		out = append(out, struct {
			dt checkpoint.DType
			modelShape
		}{checkpoint.BF16, s})
	}
	return append(out, struct {
		dt checkpoint.DType
		modelShape
	}{checkpoint.F16, modelShape{"llama3-8b", "gate_up", 14336, 4096}})
}

// benchBusy allocates the two buffers whose copy benchDecode queues
// before each batch.
func benchBusy(b *testing.B, d *Device) [2]*Buffer {
	b.Helper()
	var busy [2]*Buffer
	for i := range busy {
		busy[i] = alloc(b, d, benchBusyBytes)
	}
	if err := busy[0].memset(0x3c); err != nil {
		b.Fatal(err)
	}
	return busy
}

// BenchmarkGPUDecode times SparseMatmul's choice (auto: the decode kernel's
// default plan), on an sm_90a device the best plans without and with the
// warpgroup form (mma, wg) and the warpgroup form's best without the
// cooperative split-K sum (wg-tickets), the decode kernel's best plan that
// stages each slice's activations whole, the general sparse kernel and
// DenseMatmul on the Llama-3 projections at decode token counts, in BF16
// (and F16 for 8B gate_up), rotating weight copies so that L2 holds none
// of them, and
// beside them a device-to-device copy that moves the same bytes as the
// sparse product (memcpy: half of them read, half written), whose fixed
// cost per call is the floor of any kernel's. It measures the
// device-to-device copy bandwidth of a 1 GiB copy first and reports, per
// variant, the bytes the sparse product must move (packed + meta + x + y)
// over its time as a percentage of that bandwidth (dense: the dense
// weight's bytes). tools/gpu/decode_table.awk tabulates the log.
func BenchmarkGPUDecode(b *testing.B) {
	d := openGPU(b)
	rng := rand.New(rand.NewPCG(11, 11))
	busy := benchBusy(b, d)
	var copyBW float64 // bytes read + written per second
	b.Run("copy", func(b *testing.B) {
		per := benchDecode(b, d, busy, func(int) error { return busy[0].CopyFrom(busy[1]) })
		copyBW = 2 * benchBusyBytes / per.Seconds()
		b.ReportMetric(copyBW/1e9, "GB/s")
	})
	for _, s := range decodeBenchShapes() {
		name := fmt.Sprintf("%v/%s/%s_%dx%d", s.dt, s.model, s.proj, s.n, s.k)
		w := newWeight(b, d, rng, s.dt, s.n, s.k)
		packs, metas, denses := rotation(b, d, w.dPack), rotation(b, d, w.dMeta), rotation(b, d, w.dDense)
		x := upload16(b, d, randDense(rng, s.dt, launchplan.MaxTokens*s.k))
		y := alloc(b, d, 4*launchplan.MaxTokens*s.n)
		sink := alloc(b, d, s.n*s.k)
		for _, m := range []int{1, 2, 4, 8, 16, 32, 64} {
			sparseBytes := float64(s.n*s.k + s.n*s.k/8 + 2*m*s.k + 4*m*s.n)
			denseBytes := float64(2*s.n*s.k + 2*m*s.k + 4*m*s.n)
			variants := []struct {
				name string
				c    sparseChoice
			}{
				{"auto", sparseChoice{}},
				{"decode-whole", sparseChoice{kernel: sparseDecode, decode: launchplan.Options{Window: -1}}},
				{"general", sparseChoice{kernel: sparseTiled}},
			}
			if d.dec.lim.Warpgroup {
				// launchplan.Choose's choice without and with the warpgroup form,
				// beside auto (one of the two).
				variants = append(variants, []struct {
					name string
					c    sparseChoice
				}{
					{"mma", sparseChoice{kernel: sparseDecode, decode: launchplan.Options{Warpgroup: -1}}},
					{"wg", sparseChoice{kernel: sparseDecode, decode: launchplan.Options{Warpgroup: 1}}},
					{"wg-tickets", sparseChoice{kernel: sparseDecode, decode: launchplan.Options{Warpgroup: 1, Cooperative: -1}}},
				}...)
			}
			for _, v := range variants {
				b.Run(fmt.Sprintf("%s/m=%d/%s", name, m, v.name), func(b *testing.B) {
					per := benchDecode(b, d, busy, func(i int) error {
						return d.sparse("SparseMatmul", SparseOperands{Y: y, X: x, Packed: packs[i%len(packs)], Meta: metas[i%len(metas)], DType: s.dt, M: m, N: s.n, K: s.k}, v.c)
					})
					b.ReportMetric(100*sparseBytes/per.Seconds()/copyBW, "%copy")
				})
			}
			b.Run(fmt.Sprintf("%s/m=%d/memcpy", name, m), func(b *testing.B) {
				half := int64(sparseBytes / 2) // < n·k: inside a packed copy
				per := benchDecode(b, d, busy, func(i int) error {
					return copyPrefix(d, sink, packs[i%len(packs)], half)
				})
				b.ReportMetric(100*sparseBytes/per.Seconds()/copyBW, "%copy")
			})
			b.Run(fmt.Sprintf("%s/m=%d/dense", name, m), func(b *testing.B) {
				per := benchDecode(b, d, busy, func(i int) error {
					return d.DenseMatmul(DenseOperands{Y: y, X: x, W: denses[i%len(denses)], DType: s.dt, M: m, N: s.n, K: s.k})
				})
				b.ReportMetric(100*denseBytes/per.Seconds()/copyBW, "%copy")
			})
		}
		for _, bufs := range [][]*Buffer{packs[1:], metas[1:], denses[1:], {x, y, sink}} {
			freeAll(b, bufs...)
		}
		w.free(b)
	}
}

// BenchmarkGPUDecodeSweep times the decode kernel's mma.sp form (the one
// defaultModel describes) over the plans of gemvSweep (and its default
// plan) for the BF16 Llama-3 projections at decode token counts, rotating
// weight copies, and prints one line per plan as it is timed: shape, m,
// chunks per stage, warps, slices, GPU µs per product (the best of three
// batches, each after a large copy so that the host stays ahead).
// Run it with -test.benchtime 1x; tools/gpu/decode_sweep.awk
// summarises the log.
func BenchmarkGPUDecodeSweep(b *testing.B) {
	benchSweep(b, func(m, n, k int, lim launchplan.Limits) []launchplan.Options {
		return append([]launchplan.Options{{Warpgroup: -1}}, gemvSweep(m, n, k, lim)...)
	}, func(j int, p launchplan.Plan) string {
		if j == 0 {
			return "default"
		}
		return "sweep"
	})
}

// BenchmarkGPUDecodeSweepWG is BenchmarkGPUDecodeSweep for the warpgroup
// form (sm_90a devices), over the plans of gemvSweepWG (and launchplan.Choose's
// choice of that form, "wg-default"); its lines are of kind "wg", or
// "wg-coop" for a cooperative split-K sum, in the same format (w = 4,
// kw = 1).
func BenchmarkGPUDecodeSweepWG(b *testing.B) {
	benchSweep(b, func(m, n, k int, lim launchplan.Limits) []launchplan.Options {
		if !lim.Warpgroup {
			b.Skip("the warpgroup form needs an sm_90a device")
		}
		return append([]launchplan.Options{{Warpgroup: 1}}, gemvSweepWG(m, n, k, lim)...)
	}, func(j int, p launchplan.Plan) string {
		kind := "wg"
		if j == 0 {
			kind = "wg-default"
		}
		if p.Cooperative {
			kind += "-coop"
		}
		return kind
	})
}

// sweepShapes returns the shapes the planner's sweeps time: every Llama-3
// projection shape (llama3Shapes and 70B q/o and k/v).
func sweepShapes() []modelShape {
	return append(llama3Shapes(), modelShape{"llama3-70b", "q_o", 8192, 8192}, modelShape{"llama3-70b", "k_v", 1024, 8192})
}

// benchSweep times (with SFSURGERY_SWEEP_GRAPHS set, each batch of
// products captured once and replayed as a CUDA graph, as bench times
// them), for each BF16 Llama-3 projection (sweepShapes) and decode token
// count, the plans of plans(m, n, k) and prints a line for each as it is
// timed, of kind kind(j, plan) for the j-th.
func benchSweep(b *testing.B, plans func(m, n, k int, lim launchplan.Limits) []launchplan.Options, kind func(j int, p launchplan.Plan) string) {
	const batches = 3
	// SFSURGERY_SWEEP_GRAPHS=1 times each batch as one CUDA-graph replay.
	graphs := os.Getenv("SFSURGERY_SWEEP_GRAPHS") != ""
	d := openGPU(b)
	rng := rand.New(rand.NewPCG(12, 12))
	busy := benchBusy(b, d)
	plansTimed := 0
	for _, s := range sweepShapes() {
		name := fmt.Sprintf("%s/%s_%dx%d", s.model, s.proj, s.n, s.k)
		w := newWeight(b, d, rng, checkpoint.BF16, s.n, s.k)
		packs, metas := rotation(b, d, w.dPack), rotation(b, d, w.dMeta)
		x := upload16(b, d, randDense(rng, checkpoint.BF16, launchplan.MaxTokens*s.k))
		y := alloc(b, d, 4*launchplan.MaxTokens*s.n)
		for _, m := range []int{1, 2, 4, 8, 16, 32, 64} {
			for j, o := range plans(m, s.n, s.k, d.dec.lim) {
				c := sparseChoice{kernel: sparseDecode, decode: o}
				p, err := launchplan.Choose(m, s.n, s.k, d.dec.lim, o)
				if err != nil {
					b.Fatal(err)
				}
				i := 0
				product := func() error {
					i++
					return d.sparse("SparseMatmul", SparseOperands{Y: y, X: x, Packed: packs[i%len(packs)], Meta: metas[i%len(metas)], DType: checkpoint.BF16, M: m, N: s.n, K: s.k}, c)
				}
				if err := product(); err != nil { // plans it and grows the workspace
					b.Fatal(err)
				}
				batch := func() error {
					for range benchBatch {
						if err := product(); err != nil {
							return err
						}
					}
					return nil
				}
				var g *Graph
				if graphs { // the batch captured once and replayed, as bench times
					var err error
					if g, err = d.Capture(batch); err != nil {
						b.Fatal(err)
					}
					batch = g.Launch
				}
				if err := busy[1].CopyFrom(busy[0]); err != nil {
					b.Fatal(err)
				}
				times, err := d.ElapsedEach(batches, func(int) error { return batch() })
				if err == nil {
					err = g.Close()
				}
				if err != nil {
					b.Fatal(err)
				}
				best := slices.Min(times) / benchBatch
				// One line as soon as it is measured: a sweep cut short keeps
				// what it timed.
				fmt.Printf("%s %s m=%d sc=%d w=%d kw=%d s=%d cps=%d xw=%d us=%.2f\n", kind(j, p), name,
					m, p.ChunksPerStage, p.Warps, p.WarpsPerRowBlock, p.Slices, p.ChunksPerSlice, p.WindowChunks, float64(best.Nanoseconds())/1e3)
				plansTimed++
			}
		}
		for _, bufs := range [][]*Buffer{packs[1:], metas[1:], {x, y}} {
			freeAll(b, bufs...)
		}
		w.free(b)
	}
	b.Logf("%d plans", plansTimed)
}

// gemvSweep returns the decode-kernel plans BenchmarkGPUDecodeSweep times
// for m tokens and an n × k weight, in the mma.sp form: 2- and 4-chunk
// stages, 2 to 8 warps, 1, 2, 4 or 8 of them per row block, 1 to 64
// slices in steps of a quarter to a half, activations staged whole and in
// windows, each distinct plan once, none whose partial sums (written and
// read) would move more bytes than the weight.
func gemvSweep(m, n, k int, lim launchplan.Limits) []launchplan.Options {
	type shape struct{ sc, warps, kw, splits, xw int }
	seen := map[shape]bool{}
	var out []launchplan.Options
	for _, sc := range []int{2, 4} {
		for w := 2; w <= 8; w++ {
			for kw := 1; kw <= w; kw *= 2 {
				if w%kw != 0 {
					continue
				}
				for s := 1; s <= 64; s++ {
					if !launchplan.SweptSlices(s) {
						continue
					}
					for _, win := range []int{-1, 1} {
						o := launchplan.Options{ChunksPerStage: sc, Warps: w, WarpsPerRowBlock: kw, Slices: s, Window: win, Warpgroup: -1}
						p, err := launchplan.Choose(m, n, k, lim, o)
						key := shape{sc, w, kw, p.Slices, p.WindowChunks}
						if err != nil || seen[key] {
							continue
						}
						if p.Slices > 1 && 8*p.Slices*m*n > n*k*9/8 {
							continue
						}
						seen[key] = true
						out = append(out, o)
					}
				}
			}
		}
	}
	return out
}

// gemvSweepWG returns the warpgroup-form plans BenchmarkGPUDecodeSweepWG
// times for m tokens and an n × k weight: 2- and 4-chunk stages, the
// slice counts of gemvSweep, activations staged whole and in windows, and
// where launchplan.Choose allows it the cooperative split-K sum beside the ticket
// sum; each distinct plan once, none whose partial sums would move more
// bytes than the weight.
func gemvSweepWG(m, n, k int, lim launchplan.Limits) []launchplan.Options {
	type shape struct {
		sc, splits, xw int
		coop           bool
	}
	seen := map[shape]bool{}
	var out []launchplan.Options
	for _, sc := range []int{2, 4} {
		for s := 1; s <= 64; s++ {
			if !launchplan.SweptSlices(s) {
				continue
			}
			for _, win := range []int{-1, 1} {
				for _, coop := range []int{-1, 1} {
					o := launchplan.Options{ChunksPerStage: sc, Warps: 4, WarpsPerRowBlock: 1, Slices: s, Window: win, Warpgroup: 1, Cooperative: coop}
					p, err := launchplan.Choose(m, n, k, lim, o)
					if err != nil {
						continue
					}
					key := shape{sc, p.Slices, p.WindowChunks, p.Cooperative}
					if seen[key] || p.Slices > 1 && 8*p.Slices*m*n > n*k*9/8 {
						continue
					}
					seen[key] = true
					out = append(out, o)
				}
			}
		}
	}
	return out
}
