package launchplan

import (
	"errors"
	"fmt"
	"slices"
)

// ErrNoPlan wraps the reasons Choose, Candidates, Launch and
// ChoosePrefill refuse a shape, options or device.
var ErrNoPlan = errors.New("no kernel plan")

// Choose chooses the launch of the decode kernel for m tokens and an
// n × k weight on a device with limits lim; o forces parts of it.
//
// It tries both stage sizes, every CTA size (from minWarps warps),
// 1, 2, 4 or 8 warps per row block, every slice length, and the
// activations staged whole (every slice length that fits in shared
// memory) or in windows (any slice length), each also in the warpgroup
// form where the device has it (4 warps, one row block each), and keeps
// the one of least cost under defaultModel. Ties go to fewer slices,
// then to larger CTAs (activations staged once for more rows), then to
// fewer warps per row block, then to 2-chunk stages, then to activations
// staged whole, then to the mma.sp form. Without options it runs instead,
// where there is one, the warpgroup form's pair of 64-row CTAs
// (pairRowsLead), which the model does not rate well and which measured
// faster; else from groupPickTokens tokens, where the device has room
// for two token groups in one wave with slices of at most
// groupPickChunks chunks, those, in clusters (groupPlans): the model
// has no term for them, and they were measured faster there on both an
// H100 and an H200. Where none of those leads, formLead may put a plan of
// the warpgroup form ahead of the model's own first.
// TestPlanAgainstBench checks the choice against every candidate
// bench timed on an H100 and an H200.
func Choose(m, n, k int, lim Limits, o Options) (Plan, error) {
	// The first of the full list: formLead chooses among its plans.
	ps, err := defaultModel().candidates(m, n, k, lim, o, MaxCandidates)
	if err != nil {
		return Plan{}, err
	}
	return ps[0], nil
}

// Candidates returns the count plans Choose rates cheapest, best
// first (fewer when fewer fit): the candidates an engine times on its own
// GPU, whose model was fitted on another.
func Candidates(m, n, k int, lim Limits, o Options, count int) ([]Plan, error) {
	return defaultModel().candidates(m, n, k, lim, o, count)
}

// Candidate returns the plan Candidates lists cand-th of
// MaxCandidates: the list SparseCandidates shows, whose entries
// SparseMatmulCandidate runs. (A shorter list is not a prefix of it: it
// holds fewer plans of each form.)
func Candidate(m, n, k int, lim Limits, o Options, cand int) (Plan, error) {
	if cand < 0 || cand >= MaxCandidates {
		return Plan{}, fmt.Errorf("%w: candidate %d (there are at most %d)", ErrNoPlan, cand, MaxCandidates)
	}
	ps, err := Candidates(m, n, k, lim, o, MaxCandidates)
	if err != nil {
		return Plan{}, err
	}
	if cand >= len(ps) {
		return Plan{}, fmt.Errorf("%w: candidate %d of %d", ErrNoPlan, cand, len(ps))
	}
	return ps[cand], nil
}

// rated is a plan and its cost under a model.
type rated struct {
	p    Plan
	cost int
}

// before reports whether a comes before b in Choose's order: cost, then
// the ties it documents.
func (a rated) before(b rated) bool {
	if a.cost != b.cost {
		return a.cost < b.cost
	}
	p, q := a.p, b.p
	switch {
	case p.Slices != q.Slices:
		return p.Slices < q.Slices
	case p.Warps != q.Warps:
		return p.Warps > q.Warps
	case p.WarpsPerRowBlock != q.WarpsPerRowBlock:
		return p.WarpsPerRowBlock < q.WarpsPerRowBlock
	case p.ChunksPerStage != q.ChunksPerStage:
		return p.ChunksPerStage < q.ChunksPerStage
	case p.WindowChunks != q.WindowChunks:
		return p.WindowChunks < q.WindowChunks
	case p.Warpgroup != q.Warpgroup:
		return !p.Warpgroup
	case p.RowBlocks != q.RowBlocks:
		return p.RowBlocks > q.RowBlocks
	}
	return !p.Cooperative && q.Cooperative
}

// compareRated orders plans as Choose does (rated.before), for sorting.
func compareRated(a, b rated) int {
	if a.before(b) {
		return -1
	}
	if b.before(a) {
		return 1
	}
	return 0
}

// decodeShape reports whether the decode kernels take m tokens of an
// n × k weight: 1 ≤ m ≤ MaxTokens, n a multiple of 32 and k of
// ChunkColumns, each at most MaxDim.
func decodeShape(m, n, k int) bool {
	return m >= 1 && m <= MaxTokens && n >= 32 && n%32 == 0 && n <= MaxDim &&
		k >= ChunkColumns && k%ChunkColumns == 0 && k <= MaxDim
}

// candidates returns the count plans of least cost under md, in
// Choose's order (see Choose for the search).
func (md costModel) candidates(m, n, k int, lim Limits, o Options, count int) ([]Plan, error) {
	if !decodeShape(m, n, k) {
		return nil, fmt.Errorf("%w: m = %d, n = %d, k = %d (want 1 ≤ m ≤ %d, n and k up to %d, n a multiple of 32, k of %d)",
			ErrNoPlan, m, n, k, MaxTokens, MaxDim, ChunkColumns)
	}
	if o.Warps < 0 || o.Warps > maxWarps || o.Slices < 0 || o.Window < -1 || o.Window > 1 || o.Warpgroup < -1 || o.Warpgroup > 1 ||
		o.WarpsPerRowBlock != 0 && (o.WarpsPerRowBlock&(o.WarpsPerRowBlock-1) != 0 || o.WarpsPerRowBlock < 0 || o.WarpsPerRowBlock > maxWarps || o.Warps != 0 && o.Warps%o.WarpsPerRowBlock != 0) {
		return nil, fmt.Errorf("%w: %d warps, %d per row block, %d splits, window %d, warpgroup %d", ErrNoPlan,
			o.Warps, o.WarpsPerRowBlock, o.Slices, o.Window, o.Warpgroup)
	}
	if o.Cooperative < -1 || o.Cooperative > 1 || o.Cooperative == 1 && (o.Warpgroup == -1 || o.Slices == 1 || m < CooperativeMinTokens || !lim.Warpgroup) {
		return nil, fmt.Errorf("%w: the cooperative split-K sum is the warpgroup form's (sm_90a), for several slices "+
			"and at least %d tokens, not %d tokens with %+v", ErrNoPlan, CooperativeMinTokens, m, o)
	}
	if o.Warpgroup == 1 && !lim.Warpgroup {
		return nil, fmt.Errorf("%w: the warpgroup form needs an sm_90a device (H100, H200) and its PTX", ErrNoPlan)
	}
	if o.TokenTiles != 0 && (o.TokenTiles < 0 || o.TokenTiles > 8 || o.TokenTiles&(o.TokenTiles-1) != 0 || o.Warpgroup == -1 || !lim.Warpgroup || o.Cooperative == 1) {
		return nil, fmt.Errorf("%w: token groups are the warpgroup form's (sm_90a), of 1, 2, 4 or 8 tiles, "+
			"without the cooperative sum, not %+v", ErrNoPlan, o)
	}
	if o.Rows != 0 && (o.Rows != 32 && o.Rows != 64 && o.Rows != 128 || o.Warpgroup == -1 || !lim.Warpgroup) ||
		o.Pair < -1 || o.Pair > 1 || o.Pair == 1 && (o.Warpgroup == -1 || !lim.Warpgroup || o.TokenTiles != 0 || o.Cooperative == 1 || o.Slices != 0 && o.Slices != 2) {
		return nil, fmt.Errorf("%w: CTAs of 32, 64 or 128 rows and the pair sum are the warpgroup form's (sm_90a), "+
			"a pair two slices without token groups, not %+v", ErrNoPlan, o)
	}
	if o.Rows == 32 && (o.TokenTiles != 0 || o.Cooperative == 1) {
		return nil, fmt.Errorf("%w: the hybrid's CTAs of 32 rows take no token groups and no cooperative sum, not %+v",
			ErrNoPlan, o)
	}
	if o.Cluster != 0 && (o.Cluster != -1 || o.TokenTiles == 0) {
		return nil, fmt.Errorf("%w: clusters can only be forbidden (-1), to token groups, not %+v", ErrNoPlan, o)
	}
	if o.Warpgroup == 1 && (o.Warps != 0 && o.Warps != warpgroupWarps || o.WarpsPerRowBlock > 1) {
		return nil, fmt.Errorf("%w: the warpgroup form has %d warps of one row block each, not %d of %d",
			ErrNoPlan, warpgroupWarps, o.Warps, o.WarpsPerRowBlock)
	}
	if lim.SMs < 1 || lim.SharedPerBlock < 1 || lim.SharedPerSM < lim.SharedPerBlock {
		return nil, fmt.Errorf("%w: device limits %+v", ErrNoPlan, lim)
	}
	scs := []int{2, 4}
	switch o.ChunksPerStage {
	case 0:
	case 2, 4:
		scs = []int{o.ChunksPerStage}
	default:
		return nil, fmt.Errorf("%w: %d chunks per stage", ErrNoPlan, o.ChunksPerStage)
	}
	var all []rated
	for _, sc := range scs {
		for w := maxWarps; w >= 1; w-- {
			if o.Warps != 0 && w != o.Warps || o.Warps == 0 && w < minWarps {
				continue
			}
			for kw := 1; kw <= w; kw *= 2 {
				if w%kw != 0 || o.WarpsPerRowBlock != 0 && kw != o.WarpsPerRowBlock {
					continue
				}
				if o.Warpgroup != 1 && o.Rows == 0 && o.Pair != 1 {
					all = md.plansCTA(all, m, n, k, lim, o, sc, w, kw, false)
				}
				if o.Warpgroup != -1 && lim.Warpgroup && w == warpgroupWarps && kw == 1 {
					all = md.plansCTA(all, m, n, k, lim, o, sc, w, kw, true)
				}
			}
		}
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("%w: m = %d, k = %d with %+v does not fit in %d bytes of shared memory",
			ErrNoPlan, m, k, o, lim.SharedPerBlock)
	}
	slices.SortFunc(all, compareRated)
	// Plans the model does not rank, without options: a pair of 64-row
	// CTAs first (Choose's choice) where there is one (pairRowsLead);
	// then, from groupPickTokens, the token-group plan of two groups
	// in clusters; the other group plans last (a full list only).
	var lead, gp, late []Plan
	if o == (Options{}) {
		if hy, ok := md.hybridPlan(m, n, k, lim); ok {
			if hybridLeads(m, hy) {
				lead = append(lead, hy)
			} else {
				late = append(late, hy)
			}
		}
		if i := slices.IndexFunc(all, func(r rated) bool { return r.p.RowBlocks == 2 }); i >= 0 {
			lead = append(lead, all[i].p)
			all = slices.Delete(all, i, i+1)
		}
		gp = md.groupPlans(m, n, k, lim)
		if i := groupPick(m, gp); i >= 0 {
			lead, gp = append(lead, gp[i]), slices.Delete(gp, i, i+1)
		}
		if count < MaxCandidates {
			gp = nil
		}
	}
	// A hybrid that does not lead comes second, after the first plan;
	// where there is room for only one plan, that is the first.
	ranked := max(0, count-len(lead)-len(gp)-len(late))
	if len(late) > 0 && len(lead) == 0 && ranked == 0 {
		late, ranked = nil, max(0, count-len(gp))
	}
	// Where both forms are weighed, at most half the ranked plans (rounded
	// up) are of either, unless the other runs short: a list an engine
	// times on its GPU should hold the best plans of both, whatever the
	// model's guess of the warpgroup form's worth (warpgroupPercent) is there.
	per := ranked
	if lim.Warpgroup && o.Warpgroup == 0 {
		per = ranked - ranked/2
	}
	chosen := make([]rated, 0, min(ranked, len(all)))
	taken := map[bool]int{}
	for _, r := range all {
		if len(chosen) < ranked && taken[r.p.Warpgroup] < per {
			taken[r.p.Warpgroup]++
			chosen = append(chosen, r)
		}
	}
	for _, r := range all { // one form ran short: the next best of the other
		if len(chosen) < ranked && taken[r.p.Warpgroup] >= per && !slices.Contains(chosen, r) {
			chosen = append(chosen, r)
		}
	}
	slices.SortStableFunc(chosen, compareRated)
	out := lead
	for _, r := range chosen {
		out = append(out, r.p)
	}
	if len(late) > 0 {
		out = slices.Insert(out, min(1, len(out)), late...)
	}
	out = append(out, gp...)
	if o == (Options{}) && len(lead) == 0 {
		out = formLead(m, n, lim, out)
	}
	return out, nil
}

// CooperativeMinTokens is the fewest tokens for which Choose weighs the
// cooperative split-K sum: with fewer it measured slower than the ticket
// sum on an H100 (8B k_v at 32 tokens 9.7 against 9.2 µs, at 16 tokens and
// below 0.4-0.7 µs slower; docs/kernels.md), and below 4 its
// order of additions would differ from the ticket sum's.
const CooperativeMinTokens = 33

// MaxCandidates bounds the decode-kernel plans SparseCandidates offers.
const MaxCandidates = 8
