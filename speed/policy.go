package speed

import (
	"slices"
	"time"

	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// PolicyDense is the policy's word for the dense product (cuBLASLt or
// whatever dense GEMM the engine runs).
const PolicyDense = "dense"

// DefaultMinSpeedup is the policy's threshold: sparse must measure at
// least 5% faster than dense.
const DefaultMinSpeedup = 1.05

// Policy says, per op and shape, where an engine should multiply sparse:
// the M ranges in which a sparse backend measured at least MinSpeedup
// times faster than dense, and with which backend. Everywhere else,
// including every M outside the measured range, it says dense.
type Policy struct {
	// Schema is PolicySchema; Tool the sfsurgery that measured; Generated
	// when.
	Schema    string    `json:"schema"`
	Tool      string    `json:"tool"`
	Generated time.Time `json:"generated"`
	// GPU, Driver and the library versions identify where it was measured,
	// so a stale policy can be spotted.
	GPU        string `json:"gpu"`
	Capability string `json:"capability"`
	Driver     string `json:"driver"`
	CublasLt   int    `json:"cublaslt,omitempty"`
	CuSPARSELt string `json:"cusparselt,omitempty"`
	// DType is the element type measured; MinSpeedup the least speedup
	// over dense that makes a sparse range.
	DType      string  `json:"dtype"`
	MinSpeedup float64 `json:"min_speedup"`
	// Measured lists the token counts timed.
	Measured []int  `json:"measured_m"`
	Default  string `json:"default"` // always "dense"
	// Rule says in words how the ranges were drawn from the measurements.
	Rule string `json:"rule"`
	// Entries are the shapes' policies, in the report's order.
	Entries []PolicyEntry `json:"entries"`
}

// PolicyEntry is the policy of one shape.
type PolicyEntry struct {
	// Model, Ops, N and K identify the shape (see Shape).
	Model string   `json:"model,omitempty"`
	Ops   []string `json:"ops,omitempty"`
	N     int      `json:"n"`
	K     int      `json:"k"`
	// Sparse lists the M ranges where sparse wins, ascending and
	// disjoint; empty means dense for every M.
	Sparse []Range `json:"sparse"`
	// Prefill, where the report records the device's limits and the
	// device runs the prefill kernel (sm_90a), are its launch records
	// (launchplan.PrefillRecords; docs/launch.md): what ours runs above
	// launchplan.MaxTokens tokens, and what an engine that keeps one
	// weight copy runs for every M above them.
	Prefill []launchplan.PrefillRecord `json:"prefill,omitempty"`
}

// Range is an inclusive range of token counts with the backend to use.
type Range struct {
	// MinM and MaxM bound the range, inclusive; Backend is what to run
	// in it (Ours or CuSPARSELt).
	MinM    int    `json:"min_m"`
	MaxM    int    `json:"max_m"`
	Backend string `json:"backend"`
	// Speedup is the smallest speedup over dense measured inside the
	// range.
	Speedup float64 `json:"speedup"`
	// Plans, for ours, is the launch plan at each M of the range up to
	// the decode kernels' 64 tokens: at a measured M the one that won (
	// SparseMatmul runs its planner's first, which need not be it), at the
	// others the planner's first. Where the report records the device's
	// limits, each comes with its launch record (docs/launch.md), which an
	// engine executes as is.
	Plans []PlanAt `json:"plans,omitempty"`
}

// PlanAt is the launch plan of ours at one M.
type PlanAt struct {
	// M is the token count; Plan the plan's name as
	// kernels.Device.SparseCandidates names it.
	M    int    `json:"m"`
	Plan string `json:"plan"`
	// Measured says the plan won when bench timed this M; otherwise it is
	// the planner's first.
	Measured bool `json:"measured"`
	// Launch is the plan's launch record; nil where the report holds no
	// device limits, or the plan is not among the planner's candidates
	// for those limits.
	Launch *launchplan.Launch `json:"launch,omitempty"`
}

// policyRule explains the ranges in words, for the JSON.
const policyRule = "a range starts at a measured M where the backend beat dense by min_speedup and ends at the last " +
	"such M, or just below the next measured M when the same backend also wins there; every other M, " +
	"including any outside the measured ones and any between wins of two different backends, is dense"

// Backend returns the backend the entry picks for m: a sparse backend
// inside one of its ranges, else PolicyDense.
func (e PolicyEntry) Backend(m int) string {
	for _, r := range e.Sparse {
		if m >= r.MinM && m <= r.MaxM {
			return r.Backend
		}
	}
	return PolicyDense
}

// DerivePolicy turns timed rows into one entry per shape, in the order of
// shapes. At each measured M the winner is the sparse backend with the
// highest speedup if that speedup is at least minSpeedup, else dense; a
// shape or M whose dense baseline has no time is dense. Consecutive
// winners of one backend merge into one range.
func DerivePolicy(shapes []Shape, rows []Row, minSpeedup float64) []PolicyEntry {
	out := make([]PolicyEntry, 0, len(shapes))
	for _, s := range shapes {
		key := shapeKey{s.Model, s.N, s.K}
		type point struct {
			m       int
			backend string
			speedup float64
			plan    string
		}
		var pts []point
		for _, m := range measuredMs(rows, key) {
			p := point{m: m, backend: PolicyDense}
			if dense, ok := baseline(rows, key, m); ok {
				for _, r := range rows {
					if r.shapeKey() != key || r.M != m || !IsSparse(r.Backend) || !r.Timed() {
						continue
					}
					sp := dense.MedianUS / r.MedianUS
					if sp >= minSpeedup && sp > p.speedup {
						p.backend, p.speedup, p.plan = r.Backend, sp, r.Plan
					}
				}
			}
			pts = append(pts, p)
		}
		e := PolicyEntry{Model: s.Model, Ops: s.Ops, N: s.N, K: s.K, Sparse: []Range{}}
		for i, p := range pts {
			if p.backend == PolicyDense {
				continue
			}
			// The gap to the next measured M is this backend's only if it
			// wins there too: between two backends neither was measured,
			// and a backend may change kernels inside the gap (ours hands
			// M > 64 to another kernel).
			hi := p.m
			if i+1 < len(pts) && pts[i+1].backend == p.backend {
				hi = pts[i+1].m - 1
			}
			var plans []PlanAt
			if p.plan != "" {
				plans = []PlanAt{{M: p.m, Plan: p.plan, Measured: true}}
			}
			if n := len(e.Sparse); n > 0 && e.Sparse[n-1].Backend == p.backend && e.Sparse[n-1].MaxM+1 >= p.m {
				last := &e.Sparse[n-1]
				last.MaxM = hi
				last.Speedup = min(last.Speedup, p.speedup)
				last.Plans = append(last.Plans, plans...)
				continue
			}
			e.Sparse = append(e.Sparse, Range{MinM: p.m, MaxM: hi, Backend: p.backend, Speedup: p.speedup, Plans: plans})
		}
		out = append(out, e)
	}
	return out
}

// measuredMs returns the token counts that rows hold for a shape,
// ascending.
func measuredMs(rows []Row, key shapeKey) []int {
	var ms []int
	for _, r := range rows {
		if r.shapeKey() == key && !slices.Contains(ms, r.M) {
			ms = append(ms, r.M)
		}
	}
	slices.Sort(ms)
	return ms
}

// baseline returns the timed dense row of a shape and M.
func baseline(rows []Row, key shapeKey, m int) (Row, bool) {
	for _, r := range rows {
		if r.shapeKey() == key && r.M == m && !IsSparse(r.Backend) && r.Timed() {
			return r, true
		}
	}
	return Row{}, false
}

// NewPolicy wraps the entries of a report with what identifies the
// machine and libraries they were measured on.
func NewPolicy(rep *Report, entries []PolicyEntry) *Policy {
	return &Policy{
		Schema: PolicySchema, Tool: rep.Tool, Generated: rep.Date,
		GPU: rep.Env.GPU, Capability: rep.Env.Capability, Driver: rep.Env.Driver,
		CublasLt: rep.Env.CublasLt, CuSPARSELt: rep.Env.CuSPARSELt, DType: rep.DType,
		MinSpeedup: rep.Method.MinSpeedup, Measured: rep.Ms, Default: PolicyDense, Rule: policyRule, Entries: entries,
	}
}
