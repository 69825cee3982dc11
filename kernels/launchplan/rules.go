package launchplan

import "slices"

// pairLeadTokens is the most tokens at which formLead runs a pair of
// 128-row CTAs first.
const pairLeadTokens = 32

// formLead returns out with, where the model's own first plan leads (no
// hybrid, 64-row pair or token-group plan does), one plan of the
// warpgroup form moved to the front: up to pairLeadTokens tokens the
// first pair of 128-row CTAs whose grid is one wave; else, where the
// first plan is the mma.sp form and either the grid of one slice of
// 128-row CTAs is one wave or there are more than 32 tokens, the first
// warpgroup plan of one slice. The model was fitted to the eight Llama-3
// projection shapes, and ranks the mma.sp form first on shapes outside
// them where the warpgroup form is faster: bench's 8 candidates with
// their medians (H100, BF16; docs/kernels.md) put
// SparseMatmul's own plan 11-15% behind the fastest on Llama-3-8B's
// stacked qkv (6144 × 4096) at 1-4 tokens, 5-19% on 70B's (10240 × 8192)
// at 8-64, 7% on 8B's gate_up (28672 × 4096) at 64 and 8-20% on
// TinyLlama's stacked shapes and q/o. With this rule those rows take the
// plan that was fastest, and no row of the 168 measured (the eight
// shapes, both models' stacks, TinyLlama's, M = 1-64) got slower by more
// than 1%; on an H200, where it was not derived, the same rows went from
// 2.1% to 0.7% behind the fastest on average, none slower
// (TestPlanAgainstBench).
func formLead(m, n int, lim Limits, out []Plan) []Plan {
	i := -1
	if m <= pairLeadTokens {
		i = slices.IndexFunc(out, func(p Plan) bool {
			return p.Pair && p.RowBlocks != 1 && 2*ceilDiv(n/32, p.blocks()) <= lim.SMs
		})
	}
	if i < 0 && len(out) > 0 && !out[0].Warpgroup && (ceilDiv(n, 128) <= lim.SMs || m > 32) {
		i = slices.IndexFunc(out, func(p Plan) bool { return p.Warpgroup && p.Slices == 1 && p.TokenGroups == 0 && p.RowBlocks != 1 })
	}
	if i <= 0 {
		return out
	}
	first := out[i]
	return slices.Insert(slices.Delete(out, i, i+1), 0, first)
}

// hybridMaxTokens is the most tokens for which Choose runs the hybrid
// (hybridPlan), and hybridMinCTAs the fewest CTAs: it was measured on
// 1024 rows (64 CTAs); on fewer the planner's plans fill more SMs.
const (
	hybridMaxTokens = 8
	hybridMinCTAs   = 64
)

// hybridLeadChunks is the longest slice, in chunks, on which Choose runs
// the hybrid first at up to hybridMaxTokens tokens, and
// hybridLeadLongChunks the longest at up to hybridLeadLongTokens; on longer
// ones it is the second candidate, which engines and bench time.
// SparseMatmul's default against the fastest of bench's 8 candidates (BF16,
// µs): on 8B k/v (slices of 32 chunks) the hybrid was the
// fastest at 1-8 tokens on the H100 and the H200; on TinyLlama's down (2048
// × 5632, 44 chunks) at 1, 2, 4 tokens on the H200 (6.8, 7.0, 7.4) but not
// at 8 (an 8-slice plan was the fastest, 7.7-7.9), and at 1 on the H100
// (7.6 against 8.4 for the plans before it); on 70B k/v (64 chunks) on the
// H100 at 1-2 tokens only (7.0 against 7.2), and on the H200 it took 6.8,
// 6.8, 7.4, 7.9 at 1, 2, 4, 8 tokens against the 16-slice plan's 6.5, 6.6,
// 6.7, 6.9.
const (
	hybridLeadChunks     = 32
	hybridLeadLongChunks = 48
	hybridLeadLongTokens = 4
)

// hybridLeads reports whether Choose runs the hybrid's plan hy for m
// tokens ahead of the model's (hybridLeadChunks).
func hybridLeads(m int, hy Plan) bool {
	return hy.ChunksPerSlice <= hybridLeadChunks || hy.ChunksPerSlice <= hybridLeadLongChunks && m <= hybridLeadLongTokens
}

// hybridPlan returns the hybrid's pair (two slices of 32-row CTAs in
// 4-chunk stages, the activations staged whole up to 2 tokens and in
// windows of hybridWindow chunks from 4) that the candidates hold, for m
// of at most hybridMaxTokens tokens where its grid is one wave of at
// least hybridMinCTAs CTAs (n of 1024-2112 rows on an H100), and false
// where there is none: first (Choose's plan) where hybridLeads says,
// else second. Measured against the planner's plan without it (H100,
// `pdl_probe hy`, µs; docs/kernels.md): 70B k/v (1024 × 8192) 7.0-7.3 against 8.0 at one token, 7.4
// against 8.1 at two, 7.5 against 8.1 at four, 8.1 against 8.3 at eight,
// but 9.2 against 8.3 at sixteen; 8B k/v (1024 × 4096) 5.0 against 6.1 at
// one token, 6.4 against 6.5 at sixteen.
func (md costModel) hybridPlan(m, n, k int, lim Limits) (Plan, bool) {
	if ctas := 2 * (n / 32); !lim.Warpgroup || m > hybridMaxTokens || ctas > lim.SMs || ctas < hybridMinCTAs || k/ChunkColumns < 2 {
		return Plan{}, false
	}
	o := Options{Rows: 32, Pair: 1, ChunksPerStage: 4, Window: -1}
	if m > 2 {
		o.Window = 1
	}
	ps, err := md.candidates(m, n, k, lim, o, 1)
	if err != nil && o.Window == -1 {
		o.Window = 1
		ps, err = md.candidates(m, n, k, lim, o, 1)
	}
	if err != nil {
		o.Window = -1 // a slice of one window is staged whole
		ps, err = md.candidates(m, n, k, lim, o, 1)
	}
	if err != nil {
		return Plan{}, false
	}
	return ps[0], true
}

// groupMinTokens is the fewest tokens for which the candidates hold
// token-group plans. Two groups launched as clusters measured, against
// the planner's plan (H100, `pdl_probe clusters`; docs/kernels.md): at
// 16 tokens (groups of 8) 1.5-2% faster on k/v and 70B
// q/o, even on 8B q/o, 2.6% slower on 8B down; at 32 (groups of 16) 3-6%
// faster on k/v and 70B q/o, 2-3% slower on 8B q/o and down. `sfsurgery
// bench` at 32 tokens: 70B k/v 9.1 → 8.2 µs, 8B k/v 7.3 → 6.6.
const groupMinTokens = 9

// groupPickTokens and groupPickChunks bound where Choose runs
// two token groups in clusters (groupPlans' first plan) instead of the
// model's plan: from 33 tokens, where a slice holds at most 32 chunks, so
// that the split-K sum the groups shorten is a large part of the call.
// At 64 tokens SparseMatmul's plan went, in µs (BenchmarkGPUDecode, BF16,
// "wg" → "auto": the model's plan → this one):
//
//	              H100          H200
//	8B q/o        15.2 → 13.3   13.1 → 12.2   (2 slices of 32 chunks)
//	8B k/v        10.5 → 9.4     9.7 → 8.8    (8 of 8)
//
// and `sfsurgery bench` found it the fastest of the 8 candidates for 70B
// k/v (8 slices of 16) on both. Longer slices won bench's rows on the
// H100 (1431e81's row → ea5b83b's: 8B down 33.3 → 30.2, 70B q/o 35.8 →
// 31.0, 70B down 102.0 → 98.3) but lost on the H200, whose DRAM
// outruns the L2 that the second group reads from (BenchmarkGPUDecode:
// 8B down 26.7 → 27.5, 70B down 76.5 → 89.6): there they stay
// candidates, which bench times.
const (
	groupPickTokens = 33
	groupPickChunks = 32
)

// groupPickShortTokens and groupPickShortChunks extend that pick
// down to 16 tokens where a slice holds at most 16 chunks (8 slices of
// k/v's 4096 or 8192 columns; every other Llama-3 shape's first group
// plan has slices of 32 chunks or more). There two groups of 8 or 16 in
// clusters were bench's fastest candidate at 16 and 32 tokens on the H100
// and the H200, both types (docs/decode-h*-*.md), while
// Choose's own plan took, on the H200 (BF16, µs), 6.7 against 5.8 on
// 8B k/v and 7.8 against 7.1 on 70B k/v at 16 tokens.
const (
	groupPickShortTokens = 16
	groupPickShortChunks = 16
)

// groupPickMidTokens and groupPickMidChunks extend that pick, from
// 17 tokens (groups of 16), to slices of up to 24 chunks: TinyLlama's down
// (2048 × 5632, 4 slices of 22 chunks) at 32 tokens took 10.0 µs in two
// groups in clusters against 10.9 for Choose's plan without the pick on
// the H100, 9.6 against 9.6-9.7 on the H200 (BF16, bench's candidates).
// At 16 tokens the same groups were 8% slower on the H200,
// so the pick starts above it.
const (
	groupPickMidTokens = 17
	groupPickMidChunks = 24
)

// groupPickMinChunks: from groupPickTokens, Choose picks the
// first group plan whose slices hold at least this many chunks, where there
// is one, else the one of the most CTAs: on TinyLlama's k/v (256 × 2048,
// two 128-row blocks) at 64 tokens four groups of 16 (64 CTAs) took 5.0 µs
// against 6.1 for two groups in clusters (32 CTAs), on the H100 and the
// H200 alike (BF16, bench's candidates). On 8B k/v at 64 tokens
// two groups of 32 in clusters over 8 slices of 8 chunks took 8.26 µs, four
// groups of 16 over 4 slices of 16 7.37 (H100, BF16, SparseMatmul's plan
// against the fastest of bench's 8 candidates; F16 alike, and bench's
// fastest on the H200 too: 7.2); on 70B k/v two groups over 8 slices of 16
// were the fastest on both GPUs.
const groupPickMinChunks = 16

// groupPick returns the index of the group plan of gp that Choose runs
// for m tokens (see groupPickTokens, groupPickShortTokens,
// groupPickMidTokens and groupPickMinChunks), or -1 for none.
func groupPick(m int, gp []Plan) int {
	if len(gp) == 0 {
		return -1
	}
	if gp[0].Cluster == 0 {
		return -1 // no two groups in clusters: groups of 8-32 tokens fill the grid
	}
	if m >= groupPickTokens {
		i := slices.IndexFunc(gp, func(p Plan) bool { return p.ChunksPerSlice >= groupPickMinChunks })
		if i < 0 { // short slices everywhere: the plan of the most CTAs
			i = 0
			for j, p := range gp {
				if p.Slices*p.TokenGroups > gp[i].Slices*gp[i].TokenGroups {
					i = j
				}
			}
		}
		if gp[i].ChunksPerSlice <= groupPickChunks {
			return i
		}
		return -1
	}
	if m >= groupPickShortTokens && gp[0].ChunksPerSlice <= groupPickShortChunks ||
		m >= groupPickMidTokens && gp[0].ChunksPerSlice <= groupPickMidChunks {
		return 0
	}
	return -1
}

// groupPlans returns the token-group plans the candidates end with (at
// most two, of the warpgroup form on sm_90a devices, from
// groupMinTokens tokens): groups of 32 or 16 tokens where they make
// two to four groups, or two of 8, each with the most slices (8, 4, 2 or 1) that
// keep the grid within one wave, in 4-chunk stages, the activations staged
// whole where they fit; two groups launch as clusters. The model has no
// term for reading the weight once per group, so it does not rank them:
// an engine times them beside its plans, and Choose picks one only
// where groupPick says (candidates).
func (md costModel) groupPlans(m, n, k int, lim Limits) []Plan {
	if !lim.Warpgroup || m < groupMinTokens {
		return nil
	}
	var out []Plan
	rowCTAs := ceilDiv(n/32, warpgroupWarps)
	for _, tiles := range []int{4, 2, 1} {
		groups := ceilDiv(m, 8*tiles)
		if groups < 2 || groups > 4 || tiles == 1 && groups > 2 || len(out) == 2 {
			continue // groups of 8 tokens were measured as two only
		}
		for _, s := range []int{8, 4, 2, 1} {
			if rowCTAs*s*groups > lim.SMs || s > k/ChunkColumns {
				continue
			}
			// The activations staged whole where they fit (no window
			// switches, as measured), else in the model's windows.
			o := Options{Warpgroup: 1, ChunksPerStage: 4, Slices: s, TokenTiles: tiles, Window: -1, Rows: 128}
			ps, err := md.candidates(m, n, k, lim, o, 1)
			if err != nil {
				o.Window = 0
				ps, err = md.candidates(m, n, k, lim, o, 1)
			}
			if err == nil {
				out = append(out, ps[0])
			}
			break
		}
	}
	return out
}

// widestPairWindow returns the widest window of activations (a multiple of
// sc chunks) that a pair of 64-row CTAs holds in lim's shared memory, or
// 0.
func widestPairWindow(tiles, sc int, lim Limits) int {
	xw := 0
	for w := sc; sharedWarpgroup(tiles, sc, 0, w, 2, true) <= lim.SharedPerBlock; w += sc {
		xw = w
	}
	return xw
}

// pairMaxWindow is the widest window of activations, in chunks, that a
// pair of 64-row CTAs runs unforced.
const pairMaxWindow = 16

// pairWindow returns the window of activations, in chunks, of a pair
// of 64-row CTAs: pairMaxWindow, or the widest that fits if narrower
// (widestPairWindow); a slice of at most that many chunks is staged whole.
// Fewer window switches ran faster, up to 16 chunks; beyond that the
// first window, which the consumers stage before their first product,
// cost more than the switches it saved (H100, `pdl_probe pairwin`, µs,
// 8B down: at 8 tokens 25.9 in windows of 16 or 36, 26.4 staged whole;
// at 16 tokens 27.9 / 26.3 / 26.3 / 26.5 / 27.5 in windows of 8 / 12 /
// 16 / 24 / 36; at 32 tokens 31.1 / 28.8 / 27.1 / 27.0 in windows of 6 /
// 8 / 12 / 16; at 64 tokens 32.6 / 30.3 in windows of 6 / 8, the widest
// that fit; 8B q/o at 16 tokens 10.1 whole or in windows of 16, 10.2 in
// windows of 8, at 32 tokens 10.4 / 10.5 in windows of 12 / 16). The
// model prices such a window as one of minWindow's width (rate).
func pairWindow(tiles, sc int, lim Limits) int {
	return min(pairMaxWindow/sc*sc, widestPairWindow(tiles, sc, lim))
}

// wideWindow is the window of activations, in chunks, of the
// warpgroup form's 128-row CTAs in 2-chunk stages where their buffers fit
// (else minWindow's 6), priced by the model as minWindow's. Measured
// (H100, `pdl_probe win128`, µs, windows of 6 / 8 at 64 tokens): 8B
// gate/up 29.0 / 28.65, 70B gate/up 103.7 / 100.9; a pair of 64-row CTAs
// gains the same way (pairWindow). In 4-chunk stages minWindow's 8
// ran fastest (8B gate/up at 16 tokens 26.2 against 26.4 in windows of
// 16, at 32 tokens 26.6 against 27.2 in windows of 12; 70B q/o and down
// within 0.5%).
const wideWindow = 8

// widened returns p, a windowed plan of 128-row CTAs in 2-chunk stages,
// in windows of wideWindow chunks where its slice is longer and its
// buffers fit in lim's shared memory for m tokens, else in minWindow's.
func (p Plan) widened(m int, lim Limits) Plan {
	wide := p
	wide.WindowChunks = wideWindow
	if p.ChunksPerSlice > wideWindow && wide.sharedBytes(m) <= lim.SharedPerBlock {
		return wide
	}
	p.WindowChunks = minWindow(p.ChunksPerStage, 1)
	return p
}

// pairRowsLead reports whether Choose weighs p, of 64-row CTAs, unforced:
// only as a pair whose grid is one wave over at least half the SMs (n of
// 2112-4224 rows on an H100), where 128-row CTAs leave SMs idle, in 2-chunk
// stages (plansCTA), in windows of pairWindow chunks. Measured against
// the best 128-row plan (H100, `pdl_probe pairs`; docs/kernels.md): 8B
// q/o 6-23% faster at every token count; 8B down 3% faster at 1 token,
// 1.5% slower at 16, even at 32, 2% faster at 64 (in windows of 6-8
// chunks; pairWindow's are faster still). With one slice (70B q/o: 30.8
// against 30.3 µs at 16 tokens; 8B gate/up: 224 CTAs in two waves, 36.2
// against 29.1 at 64) and with more slices summed by tickets (70B k/v:
// even) they were no faster; 4-chunk stages ran even with 2-chunk ones at
// 1-16 tokens and slower at 32 (8B q/o: 11.4 against 10.9 µs) and 64 (13.5
// in the widest windows that fit, 4 chunks, against 11.5).
func pairRowsLead(p Plan, n int, lim Limits) bool {
	ctas := ceilDiv(n/32, 2) * p.Slices
	return p.Pair && 2*ctas >= lim.SMs && ctas <= lim.SMs
}
