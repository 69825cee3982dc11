package launchplan

// Options force parts of a plan (benchmarks and tests); zero fields are
// the planner's choice. The fields that take -1 and 1 force a feature off
// and on.
type Options struct {
	ChunksPerStage   int // chunks of k per pipeline stage: 2 or 4
	Warps            int // warps per CTA, 1 … 8
	WarpsPerRowBlock int // warps sharing one 32-row block: 1, 2, 4 or 8, dividing Warps
	Slices           int // slices of k, rounded so that none is empty
	// Window stages a slice's activations in windows of the least width
	// the kernel allows (1) or whole (-1).
	Window int
	// Warpgroup forces the warpgroup form (1; sm_90a devices only) or the
	// mma.sp kernel (-1).
	Warpgroup int
	// Cooperative forces the warpgroup form's cooperative split-K sum (1)
	// or the last slice's (-1).
	Cooperative int
	// TokenTiles splits the tokens into groups of 8·TokenTiles (1, 2, 4 or
	// 8), one per grid.z, each CTA multiplying one group's (the warpgroup
	// form only); 0: every CTA all m tokens.
	TokenTiles int
	// Cluster -1 launches two token groups without clusters (see
	// Plan.Cluster).
	Cluster int
	// Rows forces the warpgroup form's CTAs of 128 or 64 weight rows
	// (Plan.RowBlocks 4 or 2), or the hybrid's of 32 (RowBlocks 1).
	Rows int
	// Pair forces two slices summed as a pair (1; Plan.Pair) or the last
	// slice's sum (-1).
	Pair int
}
