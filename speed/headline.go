package speed

import "slices"

// Extreme is one end of a backend's speedups in a regime.
type Extreme struct {
	Label   string  `json:"shape"`
	M       int     `json:"m"`
	Speedup float64 `json:"speedup"`
}

// Headline is the best and worst speedup over dense of one sparse
// backend in one regime.
type Headline struct {
	Backend string `json:"backend"`
	// Regime is "M<=64" (decode) or "M>=4096" (prefill).
	Regime string  `json:"regime"`
	Best   Extreme `json:"best"`
	Worst  Extreme `json:"worst"`
	// Rows is the number of timed rows the extremes are taken from; Wins
	// counts those at least the policy's threshold faster than dense,
	// Losses those slower than dense.
	Rows   int `json:"rows"`
	Wins   int `json:"wins"`
	Losses int `json:"losses"`
}

// Headlines returns, for each sparse backend with timed rows and each
// regime (M ≤ 64, M ≥ 4096), the best and worst measured speedup, and
// how many rows won by at least minSpeedup or lost.
func Headlines(rows []Row, minSpeedup float64) []Headline {
	var out []Headline
	for _, backend := range []string{Ours, CuSPARSELt} {
		for _, rg := range []struct {
			name string
			in   func(m int) bool
		}{{"M<=64", func(m int) bool { return m <= 64 }}, {"M>=4096", func(m int) bool { return m >= 4096 }}} {
			h := Headline{Backend: backend, Regime: rg.name}
			for _, r := range rows {
				if r.Backend != backend || !r.Timed() || r.Speedup <= 0 || !rg.in(r.M) {
					continue
				}
				e := Extreme{Label: Shape{Model: r.Model, Ops: r.Ops, N: r.N, K: r.K}.Label(), M: r.M, Speedup: r.Speedup}
				if h.Rows == 0 || e.Speedup > h.Best.Speedup {
					h.Best = e
				}
				if h.Rows == 0 || e.Speedup < h.Worst.Speedup {
					h.Worst = e
				}
				h.Rows++
				switch {
				case e.Speedup >= minSpeedup:
					h.Wins++
				case e.Speedup < 1:
					h.Losses++
				}
			}
			if h.Rows > 0 {
				out = append(out, h)
			}
		}
	}
	return out
}

// sortedRows returns rows ordered by shape (in the order of shapes), M,
// then dense before the sparse backends.
func sortedRows(shapes []Shape, rows []Row) []Row {
	idx := make(map[shapeKey]int, len(shapes))
	for i, s := range shapes {
		idx[shapeKey{s.Model, s.N, s.K}] = i
	}
	rank := map[string]int{Dense: 0, DenseOwn: 0, Ours: 1, CuSPARSELt: 2}
	out := slices.Clone(rows)
	slices.SortStableFunc(out, func(a, b Row) int {
		if d := idx[a.shapeKey()] - idx[b.shapeKey()]; d != 0 {
			return d
		}
		if a.M != b.M {
			return a.M - b.M
		}
		return rank[a.Backend] - rank[b.Backend]
	})
	return out
}
