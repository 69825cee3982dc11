package launchplan

import "fmt"

// Plan is one launch of a decode kernel for a token count and weight
// shape. It is comparable; [Plan.Launch] makes the launch record.
type Plan struct {
	TokenTiles       int // 8-token tiles a CTA multiplies: 1, 2, 4 or 8
	ChunksPerStage   int // chunks of k per pipeline stage: 2 or 4
	Warps            int // consumer warps per CTA
	WarpsPerRowBlock int // warps sharing one 32-row block, taking its stages in turn
	Slices           int // slices of k (grid.y); more than one uses the workspace
	// ChunksPerSlice is ceil(k/64 / Slices) (the last slice may hold
	// fewer); the kernel derives it from the grid.
	ChunksPerSlice int
	// WindowChunks is the chunks per window of activations staged in
	// shared memory, or 0: the slice's staged whole.
	WindowChunks int
	SharedBytes  int // dynamic shared memory per CTA
	// Warpgroup: the warpgroup form (kernels/cuda/gemv_wg.cuh: 4 consumer
	// warps of one row block each and a producer warp; sm_90a), or with
	// RowBlocks 1 the hybrid; else the mma.sp kernel.
	Warpgroup bool
	// Cooperative: a cooperative launch of the warpgroup form whose slices
	// share the split-K sum (finish_coop), rather than leave it to the
	// last; several slices, at most one CTA per SM, CooperativeMinTokens
	// or more.
	Cooperative bool
	// TokenGroups is the token groups of the warpgroup form (grid.z, 2 or
	// more; TokenTiles is then a group's): each CTA multiplies 8·TokenTiles
	// of the tokens and the weight is read once per group, from L2 after
	// the first, for fewer slices of k. 0: one group of all the tokens.
	TokenGroups int
	// RowBlocks is the warpgroup form's 32-row blocks per CTA: 4 (128
	// rows, a consumer warp each) or 2 (64 rows, a warp per 16-row half,
	// twice the CTAs for the same slices); or 1, the hybrid
	// (kernels/cuda/gemv_hy.cuh: one row block, the warpgroup form's
	// producer, four mma.sp consumer warps taking its stages in turn; no
	// token groups, no cooperative sum). 0 for the mma.sp kernel
	// (Warps/WarpsPerRowBlock blocks).
	RowBlocks int
	// Pair: two slices of the warpgroup form summed as a pair (kernel_wg's
	// PAIR in kernels/cuda/gemv_wg.cuh): the two CTAs of a row group run
	// as a cluster of (1, 2, 1) and slice 1 pushes its sums into slice 0's
	// shared memory, with the ticket sum's bits; no token groups.
	Pair bool
	// Cluster is the CTAs per thread-block cluster along grid.z: 2 for two
	// token groups, so that the two CTAs of a row block and slice start
	// together on one GPC and the second finds the weight in that GPC's
	// half of L2 (H100: without clusters two groups ran up to 10% slower
	// or not, run to run, where the weight is larger than L2). 0: no
	// clusters (clusters of 4 one-CTA-per-SM CTAs do not fit 132 SMs in
	// one wave).
	Cluster int
}

// blocks returns the 32-row blocks of a CTA of p.
func (p Plan) blocks() int {
	if p.Warpgroup && p.RowBlocks > 0 {
		return p.RowBlocks
	}
	return p.Warps / p.WarpsPerRowBlock
}

// grid returns the launch grid of p for n weight rows.
func (p Plan) grid(n int) [3]uint32 {
	return [3]uint32{uint32(ceilDiv(n/32, p.blocks())), uint32(p.Slices), uint32(max(1, p.TokenGroups))}
}

// clusterDims returns the cluster dimensions of p's launch: (1, 2, 1) for
// a pair, (1, 1, Cluster) for token groups, or zero for none.
func (p Plan) clusterDims() [3]uint32 {
	switch {
	case p.Pair:
		return [3]uint32{1, 2, 1}
	case p.Cluster > 0:
		return [3]uint32{1, 1, uint32(p.Cluster)}
	}
	return [3]uint32{}
}

// workspace returns the u32 counters and the float partial sums p's
// launches for m tokens and n rows need in the split-K workspace (none
// for one slice): a counter per 32-row block (two for the cooperative
// sum) and the slices' sums of every token; with token groups, two
// counters per row block and the sums of 8·TokenTiles tokens for each
// group. A pair uses none but keeps the ticket sum's, its fallback.
func (p Plan) workspace(m, n int) (counters int, partials int64) {
	switch {
	case p.Slices <= 1:
		return 0, 0
	case p.TokenGroups > 1:
		return p.TokenGroups * 2 * (n / 32), int64(p.TokenGroups) * int64(p.Slices) * int64(8*p.TokenTiles) * int64(n)
	case p.Cooperative:
		return 2 * (n / 32), int64(p.Slices) * int64(m) * int64(n)
	}
	return n / 32, int64(p.Slices) * int64(m) * int64(n)
}

// threads returns the CTA size of p: its warps, and the warpgroup form's
// producer warp.
func (p Plan) threads() int {
	if p.Warpgroup {
		return 32 * (p.Warps + 1)
	}
	return 32 * p.Warps
}

// String describes p as kernels.Device.SparseCandidates lists it, e.g.
// "decode sc4 w4 kw1 s2 xw16 wg r32 pair": chunks per stage (sc), warps
// per CTA (w) and per row block (kw), slices (s), chunks per window of
// activations (xw, 0: staged whole), then " wg" for the warpgroup form,
// " r64" or " r32" for its CTAs of 64 rows or the hybrid's of 32, " pair",
// " tokN" for token groups of N tokens, " cl2" for clusters of two groups
// and " coop" for the cooperative sum. Engines and policies name plans by
// it, so its form does not change.
func (p Plan) String() string {
	s := fmt.Sprintf("decode sc%d w%d kw%d s%d xw%d", p.ChunksPerStage, p.Warps, p.WarpsPerRowBlock, p.Slices, p.WindowChunks)
	if p.Warpgroup {
		s += " wg"
	}
	switch p.RowBlocks {
	case 2:
		s += " r64"
	case 1:
		s += " r32"
	}
	if p.Pair {
		s += " pair"
	}
	if p.TokenGroups > 1 {
		s += fmt.Sprintf(" tok%d", 8*p.TokenTiles)
	}
	if p.Cluster > 1 {
		s += fmt.Sprintf(" cl%d", p.Cluster)
	}
	if p.Cooperative {
		s += " coop"
	}
	return s
}
