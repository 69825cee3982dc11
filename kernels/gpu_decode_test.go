package kernels

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

func TestGPUCopyFrom(t *testing.T) {
	d := openGPU(t)
	src := []byte("2:4 weights stream at the copy bandwidth")
	s, err := d.Upload(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := alloc(t, d, len(src)+8)
	if err := dst.memset(0xee); err != nil {
		t.Fatal(err)
	}
	if err := dst.CopyFrom(s); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(src)+8)
	if err := dst.Download(got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:len(src)], src) || !bytes.Equal(got[len(src):], bytes.Repeat([]byte{0xee}, 8)) {
		t.Errorf("after CopyFrom: %q", got)
	}
	if err := s.CopyFrom(dst); !errors.Is(err, ErrArgument) {
		t.Errorf("CopyFrom into a smaller buffer: %v", err)
	}
	if err := dst.CopyFrom(dst); !errors.Is(err, ErrArgument) {
		t.Errorf("CopyFrom itself: %v", err)
	}
	if err := dst.CopyFrom(nil); !errors.Is(err, ErrArgument) {
		t.Errorf("CopyFrom(nil): %v", err)
	}
	var none *Buffer
	if err := none.CopyFrom(s); !errors.Is(err, ErrClosed) {
		t.Errorf("CopyFrom into nil: %v", err)
	}
	other := openGPU(t)
	o := alloc(t, other, len(src))
	if err := o.CopyFrom(s); !errors.Is(err, ErrArgument) {
		t.Errorf("CopyFrom across devices: %v", err)
	}
	freeAll(t, s)
	if err := dst.CopyFrom(s); !errors.Is(err, ErrClosed) {
		t.Errorf("CopyFrom a freed buffer: %v", err)
	}
}

// runSparse runs the sparse product with kernel choice c into a poisoned
// output and returns it. With SFSURGERY_TEST_NO_PAIR set it runs a plan
// with the pair sum as the same plan with tickets.
func runSparse(t testing.TB, d *Device, dt checkpoint.DType, w *weight, x *Buffer, m int, c sparseChoice) []float32 {
	t.Helper()
	c = noPair(c)
	y := poisoned(t, d, m*w.n)
	defer freeAll(t, y)
	if err := d.sparse("SparseMatmul", SparseOperands{Y: y, X: x, Packed: w.dPack, Meta: w.dMeta, DType: dt, M: m, N: w.n, K: w.k}, c); err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return downloadF32(t, y, m*w.n)
}

// gemvChoices are decode-kernel plans that cover its cases: the default,
// 3-warp CTAs with 2-chunk stages and two slices (partial sums added), one
// warp per CTA with 4-chunk stages and as many slices as chunks (a stage
// mostly past the slice), two row blocks of two warps each per CTA over
// two slices (a last round one warp short when a slice has an odd number
// of stages), and eight warps on one row block (most of them without a
// stage when k is small). Where a slice holds more than one window of
// activations (k ≥ 17 chunks) it adds windows: 4-warp CTAs with 2-chunk
// stages and two slices, 3-warp CTAs with 4-chunk stages and one slice,
// and (up to m = 32, whose windows fit beside the rings) 4-warp CTAs of
// two row blocks of two warps with one slice, each with a last window
// shorter than the others. On a device with the warpgroup form (lim.Warpgroup)
// it adds that form: launchplan.Choose's choice, 2-chunk stages over two slices, a
// slice per chunk (three of each four chunks of the buffer past it), one
// slice staged whole (k = 5 chunks: a buffer rounded up to 8) and, where a
// slice holds more than one window, windows over one and two slices, and
// from 33 tokens the cooperative split-K sum (launchplan.Choose's, and 2-chunk
// stages over 3 slices), and from 9 tokens token groups (of 8 tokens over
// two slices, of 16 in 4-chunk stages: a last group short of tokens; two
// groups in clusters and without), and CTAs of 64 rows (a pair, two slices
// by tickets, one slice, and a pair in windows) and a pair of 128-row
// CTAs, and the hybrid's CTAs of 32 rows (launchplan.Choose's choice among them, a
// pair, two slices by tickets, three slices, one slice in windows of 16
// chunks where k holds more than one); those that fit in lim's shared
// memory.
func gemvChoices(m, k int, lim launchplan.Limits) []sparseChoice {
	c := []sparseChoice{
		{kernel: sparseDecode, decode: launchplan.Options{}},
		{kernel: sparseDecode, decode: launchplan.Options{ChunksPerStage: 2, Warps: 3, Slices: 2}},
		{kernel: sparseDecode, decode: launchplan.Options{ChunksPerStage: 4, Warps: 1, Slices: k / launchplan.ChunkColumns}},
		{kernel: sparseDecode, decode: launchplan.Options{ChunksPerStage: 2, Warps: 4, WarpsPerRowBlock: 2, Slices: 2}},
		{kernel: sparseDecode, decode: launchplan.Options{ChunksPerStage: 2, Warps: 8, WarpsPerRowBlock: 8}},
	}
	if k/launchplan.ChunkColumns >= 2*8+1 {
		c = append(c,
			sparseChoice{kernel: sparseDecode, decode: launchplan.Options{ChunksPerStage: 2, Warps: 4, Slices: 2, Window: 1}},
			sparseChoice{kernel: sparseDecode, decode: launchplan.Options{ChunksPerStage: 4, Warps: 3, Slices: 1, Window: 1}})
	}
	if k/launchplan.ChunkColumns >= 2*12+1 && m <= 32 {
		c = append(c, sparseChoice{kernel: sparseDecode, decode: launchplan.Options{ChunksPerStage: 2, Warps: 4, WarpsPerRowBlock: 2, Slices: 1, Window: 1}})
	}
	if !lim.Warpgroup {
		return c
	}
	wg := []launchplan.Options{{Warpgroup: 1}, {Warpgroup: 1, ChunksPerStage: 2, Slices: 2}, {Warpgroup: 1, ChunksPerStage: 4, Slices: k / launchplan.ChunkColumns},
		{Warpgroup: 1, ChunksPerStage: 4, Slices: 1, Window: -1}}
	if k/launchplan.ChunkColumns >= 2*8+1 {
		wg = append(wg, launchplan.Options{Warpgroup: 1, ChunksPerStage: 4, Slices: 1, Window: 1}, launchplan.Options{Warpgroup: 1, ChunksPerStage: 2, Slices: 2, Window: 1})
	}
	wg = append(wg, launchplan.Options{Cooperative: 1}, launchplan.Options{Cooperative: 1, ChunksPerStage: 2, Slices: 3},
		launchplan.Options{TokenTiles: 1, Slices: 2}, launchplan.Options{TokenTiles: 2, ChunksPerStage: 4}, launchplan.Options{TokenTiles: 2, ChunksPerStage: 4, Cluster: -1},
		launchplan.Options{Rows: 64, Pair: 1}, launchplan.Options{Rows: 64, Pair: -1, ChunksPerStage: 2, Slices: 2},
		launchplan.Options{Rows: 64, ChunksPerStage: 4, Slices: 1}, launchplan.Options{Rows: 128, Pair: 1, ChunksPerStage: 2})
	if k/launchplan.ChunkColumns >= 2*8+1 {
		wg = append(wg, launchplan.Options{Rows: 64, Pair: 1, ChunksPerStage: 4, Window: 1})
	}
	wg = append(wg, launchplan.Options{Rows: 32}, launchplan.Options{Rows: 32, Pair: 1, ChunksPerStage: 2}, launchplan.Options{Rows: 32, Pair: -1, Slices: 2},
		launchplan.Options{Rows: 32, ChunksPerStage: 4, Slices: 3}, launchplan.Options{Rows: 32, ChunksPerStage: 2, Slices: 1, Window: 1})
	for _, o := range wg {
		if _, err := launchplan.Choose(m, 32, k, lim, o); err == nil {
			c = append(c, sparseChoice{kernel: sparseDecode, decode: o})
		}
	}
	return c
}

// TestGPUDecodeSmall checks the decode kernel on small shapes against a
// float64 reference over the whole output: every token tile count, m not
// a multiple of 8, a last CTA with idle warps (n = 288), one and several
// slices, one to eight warps per row block, activations staged whole and
// in windows (k = 1600: 25 chunks, also with idle warps, which must keep
// to the CTA's barriers). The sanitizer runs use it; its subtests, named
// form/dtype/shape (TestGPUDecodeSmall/wg/F16/n288k1600), split the
// choices by form (gemvChoiceForm), element type and shape, so that a
// sanitizer can take a part that fits its time (tools/gpu/racecheck_all.sh
// runs racecheck over all of them as eight processes at once), and
// -test.short keeps two shapes and three token counts.
func TestGPUDecodeSmall(t *testing.T) {
	d := openGPU(t)
	shapes := []struct{ n, k int }{{32, 64}, {96, 192}, {288, 320}, {64, 640}, {288, 1600}}
	tokens := []int{1, 2, 5, 8, 9, 16, 17, 33, 64}
	if testing.Short() {
		shapes, tokens = []struct{ n, k int }{{96, 192}, {288, 1600}}, []int{1, 17, 64}
	}
	for _, form := range []string{"mma", "wg", "pair", "hy"} {
		for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
			for _, s := range shapes {
				t.Run(fmt.Sprintf("%s/%v/n%dk%d", form, dt, s.n, s.k), func(t *testing.T) {
					rng := testRand(t)
					w := newWeight(t, d, rng, dt, s.n, s.k)
					defer w.free(t)
					xs := randDense(rng, dt, launchplan.MaxTokens*s.k)
					x := upload16(t, d, xs)
					defer freeAll(t, x)
					cols := make([]int, s.n)
					for i := range cols {
						cols[i] = i
					}
					for _, m := range tokens {
						ref := refColumns(dt, xs, w.dense, m, s.k, cols)
						for _, c := range gemvChoices(m, s.k, d.dec.lim) {
							if gemvChoiceForm(c.decode) != form {
								continue
							}
							what := fmt.Sprintf("%v n%d k%d m%d %+v", dt, s.n, s.k, m, c)
							got := runSparse(t, d, dt, w, x, m, c)
							checkClose(t, what, s.k, got, ref)
							if testing.Verbose() {
								// A trail for the sanitizer runs, which take
								// seconds a launch.
								t.Logf("%s: checked", what)
							}
						}
					}
				})
			}
		}
	}
}

// gemvChoiceForm names the form a choice of gemvChoices forces: "hy" (the
// hybrid's 32-row CTAs), "pair" (64-row CTAs or the pair sum), "wg" (the
// rest of the warpgroup form) or "mma" (the mma.sp kernel, and launchplan.Choose's
// own choice).
func gemvChoiceForm(o launchplan.Options) string {
	switch {
	case o.Rows == 32:
		return "hy"
	case o.Rows == 64 || o.Pair == 1:
		return "pair"
	case o.Warpgroup == 1 || o.Cooperative == 1 || o.TokenTiles != 0 || o.Rows != 0:
		return "wg"
	}
	return "mma"
}

// TestGPUDecodeDeterministic checks the split-K launches of the decode
// kernel: the same product twice gives the same bits, and a plan launched
// again and again stays right, also after other plans (a larger n, more
// slices of more tokens) have grown the workspace it shares. A ticket
// counter left non-zero would leave y unwritten (NaN) or summed early.
func TestGPUDecodeDeterministic(t *testing.T) {
	d := openGPU(t)
	rng := testRand(t)
	type run struct {
		w *weight
		m int
		c sparseChoice
	}
	const k = 640 // 10 chunks
	small := newWeight(t, d, rng, checkpoint.BF16, 288, k)
	defer small.free(t)
	large := newWeight(t, d, rng, checkpoint.BF16, 4096, 2*k)
	defer large.free(t)
	xs := randDense(rng, checkpoint.BF16, launchplan.MaxTokens*2*k)
	x := upload16(t, d, xs)
	defer freeAll(t, x)
	decode := func(o launchplan.Options) sparseChoice { return sparseChoice{kernel: sparseDecode, decode: o} }
	runs := []run{
		{small, 1, decode(launchplan.Options{Slices: 2})},
		{small, 7, decode(launchplan.Options{ChunksPerStage: 2, Warps: 3, Slices: 5})},
		{small, 33, decode(launchplan.Options{ChunksPerStage: 4, Warps: 1, Slices: k / launchplan.ChunkColumns})},
		{small, 9, decode(launchplan.Options{ChunksPerStage: 2, Warps: 4, WarpsPerRowBlock: 2, Slices: 2})}, // sums of two warps, then of two slices
		{large, 64, decode(launchplan.Options{Warps: 2, Slices: 20})},                                       // grows the workspace
		{small, 1, decode(launchplan.Options{Slices: 2})},
		{large, 3, decode(launchplan.Options{ChunksPerStage: 4, Warps: 8, Slices: 4})},
		{large, 64, decode(launchplan.Options{ChunksPerStage: 2, Warps: 4, Slices: 2, Window: 1})}, // windows of activations
		{large, 17, decode(launchplan.Options{ChunksPerStage: 2, Warps: 8, WarpsPerRowBlock: 4, Slices: 2})},
		{small, 7, decode(launchplan.Options{ChunksPerStage: 2, Warps: 3, Slices: 5})},
		{small, 33, decode(launchplan.Options{ChunksPerStage: 4, Warps: 1, Slices: k / launchplan.ChunkColumns})},
	}
	if d.dec.lim.Warpgroup {
		runs = append(runs,
			run{large, 64, decode(launchplan.Options{Warpgroup: 1, Slices: 2})},
			run{small, 9, decode(launchplan.Options{Warpgroup: 1, ChunksPerStage: 2, Slices: 5})},
			run{small, 1, decode(launchplan.Options{Slices: 2})},
			run{large, 17, decode(launchplan.Options{Warpgroup: 1, ChunksPerStage: 4, Slices: 3})},
			run{large, 64, decode(launchplan.Options{Cooperative: 1, Slices: 4})}, // cooperative sums, then tickets on the same counters
			run{small, 40, decode(launchplan.Options{Cooperative: 1, ChunksPerStage: 2, Slices: 5})},
			run{large, 64, decode(launchplan.Options{Warpgroup: 1, Slices: 2})})
	}
	first := map[string][]float32{}
	for rep := range 3 {
		for _, r := range runs {
			name := fmt.Sprintf("n%d m%d %+v", r.w.n, r.m, r.c.decode)
			if rep == 0 {
				if p, err := launchplan.Choose(r.m, r.w.n, r.w.k, d.dec.lim, r.c.decode); err != nil || p.Slices < 2 {
					t.Fatalf("%s: plan %+v, %v: want several slices", name, p, err)
				}
			}
			got := runSparse(t, d, checkpoint.BF16, r.w, x, r.m, r.c)
			want, ok := first[name]
			if !ok {
				cols := make([]int, r.w.n)
				for i := range cols {
					cols[i] = i
				}
				checkClose(t, name, r.w.k, got, refColumns(checkpoint.BF16, xs, r.w.dense, r.m, r.w.k, cols))
				first[name] = got
				continue
			}
			if i := bitDiff(got, want); i >= 0 {
				t.Errorf("%s, call %d: y[%d] = %v, first call %v", name, rep+1, i, got[i], want[i])
			}
		}
	}
}

// TestGPUDecodeCoopFallback checks a cooperative plan whose CTAs do not all
// fit on the GPU at once (planned here for a device claiming far more SMs
// than it has, as on a shared or partitioned GPU): its launch falls back to
// the last slice's sum, with the same bits as the ticket plan, and the
// cached plan stops being cooperative.
func TestGPUDecodeCoopFallback(t *testing.T) {
	d := openGPU(t)
	if !d.dec.lim.Warpgroup {
		t.Skip("no warpgroup form (sm_90a) on this device: no cooperative plans")
	}
	saved := d.dec.lim
	d.dec.lim.SMs *= 100
	d.dec.records = nil // plans made with the real limits
	defer func() {
		d.dec.lim = saved
		d.dec.records = nil
	}()
	rng := testRand(t)
	const m, n, k = 64, 14336, 4096 // 112 row groups × 4 slices: 448 CTAs, more than fit
	w := newWeight(t, d, rng, checkpoint.BF16, n, k)
	defer w.free(t)
	x := upload16(t, d, randDense(rng, checkpoint.BF16, m*k))
	defer freeAll(t, x)
	coopOpts := launchplan.Options{Cooperative: 1, Slices: 4, ChunksPerStage: 2}
	p, err := launchplan.Choose(m, n, k, d.dec.lim, coopOpts)
	if err != nil || !p.Cooperative {
		t.Fatalf("plan %v, %v: want a cooperative plan", p, err)
	}
	if l, err := p.Launch(checkpoint.BF16, m, n, k); err != nil || int(l.Grid[0]*l.Grid[1]) <= saved.SMs {
		t.Fatalf("launch %+v, %v: want a cooperative launch of more than %d CTAs", l, err, saved.SMs)
	}
	tickets := runSparse(t, d, checkpoint.BF16, w, x, m, sparseChoice{kernel: sparseDecode, decode: launchplan.Options{Cooperative: -1, Warpgroup: 1, Slices: 4, ChunksPerStage: 2}})
	checkFallback(t, d, w, x, m, coopOpts, tickets, nil, func(l launchplan.Launch) bool { return !l.Cooperative })
}

// checkFallback runs the decode kernel with opts on w and x (BF16) at m
// tokens, after alter (unless nil) has changed the launch record cached
// for them into one the driver refuses, and checks that the run falls
// back: its result has the bits of want, and the record cached for opts
// afterwards is one that fell accepts as the fallback.
func checkFallback(t *testing.T, d *Device, w *weight, x *Buffer, m int, opts launchplan.Options, want []float32,
	alter func(*launchplan.Launch), fell func(launchplan.Launch) bool) {
	t.Helper()
	key := decodeKey{checkpoint.BF16, m, w.n, w.k, opts, 0}
	if alter != nil {
		l, ok := d.dec.records[key]
		if !ok || l.Fallback == nil {
			t.Fatalf("no launch with a fallback cached for %+v: %+v", key, l)
		}
		alter(&l)
		d.dec.records[key] = l
	}
	got := runSparse(t, d, checkpoint.BF16, w, x, m, sparseChoice{kernel: sparseDecode, decode: opts})
	if i := bitDiff(got, want); i >= 0 {
		t.Errorf("%+v: y[%d] = %v after the fallback, want %v", opts, i, got[i], want[i])
	}
	if l, ok := d.dec.records[key]; !ok || !fell(l) {
		t.Errorf("%+v: cached launch %+v (found %v): want the fallback", opts, l, ok)
	}
}

// TestGPUDecodeClusterFallback checks that a token-group plan whose
// cluster launch the driver refuses runs without clusters, with the same
// bits, and is cached that way: the cached plan is given clusters of 3,
// which its 2 groups cannot be split into.
func TestGPUDecodeClusterFallback(t *testing.T) {
	d := openGPU(t)
	if !d.dec.lim.Warpgroup {
		t.Skip("no warpgroup form (sm_90a) on this device: no token groups")
	}
	rng := testRand(t)
	const m, n, k = 32, 1024, 4096
	w := newWeight(t, d, rng, checkpoint.BF16, n, k)
	defer w.free(t)
	x := upload16(t, d, randDense(rng, checkpoint.BF16, m*k))
	defer freeAll(t, x)
	opts := launchplan.Options{TokenTiles: 2, ChunksPerStage: 4, Slices: 4}
	plain := runSparse(t, d, checkpoint.BF16, w, x, m, sparseChoice{kernel: sparseDecode, decode: launchplan.Options{TokenTiles: 2, ChunksPerStage: 4, Slices: 4, Cluster: -1}})
	cl := runSparse(t, d, checkpoint.BF16, w, x, m, sparseChoice{kernel: sparseDecode, decode: opts})
	key := decodeKey{checkpoint.BF16, m, n, k, opts, 0}
	l, ok := d.dec.records[key]
	if !ok || l.Cluster != [3]uint32{1, 1, 2} || l.Grid[2] != 2 {
		t.Fatalf("cached launch %+v (found %v): want two token groups in clusters of 2", l, ok)
	}
	if i := bitDiff(cl, plain); i >= 0 {
		t.Errorf("y[%d] = %v in clusters, %v without", i, cl[i], plain[i])
	}
	checkFallback(t, d, w, x, m, opts, plain, func(l *launchplan.Launch) { l.Cluster[2] = 3 },
		func(l launchplan.Launch) bool { return l.Cluster == [3]uint32{} })
}

// TestGPUDecodePair checks the pair sum (two slices of the warpgroup form,
// the second's sums pushed into the first's shared memory): with CTAs of
// 64 and of 128 rows it gives the bits of the ticket sum over the same two
// slices, whose order of additions it copies, for token counts on both
// sides of reduce's two orders (M ≤ 3 and M ≥ 4), with idle row blocks
// (n = 96: a 64-row CTA with one), and both data types. Then a cached pair
// plan given three slices, whose clusters of two do not tile the grid, is
// refused by the driver and falls back to the ticket sum, with its bits,
// and the plan is cached without the pair.
func TestGPUDecodePair(t *testing.T) {
	d := openGPU(t)
	if !d.dec.lim.Warpgroup {
		t.Skip("no warpgroup form (sm_90a) on this device: no pairs")
	}
	rng := testRand(t)
	for _, s := range []struct{ n, k int }{{96, 1600}, {1024, 4096}} {
		for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
			w := newWeight(t, d, rng, dt, s.n, s.k)
			for _, m := range []int{1, 3, 4, 16, 33, 64} {
				x := upload16(t, d, randDense(rng, dt, m*s.k))
				want := runSparse(t, d, dt, w, x, m, sparseChoice{kernel: sparseDecode,
					decode: launchplan.Options{Rows: 128, Pair: -1, Slices: 2}})
				for _, o := range []launchplan.Options{{Rows: 128, Pair: 1}, {Rows: 64, Pair: 1},
					{Rows: 64, Pair: -1, Slices: 2}, {Rows: 64, Pair: 1, ChunksPerStage: 2, Window: 1}} {
					if _, err := launchplan.Choose(m, s.n, s.k, d.dec.lim, o); err != nil {
						continue // the windows need k of 17 chunks or more
					}
					got := runSparse(t, d, dt, w, x, m, sparseChoice{kernel: sparseDecode, decode: o})
					if i := bitDiff(got, want); i >= 0 {
						t.Errorf("%v n%d k%d m%d %+v: y[%d] = %v, the ticket sum %v", dt, s.n, s.k, m, o, i, got[i], want[i])
					}
				}
				freeAll(t, x)
			}
			w.free(t)
		}
	}

	checkPairFallback(t, d, rng, 16, 4096, 4096, launchplan.Options{Rows: 64, Pair: 1}, "gemv_wg64")
}

// checkPairFallback runs the pair plan of opts (CTAs of the kernel family
// family: gemv_wg64 or gemv_hy) on a BF16 n × k weight and m tokens,
// checks that it is cached as a pair of two slices, then gives the cached
// launch three slices, whose clusters of two do not tile the grid: the
// driver refuses the launch, and the run must fall back to the ticket sum
// with the bits of the same plan over three slices, and cache the launch
// without the pair.
func checkPairFallback(t *testing.T, d *Device, rng *rand.Rand, m, n, k int, opts launchplan.Options, family string) {
	t.Helper()
	w := newWeight(t, d, rng, checkpoint.BF16, n, k)
	defer w.free(t)
	x := upload16(t, d, randDense(rng, checkpoint.BF16, m*k))
	defer freeAll(t, x)
	tickets := opts
	tickets.Pair, tickets.Slices = -1, 3
	three := runSparse(t, d, checkpoint.BF16, w, x, m, sparseChoice{kernel: sparseDecode, decode: tickets})
	runSparse(t, d, checkpoint.BF16, w, x, m, sparseChoice{kernel: sparseDecode, decode: opts})
	key := decodeKey{checkpoint.BF16, m, n, k, opts, 0}
	l, ok := d.dec.records[key]
	if !ok || !strings.HasPrefix(l.Entry, family+"_pair_") || l.Grid[1] != 2 || l.Cluster != [3]uint32{1, 2, 1} {
		t.Fatalf("cached launch %+v (found %v): want a pair of two slices of %s", l, ok, family)
	}
	// Three slices: the workspace already holds them (the plan above).
	checkFallback(t, d, w, x, m, opts, three, func(l *launchplan.Launch) { l.Grid[1], l.Fallback.Grid[1] = 3, 3 },
		func(l launchplan.Launch) bool {
			return strings.HasPrefix(l.Entry, family+"_") && !strings.Contains(l.Entry, "_pair") && l.Cluster == [3]uint32{}
		})
}

// TestGPUDecodeHybrid checks the hybrid (CTAs of one 32-row block, the
// warpgroup form's producer feeding four mma.sp consumer warps; sm_90a):
// its products and sums are those of the mma.sp kernel with four warps on
// one row block (kw = 4), bit for bit, over the same slices and stage
// size, staged whole and in windows, for one to three slices (two also
// as a pair), token counts on both sides of reduce's two orders and of
// the tiles, with idle and short stages (k = 1600: 25 chunks), and both
// data types. Then a cached hybrid pair given three slices, whose clusters
// of two do not tile the grid, falls back to the ticket sum, with its
// bits, and is cached without the pair.
func TestGPUDecodeHybrid(t *testing.T) {
	d := openGPU(t)
	if !d.dec.lim.Warpgroup {
		t.Skip("no warpgroup form (sm_90a) on this device: no hybrid")
	}
	rng := testRand(t)
	compared := 0
	for _, s := range []struct{ n, k int }{{96, 1600}, {1024, 4096}, {288, 320}} {
		for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
			w := newWeight(t, d, rng, dt, s.n, s.k)
			for _, m := range []int{1, 3, 4, 8, 9, 16} {
				x := upload16(t, d, randDense(rng, dt, m*s.k))
				for _, o := range []launchplan.Options{{Rows: 32, Slices: 1, ChunksPerStage: 4}, {Rows: 32, Slices: 1, ChunksPerStage: 2, Window: 1},
					{Rows: 32, Pair: 1, Slices: 2, ChunksPerStage: 4}, {Rows: 32, Pair: -1, Slices: 2, ChunksPerStage: 2}, {Rows: 32, Slices: 3, ChunksPerStage: 4}} {
					p, err := launchplan.Choose(m, s.n, s.k, d.dec.lim, o)
					if err != nil {
						continue // one window: k of 17 chunks or more a slice
					}
					if p.RowBlocks != 1 || p.Pair != (o.Pair == 1) {
						t.Fatalf("%+v: plan %v, want the hybrid", o, p)
					}
					ref := launchplan.Options{Warpgroup: -1, Warps: 4, WarpsPerRowBlock: 4, Slices: p.Slices, ChunksPerStage: p.ChunksPerStage}
					if _, err := launchplan.Choose(m, s.n, s.k, d.dec.lim, ref); err != nil {
						// Four rings of the mma.sp kernel and its windows
						// (twice the hybrid's) outgrow shared memory
						// (k = 4096, m = 16, sc = 4).
						t.Logf("%v n%d k%d m%d %v: no reference: %v", dt, s.n, s.k, m, p, err)
						continue
					}
					compared++
					want := runSparse(t, d, dt, w, x, m, sparseChoice{kernel: sparseDecode, decode: ref})
					got := runSparse(t, d, dt, w, x, m, sparseChoice{kernel: sparseDecode, decode: o})
					if i := bitDiff(got, want); i >= 0 {
						t.Errorf("%v n%d k%d m%d %v: y[%d] = %v, the mma.sp kernel's %v", dt, s.n, s.k, m, p, i, got[i], want[i])
					}
				}
				freeAll(t, x)
			}
			w.free(t)
		}
	}
	if compared < 150 {
		t.Errorf("%d hybrid plans compared with the mma.sp kernel, want at least 150", compared)
	}

	checkPairFallback(t, d, rng, 4, 1024, 4096, launchplan.Options{Rows: 32, Pair: 1, ChunksPerStage: 4}, "gemv_hy")
}

// TestGPUDecodeDegenerate runs the decode kernel on weights whose groups
// keep fewer than 2 values: all zero (y must be exactly zero, also when
// partial sums are added) and one value per group.
func TestGPUDecodeDegenerate(t *testing.T) {
	d := openGPU(t)
	rng := testRand(t)
	const m, n, k = 13, 96, 256
	for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
		xs := randDense(rng, dt, m*k)
		x := upload16(t, d, xs)
		for _, pos := range []int{-1, 0, 3, 4} { // -1: all zero; 4: the position varies per group
			dense := make([]uint16, n*k)
			if pos >= 0 {
				for g := 0; g < n*k/4; g++ {
					p := pos
					if pos == 4 {
						p = rng.IntN(4)
					}
					dense[4*g+p] = randValue(rng, dt)
				}
			}
			w := &weight{n: n, k: k, dense: dense}
			w.packed, w.meta = packAmpere(dense, n, k)
			w.dDense, w.dPack, w.dMeta = upload16(t, d, w.dense), upload16(t, d, w.packed), upload16(t, d, w.meta)
			ref := refColumns(dt, xs, dense, m, k, []int{0, 1, 16, 31, 63, n - 1})
			for _, c := range gemvChoices(m, k, d.dec.lim) {
				got := runSparse(t, d, dt, w, x, m, c)
				if pos < 0 {
					for i, v := range got {
						if v != 0 {
							t.Fatalf("%v all-zero weight %+v: y[%d] = %v", dt, c, i, v)
						}
					}
				}
				checkClose(t, fmt.Sprintf("%v pos %d %+v", dt, pos, c), k,
					pickColumns(got, m, n, []int{0, 1, 16, 31, 63, n - 1}), ref)
			}
			w.free(t)
		}
		freeAll(t, x)
	}
}

// TestGPUDecodeCorruptMeta flips one metadata nibble of a row to another
// valid value and checks that the decode kernel's output changes in exactly
// that column: rows read with selector 0 (g, g+8) and 1 (16+g, 24+g), a
// random group of the row (so any chunk and slice), one and two slices
// and, at 40 tokens, the cooperative split-K sum.
func TestGPUDecodeCorruptMeta(t *testing.T) {
	d := openGPU(t)
	rng := testRand(t)
	const n, k = 64, 256
	dt := checkpoint.F16
	for _, m := range []int{1, 13, 40} {
		xs := randDense(rng, dt, m*k)
		x := upload16(t, d, xs)
		for _, row := range []int{5, 13, 21, 30, 40, 60} {
			w := newWeight(t, d, rng, dt, n, k)
			var full []int // groups of the row with two values
			for g := 0; g < k/4; g++ {
				cnt := 0
				for _, v := range w.dense[row*k+4*g : row*k+4*g+4] {
					if v != 0 {
						cnt++
					}
				}
				if cnt == 2 {
					full = append(full, g)
				}
			}
			if len(full) == 0 {
				t.Fatalf("row %d has no group with 2 values", row)
			}
			g := full[rng.IntN(len(full))]
			idx := metaIndex(row, g/4, n)
			shift := 4 * (g % 4)
			old := (w.meta[idx] >> shift) & 0xf
			nib := uint16(0x4)
			if old == 0x4 {
				nib = 0xe
			}
			bad := append([]uint16(nil), w.meta...)
			bad[idx] = bad[idx]&^(0xf<<shift) | nib<<shift
			good := w.dMeta
			choices := []sparseChoice{{kernel: sparseDecode, decode: launchplan.Options{Slices: 1, Warpgroup: -1}},
				{kernel: sparseDecode, decode: launchplan.Options{ChunksPerStage: 2, Slices: 2, Warpgroup: -1}}}
			if d.dec.lim.Warpgroup {
				choices = append(choices, sparseChoice{kernel: sparseDecode, decode: launchplan.Options{Slices: 1, Warpgroup: 1}},
					sparseChoice{kernel: sparseDecode, decode: launchplan.Options{ChunksPerStage: 2, Slices: 2, Warpgroup: 1}})
				if m >= launchplan.CooperativeMinTokens {
					choices = append(choices, sparseChoice{kernel: sparseDecode, decode: launchplan.Options{ChunksPerStage: 2, Slices: 2, Cooperative: 1}})
				}
			}
			for _, c := range choices {
				w.dMeta = good
				want := runSparse(t, d, dt, w, x, m, c)
				w.dMeta = upload16(t, d, bad)
				got := runSparse(t, d, dt, w, x, m, c)
				freeAll(t, w.dMeta)
				for col := 0; col < n; col++ {
					rel, _ := diff(pickColumns(got, m, n, []int{col}), pickColumns(want, m, n, []int{col}))
					if col == row && rel <= tolerance(k) {
						t.Errorf("m=%d %+v row %d: nibble %#x→%#x in group %d not detected (relative error %.3g)",
							m, c, row, old, nib, g, rel)
					}
					if col != row && rel > tolerance(k) {
						t.Errorf("m=%d %+v row %d corrupted, but column %d differs too (relative error %.3g)",
							m, c, row, col, rel)
					}
				}
			}
			w.dMeta = good
			w.free(t)
		}
		freeAll(t, x)
	}
}

// llama3Shapes returns the projection shapes of Llama-3-8B and -70B that
// the decode kernel is measured on.
func llama3Shapes() []modelShape {
	return []modelShape{
		{"llama3-8b", "q_o", 4096, 4096},
		{"llama3-8b", "k_v", 1024, 4096},
		{"llama3-8b", "gate_up", 14336, 4096},
		{"llama3-8b", "down", 4096, 14336},
		{"llama3-70b", "gate_up", 28672, 8192},
		{"llama3-70b", "down", 8192, 28672},
	}
}

// decodeModelCases returns the token counts and shapes the decode tests
// run on the Llama-3 projections: all of them (counts not multiples of 8
// among them), or with -short the 8B shapes and four counts.
func decodeModelCases() ([]int, []modelShape) {
	if testing.Short() {
		return []int{1, 13, 32, 64}, llama3Shapes()[:4]
	}
	return []int{1, 3, 8, 13, 16, 32, 47, 64}, llama3Shapes()
}

// TestGPUDecodeModels runs the decode kernel on the Llama-3 projection
// shapes, BF16 and F16, at decode token counts (some not multiples of 8):
// against DenseMatmul and the general sparse kernel over the whole output,
// sampled columns against float64, and SparseMatmul bit for bit against
// the decode kernel's default plan (it must dispatch there at m ≤ 64, and
// the kernel is deterministic). -short keeps the 8B shapes and four counts.
func TestGPUDecodeModels(t *testing.T) {
	d := openGPU(t)
	rng := testRand(t)
	ms, shapes := decodeModelCases()
	for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
		for _, s := range shapes {
			t.Run(fmt.Sprintf("%v/%s/%s_%dx%d", dt, s.model, s.proj, s.n, s.k), func(t *testing.T) {
				w := newWeight(t, d, rng, dt, s.n, s.k)
				defer w.free(t)
				xs := randDense(rng, dt, launchplan.MaxTokens*s.k)
				x := upload16(t, d, xs)
				defer freeAll(t, x)
				cols := []int{0, 17, 31, s.n / 2, s.n - 1, rng.IntN(s.n)}
				for _, m := range ms {
					gemv := runSparse(t, d, dt, w, x, m, sparseChoice{kernel: sparseDecode, decode: launchplan.Options{}})
					general := runSparse(t, d, dt, w, x, m, sparseChoice{kernel: sparseTiled})
					auto := runSparse(t, d, dt, w, x, m, sparseChoice{})
					yd := poisoned(t, d, m*s.n)
					if err := d.DenseMatmul(DenseOperands{Y: yd, X: x, W: w.dDense, DType: dt, M: m, N: s.n, K: s.k}); err != nil {
						t.Fatal(err)
					}
					dense := downloadF32(t, yd, m*s.n)
					freeAll(t, yd)
					checkClose(t, fmt.Sprintf("m=%d decode vs DenseMatmul", m), s.k, gemv, dense)
					checkClose(t, fmt.Sprintf("m=%d decode vs general", m), s.k, gemv, general)
					if i := bitDiff(auto, gemv); i >= 0 {
						t.Errorf("m=%d: SparseMatmul y[%d] = %v, decode kernel %v: not the decode kernel's plan",
							m, i, auto[i], gemv[i])
					}
					ref := refColumns(dt, xs, w.dense, m, s.k, cols)
					checkClose(t, fmt.Sprintf("m=%d decode vs float64", m), s.k, pickColumns(gemv, m, s.n, cols), ref)
					rel, maxAbs := diff(gemv, dense)
					t.Logf("m=%-2d decode vs dense: rel %.2e max %.2e", m, rel, maxAbs)
				}
			})
		}
	}
}

// TestGPUDecodeWarpgroup checks the decode kernel's warpgroup form on an
// H100 or H200 (it fails there when the sm_90a module did not load, and
// skips elsewhere): on the Llama-3 shapes, BF16 and F16, at decode token
// counts, launchplan.Choose's warpgroup plan bit for bit against the mma.sp kernel
// on the same plan (the same products in the same order) and against
// DenseMatmul. -short keeps the 8B shapes and four counts.
func TestGPUDecodeWarpgroup(t *testing.T) {
	d := openGPU(t)
	if info := d.Info(); info.Major != 9 || info.Minor != 0 {
		t.Skipf("sm_%d%d: the warpgroup form is for sm_90a", info.Major, info.Minor)
	}
	if !d.dec.lim.Warpgroup {
		t.Fatalf("the warpgroup form is not loaded: %s", d.dec.note)
	}
	if b := d.SparseBackend(); !strings.Contains(b, "wgmma.sp prefill kernel") {
		t.Errorf("SparseBackend() = %q: the wgmma.sp kernels are not named", b)
	}
	rng := testRand(t)
	ms, shapes := decodeModelCases()
	for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
		for _, s := range shapes {
			w := newWeight(t, d, rng, dt, s.n, s.k)
			x := upload16(t, d, randDense(rng, dt, launchplan.MaxTokens*s.k))
			for _, m := range ms {
				name := fmt.Sprintf("%v %s %s m=%d", dt, s.model, s.proj, m)
				p, err := launchplan.Choose(m, s.n, s.k, d.dec.lim, launchplan.Options{Warpgroup: 1})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				same := launchplan.Options{ChunksPerStage: p.ChunksPerStage, Warps: p.Warps, WarpsPerRowBlock: p.WarpsPerRowBlock, Slices: p.Slices, Window: -1, Warpgroup: -1}
				if p.WindowChunks > 0 {
					same.Window = 1
				}
				wg := runSparse(t, d, dt, w, x, m, sparseChoice{kernel: sparseDecode, decode: launchplan.Options{Warpgroup: 1}})
				plain := runSparse(t, d, dt, w, x, m, sparseChoice{kernel: sparseDecode, decode: same})
				if i := bitDiff(wg, plain); i >= 0 {
					t.Errorf("%s, %v: y[%d] = %v, the mma.sp kernel's %v", name, p, i, wg[i], plain[i])
				}
				yd := poisoned(t, d, m*s.n)
				if err := d.DenseMatmul(DenseOperands{Y: yd, X: x, W: w.dDense, DType: dt, M: m, N: s.n, K: s.k}); err != nil {
					t.Fatal(err)
				}
				checkClose(t, name+" "+p.String()+" vs DenseMatmul", s.k, wg, downloadF32(t, yd, m*s.n))
				freeAll(t, yd)
			}
			w.free(t)
			freeAll(t, x)
		}
	}
}

// TestGPUDecodeCandidates runs every plan SparseCandidates offers through
// SparseMatmulCandidate, on the 8B shapes at a few token counts: each
// against DenseMatmul over the whole output, candidate 0 bit for bit
// against SparseMatmul, and the indices past the list refused.
func TestGPUDecodeCandidates(t *testing.T) {
	d := openGPU(t)
	rng := testRand(t)
	const dt = checkpoint.BF16
	for _, s := range llama3Shapes()[:4] {
		w := newWeight(t, d, rng, dt, s.n, s.k)
		x := upload16(t, d, randDense(rng, dt, launchplan.MaxTokens*s.k))
		for _, m := range []int{1, 13, 64} {
			names, err := d.SparseCandidates(dt, m, s.n, s.k)
			if err != nil || len(names) < 2 || len(names) > launchplan.MaxCandidates {
				t.Fatalf("%s m=%d: SparseCandidates %q, %v", s.proj, m, names, err)
			}
			yd := poisoned(t, d, m*s.n)
			if err := d.DenseMatmul(DenseOperands{Y: yd, X: x, W: w.dDense, DType: dt, M: m, N: s.n, K: s.k}); err != nil {
				t.Fatal(err)
			}
			dense := downloadF32(t, yd, m*s.n)
			auto := runSparse(t, d, dt, w, x, m, sparseChoice{})
			for i, name := range names {
				y := poisoned(t, d, m*s.n)
				if err := d.SparseMatmulCandidate(SparseOperands{Y: y, X: x, Packed: w.dPack, Meta: w.dMeta, DType: dt, M: m, N: s.n, K: s.k}, i); err != nil {
					t.Fatalf("%s m=%d candidate %d (%s): %v", s.proj, m, i, name, err)
				}
				got := downloadF32(t, y, m*s.n)
				freeAll(t, y)
				checkClose(t, fmt.Sprintf("%s m=%d candidate %d (%s) vs DenseMatmul", s.proj, m, i, name), s.k, got, dense)
				if j := bitDiff(got, auto); i == 0 && j >= 0 {
					t.Errorf("%s m=%d: candidate 0 (%s) is not SparseMatmul's plan: y[%d] = %v, SparseMatmul %v",
						s.proj, m, name, j, got[j], auto[j])
				}
			}
			if err := d.SparseMatmulCandidate(SparseOperands{Y: yd, X: x, Packed: w.dPack, Meta: w.dMeta, DType: dt, M: m, N: s.n, K: s.k}, len(names)); !errors.Is(err, ErrArgument) {
				t.Errorf("%s m=%d: candidate %d of %d: %v, want ErrArgument", s.proj, m, len(names), len(names), err)
			}
			freeAll(t, yd)
		}
		w.free(t)
		freeAll(t, x)
	}
	if names, err := d.SparseCandidates(dt, 65, 1024, 4096); err != nil || len(names) != 1 {
		t.Errorf("SparseCandidates at m = 65: %q, %v; want the tiled kernel alone", names, err)
	}
	if _, err := d.SparseCandidates(dt, 1, 1000, 4096); !errors.Is(err, ErrArgument) {
		t.Errorf("SparseCandidates with n = 1000: %v, want ErrArgument", err)
	}
}

// bitDiff returns the first index where a and b (of the same length)
// differ in their bits, or -1 when they are the same bits.
func bitDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}
