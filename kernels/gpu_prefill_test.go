package kernels

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// TestGPUPrefillOutput checks the prefill kernel (sm_90a) against the
// tiled mma.sp kernel, the reference of the same operands, on every tile
// (each forced with K in 1, 2, 3, 4 and 8 splits where each has work, and the
// planner's own plan), BF16 and F16, token counts that are not multiples
// of any tile (65, 100, 300) and shapes with row blocks past n (n = 96,
// 288) and an odd count of 64-column stages (k = 320, 1600; with 3
// splits of 1600 the last has an odd count): the float32 sums within
// tolerance(k) of the tiled kernel's; with a bias, the sums plus
// float32(b[n]) bit for bit; in the element type, those rounded to
// nearest even bit for bit; nothing written past y (poisoned, so a
// split-K sum never stored shows too); and with several splits the same
// bits again on a second launch (the cluster's sum in a fixed order).
// With -test.short (for the sanitizers, tools/gpu/prefill_run.sh) it runs
// BF16 alone, n = 96 and 1024 and m = 65 and 300: still every tile and
// every split count. Skips where the device has no prefill kernel.
func TestGPUPrefillOutput(t *testing.T) {
	d := openGPU(t)
	if !d.hasPrefill() {
		t.Skip("no sm_90a module: " + d.dec.note)
	}
	rng := testRand(t)
	ran := map[string]bool{}
	shapes := []struct{ n, k int }{{96, 1600}, {288, 320}, {1024, 4096}, {4096, 512}}
	dts := []checkpoint.DType{checkpoint.BF16, checkpoint.F16}
	ms := []int{65, 100, 300, 2000}
	if testing.Short() {
		shapes, dts, ms = []struct{ n, k int }{{96, 1600}, {1024, 4096}}, dts[:1], []int{65, 300}
	}
	for _, s := range shapes {
		for _, dt := range dts {
			w := newWeight(t, d, rng, dt, s.n, s.k)
			const maxM = 2000
			x := upload16(t, d, randDense(rng, dt, maxM*s.k))
			b := randDense(rng, dt, s.n)
			b[0], b[1] = 0, 0x8000 // +0, -0
			bias := upload16(t, d, b)
			for _, m := range ms {
				ref := runSparseOut(t, d, dt, w, x, nil, false, m, sparseChoice{kernel: sparseTiled})
				for _, c := range prefillChoices(d, dt, m, s.n, s.k) {
					p, err := d.prefillPlan("test", SparseOperands{DType: dt, M: m, N: s.n, K: s.k}, c)
					if err != nil {
						t.Fatal(err)
					}
					ran[p.Tile.String()] = true
					ran[fmt.Sprintf("s%d", p.Splits)] = true
					what := fmt.Sprintf("%v n%d k%d m%d %s (tile %d, splits %d)", dt, s.n, s.k, m, p, c.tile, c.splits)
					sums := runSparseOut(t, d, dt, w, x, nil, false, m, c)
					got, want := make([]float32, len(sums)), make([]float32, len(ref))
					for i := range sums {
						got[i], want[i] = math.Float32frombits(sums[i]), math.Float32frombits(ref[i])
					}
					if rel, _ := diff(got, want); rel > tolerance(s.k) {
						t.Errorf("%s: relative error %.3g against the tiled kernel", what, rel)
					}
					if p.Splits > 1 && !slices.Equal(sums, runSparseOut(t, d, dt, w, x, nil, false, m, c)) {
						t.Errorf("%s: a second launch gave other bits", what)
					}
					checkBiasOut(t, what+" f32 bias", dt, s.n, sums, b, false, runSparseOut(t, d, dt, w, x, bias, false, m, c))
					checkBiasOut(t, what+" elem", dt, s.n, sums, nil, true, runSparseOut(t, d, dt, w, x, nil, true, m, c))
					checkBiasOut(t, what+" elem bias", dt, s.n, sums, b, true, runSparseOut(t, d, dt, w, x, bias, true, m, c))
				}
			}
			freeAll(t, x, bias)
			w.free(t)
		}
	}
	for _, tile := range launchplan.PrefillTiles() {
		if !ran[tile.String()] {
			t.Errorf("tile %s never ran", tile)
		}
	}
	for _, s := range []string{"s1", "s2", "s3", "s4", "s8"} {
		if !ran[s] {
			t.Errorf("no plan with %s ran", s)
		}
	}
}

// prefillChoices returns the prefill plans TestGPUPrefillOutput runs for
// an m × n × k product: the planner's, then every tile that fits with K
// in 1, 2, 3, 4 and 8 splits (the largest cluster) where each split has
// work.
func prefillChoices(d *Device, dt checkpoint.DType, m, n, k int) []sparseChoice {
	out := []sparseChoice{{kernel: sparsePrefill}}
	for i := range launchplan.PrefillTiles() {
		for _, splits := range []int{1, 2, 3, 4, 8} {
			c := sparseChoice{kernel: sparsePrefill, tile: i + 1, splits: splits}
			if _, err := d.prefillPlan("test", SparseOperands{DType: dt, M: m, N: n, K: k}, c); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}
