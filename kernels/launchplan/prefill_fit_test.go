package launchplan

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// prefillConsts are the prefill cost model's constants in one vector:
// each tile's StageUS (PrefillTiles' order), then each tile's
// SplitStageUS, then prefillUnitUS, prefillSplitUS and prefillSumKiBUS.
type prefillConsts []float64

// committedPrefillConsts returns the constants prefillCost uses.
func committedPrefillConsts() prefillConsts {
	tiles := PrefillTiles()
	c := make(prefillConsts, 2*len(tiles)+5)
	for i, t := range tiles {
		c[i], c[len(tiles)+i] = t.StageUS, t.SplitStageUS
	}
	c[2*len(tiles)], c[2*len(tiles)+1], c[2*len(tiles)+2], c[2*len(tiles)+3] = prefillUnitUS, prefillSplitUS, prefillSumKiBUS, prefillTrafficUS
	c[2*len(tiles)+4] = prefillWeightUS
	return c
}

// prefillRow returns the coefficients of the constants in the cost of
// tile i of PrefillTiles with k in splits splits (termsOf).
func prefillRow(i, splits, m, n, k, sms int) []float64 {
	tiles := PrefillTiles()
	x := termsOf(tiles[i], splits, m, n, k, sms)
	row := make([]float64, 2*len(tiles)+5)
	if splits > 1 {
		row[len(tiles)+i] = x.stages
	} else {
		row[i] = x.stages
	}
	row[2*len(tiles)], row[2*len(tiles)+1], row[2*len(tiles)+2], row[2*len(tiles)+3] = x.waves, x.split, x.sumKiB, x.traffic
	row[2*len(tiles)+4] = x.weight
	return row
}

// cost is the model's time with constants c (prefillCost's with the
// committed ones).
func (c prefillConsts) cost(p Prefill, m, n, k, sms int) float64 {
	var sum float64
	for j, v := range prefillRow(tileIndex(p.Tile), p.Splits, m, n, k, sms) {
		sum += v * c[j]
	}
	return sum
}

// tileIndex returns t's index in PrefillTiles, or -1.
func tileIndex(t PrefillTile) int {
	for i, u := range PrefillTiles() {
		if u.Rows == t.Rows && u.Tokens == t.Tokens {
			return i
		}
	}
	return -1
}

// TestPrefillCostTerms: the cost with the committed constants as a vector
// is prefillCost's, for every tile and split count, so that a fit of the
// vector is a fit of prefillCost.
func TestPrefillCostTerms(t *testing.T) {
	c := committedPrefillConsts()
	for _, s := range []struct{ m, n, k int }{{128, 1024, 4096}, {256, 4096, 14336}, {4096, 28672, 4096}, {65, 96, 1600}} {
		for i, tile := range PrefillTiles() {
			for splits := 1; splits <= MaxPrefillSplits; splits++ {
				p := Prefill{Tile: tile, Splits: splits}
				got, want := c.cost(p, s.m, s.n, s.k, 132), prefillCost(tile, splits, s.m, s.n, s.k, 132)
				if math.Abs(got-want) > 1e-9*want || tileIndex(tile) != i {
					t.Errorf("%s at %dx%dx%d: %.6f µs from the terms, prefillCost %.6f", p, s.m, s.n, s.k, got, want)
				}
			}
		}
	}
}

// TestPrefillFit fits the prefill cost model's constants to every timed
// plan of testdata/prefill-candidates-h200.txt.gz: least squares of the
// relative error (no constant negative, a constant no row weighs kept as
// committed), then coordinate descent on the replay from that fit and from
// the committed constants, keeping the better. It prints them as Go source beside their replay
// (ChoosePrefill's rule over the planner's plans, ranked by the fitted
// constants, against the fastest timed) and the committed constants', and
// fails when the fitted ones replay better: then the committed constants
// are not the fit of the committed rows, and the printed ones are the
// candidates to copy in. Runs only with -fit=prefill.
func TestPrefillFit(t *testing.T) {
	if *fitMode != "prefill" {
		t.Skip("run with -fit=prefill to fit the prefill planner's cost model")
	}
	rows := loadBenchCandidates(t, "testdata/prefill-candidates-h200.txt.gz")
	h200 := KnownLimits()["h200"]
	var a [][]float64
	for _, r := range rows {
		for plan, us := range r.us {
			var rowsN, tokens, splits int
			if _, err := fmt.Sscanf(plan, "prefill r%d t%d s%d", &rowsN, &tokens, &splits); err != nil || us <= 0 {
				t.Fatalf("%dx%d m = %d: plan %q at %v µs", r.n, r.k, r.m, plan, us)
			}
			i := tileIndex(PrefillTile{Rows: rowsN, Tokens: tokens})
			if i < 0 {
				t.Fatalf("%dx%d m = %d: plan %q: no such tile", r.n, r.k, r.m, plan)
			}
			row := prefillRow(i, splits, r.m, r.n, r.k, h200.SMs)
			for j := range row {
				row[j] /= us // relative error: the row's target is 1
			}
			a = append(a, row)
		}
	}
	committed := committedPrefillConsts()
	plans := make([][]Prefill, len(rows))
	for i, r := range rows {
		var err error
		if plans[i], err = PrefillCandidates(checkpoint.BF16, r.m, r.n, r.k, h200, math.MaxInt32); err != nil {
			t.Fatal(err)
		}
	}
	// choose is ChoosePrefill's rule with constants c: the cheapest of the
	// planner's plans, the first of equals.
	choose := func(c prefillConsts, i int) Prefill {
		r, best := rows[i], plans[i][0]
		for _, p := range plans[i][1:] {
			if c.cost(p, r.m, r.n, r.k, h200.SMs) < c.cost(best, r.m, r.n, r.k, h200.SMs) {
				best = p
			}
		}
		return best
	}
	// score is the replay's mean and worst slowdown over the judged rows,
	// unjudged rows counting as 50% behind, of c as printed below (the
	// constants rounded to the digits copied into prefill.go), with a row
	// more than 10% behind (TestPrefillAgainstBench's bound) counting its
	// excess ten times over in the mean.
	score := func(c prefillConsts) (float64, float64) {
		c = c.printed()
		var sum, worst float64
		for i, r := range rows {
			slow := 0.5
			if us, ok := r.us[choose(c, i).String()]; ok && us > 0 {
				slow = us/r.best - 1
			}
			sum += slow + 10*max(0, slow-0.10)
			worst = max(worst, slow)
		}
		return sum / float64(len(rows)), worst
	}
	// The least-squares fit, then coordinate descent on the replay from it
	// and from the committed constants; the better of the two.
	fitted := fitNonNegative(a, committed)
	bestMean, bestWorst := math.Inf(1), math.Inf(1)
	var best prefillConsts
	for _, start := range []prefillConsts{fitted, committed} {
		c := append(prefillConsts(nil), start...)
		mean, worst := score(c)
		for pass, improved := 0, true; improved && pass < 50; pass++ {
			improved = false
			for j := range c {
				keep := c[j]
				for _, f := range []float64{0, 0.5, 0.7, 0.8, 0.9, 0.95, 1.05, 1.1, 1.25, 1.4, 2} {
					c[j] = keep * f
					if m, w := score(c); m < mean-1e-9 || m < mean+1e-9 && w < worst-1e-9 {
						mean, worst, keep, improved = m, w, c[j], true
					}
				}
				c[j] = keep
			}
		}
		if mean < bestMean-1e-9 || mean < bestMean+1e-9 && worst < bestWorst-1e-9 {
			bestMean, bestWorst, best = mean, worst, c
		}
	}
	fitted = best.printed()
	replayWith := func(c prefillConsts) benchReplay {
		return replayBench(t, rows, func(r benchRow) (fmt.Stringer, error) {
			for i := range rows {
				if rows[i].n == r.n && rows[i].k == r.k && rows[i].m == r.m {
					return choose(c, i), nil
				}
			}
			return nil, fmt.Errorf("no row %dx%d m = %d", r.n, r.k, r.m)
		})
	}
	was, now := replayWith(committed), replayWith(fitted)
	var src strings.Builder
	for i, tile := range PrefillTiles() {
		fmt.Fprintf(&src, "{Rows: %d, Tokens: %d, StageUS: %.3f, SplitStageUS: %.3f},\n", tile.Rows, tile.Tokens, fitted[i], fitted[len(PrefillTiles())+i])
	}
	n := 2 * len(PrefillTiles())
	fmt.Fprintf(&src, "prefillUnitUS = %.3f, prefillSplitUS = %.3f, prefillSumKiBUS = %.3f, prefillTrafficUS = %.4f", fitted[n], fitted[n+1], fitted[n+2], fitted[n+3])
	fmt.Fprintf(&src, ", prefillWeightUS = %.4f", fitted[n+4])
	t.Logf("%d timed plans in %d rows; fitted:\n%s", len(a), len(rows), src.String())
	t.Logf("replay: committed %.2f%% behind on average, %.0f%% at worst (%d judged); fitted %.2f%%, %.0f%% (%d judged)",
		100*was.mean, 100*was.worst, was.judged, 100*now.mean, 100*now.worst, now.judged)
	if now.judged >= was.judged && (now.mean < was.mean-1e-4 || now.mean < was.mean+1e-4 && now.worst < was.worst-1e-4) {
		t.Errorf("the fitted constants replay the rows better than the committed ones: copy them in")
	}
}

// printed returns c rounded as TestPrefillFit prints it: the stage costs
// and the unit, split and sum constants to 0.001 µs, the traffic constant
// to 0.0001.
func (c prefillConsts) printed() prefillConsts {
	out := make(prefillConsts, len(c))
	for i, v := range c {
		scale := 1e3
		if i >= len(c)-2 {
			scale = 1e4
		}
		out[i] = math.Round(v*scale) / scale
	}
	return out
}

// fitNonNegative solves min ‖a·c − 1‖² over c ≥ 0 by least squares on a
// shrinking set of free constants (a constant that comes out negative is
// set to 0 and the rest solved again); a constant that no row weighs
// keeps its value in start.
func fitNonNegative(a [][]float64, start prefillConsts) prefillConsts {
	c := append(prefillConsts(nil), start...)
	free := make([]bool, len(c))
	for j := range c {
		for _, row := range a {
			if row[j] != 0 {
				free[j] = true
				break
			}
		}
	}
	for {
		var idx []int
		for j, f := range free {
			if f {
				idx = append(idx, j)
			}
		}
		// The normal equations of the free constants, the fixed ones moved
		// to the right-hand side.
		m := make([][]float64, len(idx))
		for p := range m {
			m[p] = make([]float64, len(idx)+1)
		}
		for _, row := range a {
			rhs := 1.0
			for j, f := range free {
				if !f {
					rhs -= row[j] * c[j]
				}
			}
			for p, jp := range idx {
				for q, jq := range idx {
					m[p][q] += row[jp] * row[jq]
				}
				m[p][len(idx)] += row[jp] * rhs
			}
		}
		sol := solveDense(m)
		neg := false
		for p, j := range idx {
			c[j] = sol[p]
			if sol[p] < 0 {
				c[j], free[j], neg = 0, false, true
			}
		}
		if !neg {
			return c
		}
	}
}

// solveDense solves the augmented system m (n rows of n + 1) by Gaussian
// elimination with partial pivoting; a singular column's unknown is 0.
func solveDense(m [][]float64) []float64 {
	n := len(m)
	for col := range n {
		piv := col
		for r := col + 1; r < n; r++ {
			if math.Abs(m[r][col]) > math.Abs(m[piv][col]) {
				piv = r
			}
		}
		m[col], m[piv] = m[piv], m[col]
		if math.Abs(m[col][col]) < 1e-12 {
			continue
		}
		for r := range n {
			if r == col {
				continue
			}
			f := m[r][col] / m[col][col]
			for c := col; c <= n; c++ {
				m[r][c] -= f * m[col][c]
			}
		}
	}
	x := make([]float64, n)
	for i := range n {
		if math.Abs(m[i][i]) >= 1e-12 {
			x[i] = m[i][n] / m[i][i]
		}
	}
	return x
}

// TestSolveDense checks the solver on a known system and the non-negative
// fit on rows made from known constants, which it must give back.
func TestSolveDense(t *testing.T) {
	// x = 1, y = 2, z = 3; the first pivot is zero.
	x := solveDense([][]float64{{0, 1, 4, 14}, {2, 1, 0, 4}, {1, 3, 1, 10}})
	for i, want := range []float64{1, 2, 3} {
		if math.Abs(x[i]-want) > 1e-9 {
			t.Errorf("x[%d] = %v, want %v (all %v)", i, x[i], want, x)
		}
	}
	want := committedPrefillConsts()
	var a [][]float64
	for _, s := range []struct{ m, n, k int }{
		{128, 1024, 4096}, {256, 1024, 4096}, {512, 1024, 8192}, {128, 4096, 4096}, {256, 4096, 14336},
		{1024, 6144, 4096}, {4096, 28672, 4096}, {512, 8192, 8192}, {2048, 4096, 4096}, {128, 8192, 28672},
	} {
		for i, tile := range PrefillTiles() {
			for splits := 1; splits <= 4; splits++ {
				us := prefillCost(tile, splits, s.m, s.n, s.k, 132)
				row := prefillRow(i, splits, s.m, s.n, s.k, 132)
				for j := range row {
					row[j] /= us
				}
				a = append(a, row)
			}
		}
	}
	start := make(prefillConsts, len(want))
	got := fitNonNegative(a, start)
	for j := range want {
		if math.Abs(got[j]-want[j]) > 1e-6 {
			t.Errorf("constant %d: fitted %v from exact rows, want %v", j, got[j], want[j])
		}
	}
}
