package speed

import "slices"

// DefaultGEMMShare is the fraction of a LLaMA-class step spent in the
// seven projections, assumed by the end-to-end estimate unless the user
// gives another: the projections hold nearly all weights, so decode (which
// streams weights) and prefill (whose FLOPs they dominate at moderate
// context) both spend most of a step in them; attention over the KV cache,
// norms, embeddings, the LM head and sampling take the rest. 0.7 is a
// round middle value, not a measurement: pass the share your profiler
// shows.
const DefaultGEMMShare = 0.7

// Amdahl returns the end-to-end speedup when a share of the step time
// speeds up by speedup: 1 / ((1 − share) + share / speedup).
func Amdahl(share, speedup float64) float64 {
	if speedup <= 0 || share < 0 || share > 1 {
		return 0
	}
	return 1 / ((1 - share) + share/speedup)
}

// Estimate is the expected speedup of one model at one token count when
// an engine follows the policy: an estimate, from measured GEMM times
// and an assumed share of the step.
type Estimate struct {
	Model string `json:"model,omitempty"`
	M     int    `json:"m"`
	// Regime is "decode" (M ≤ 64), "prefill" (M ≥ 1024) or "between".
	Regime string `json:"regime"`
	// GEMMSpeedup is Σ count·dense time / Σ count·policy time over the
	// model's shapes: the projections' speedup with the policy applied.
	GEMMSpeedup float64 `json:"gemm_speedup"`
	GEMMShare   float64 `json:"gemm_share"`
	// EndToEnd is Amdahl(GEMMShare, GEMMSpeedup).
	EndToEnd float64 `json:"end_to_end"`
}

// Regime names the phase a token count stands for: "decode" (M ≤ 64),
// "prefill" (M ≥ 1024) or "between".
func Regime(m int) string {
	switch {
	case m <= 64:
		return "decode"
	case m >= 1024:
		return "prefill"
	}
	return "between"
}

// Estimates computes, for each model and measured M at which every shape
// of the model has a dense time, the speedup of the projections under the
// policy and the end-to-end estimate for the given share.
func Estimates(shapes []Shape, rows []Row, policy []PolicyEntry, share float64) []Estimate {
	var models []string
	for _, s := range shapes {
		if !slices.Contains(models, s.Model) {
			models = append(models, s.Model)
		}
	}
	var out []Estimate
	for _, model := range models {
		var ms []int
		for _, s := range shapes {
			if s.Model == model {
				for _, m := range measuredMs(rows, shapeKey{s.Model, s.N, s.K}) {
					if !slices.Contains(ms, m) {
						ms = append(ms, m)
					}
				}
			}
		}
		slices.Sort(ms)
	next:
		for _, m := range ms {
			var dense, chosen float64
			for _, s := range shapes {
				if s.Model != model {
					continue
				}
				key := shapeKey{s.Model, s.N, s.K}
				base, ok := baseline(rows, key, m)
				if !ok {
					continue next
				}
				t := base.MedianUS
				if b := entryFor(policy, key).Backend(m); b != PolicyDense {
					if r, ok := timedRow(rows, key, m, b); ok {
						t = r.MedianUS
					}
				}
				w := float64(max(s.Count, 1))
				dense += w * base.MedianUS
				chosen += w * t
			}
			if chosen == 0 {
				continue
			}
			sp := dense / chosen
			out = append(out, Estimate{Model: model, M: m, Regime: Regime(m), GEMMSpeedup: sp, GEMMShare: share,
				EndToEnd: Amdahl(share, sp)})
		}
	}
	return out
}

// entryFor returns the policy entry of a shape (the zero entry, all
// dense, when there is none).
func entryFor(policy []PolicyEntry, key shapeKey) PolicyEntry {
	for _, e := range policy {
		if (shapeKey{e.Model, e.N, e.K}) == key {
			return e
		}
	}
	return PolicyEntry{}
}

// timedRow returns the timed row of a shape, M and backend.
func timedRow(rows []Row, key shapeKey, m int, backend string) (Row, bool) {
	for _, r := range rows {
		if r.shapeKey() == key && r.M == m && r.Backend == backend && r.Timed() {
			return r, true
		}
	}
	return Row{}, false
}
