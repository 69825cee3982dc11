package launchplan

// Limits are the device properties the planner works with.
type Limits struct {
	SMs            int `json:"sms"`              // streaming multiprocessors
	SharedPerBlock int `json:"shared_per_block"` // dynamic shared memory one CTA may use: the opt-in maximum
	SharedPerSM    int `json:"shared_per_sm"`    // shared memory of one SM
	// Warpgroup reports that the sm_90a module ([ModuleSM90a]: the
	// warpgroup form and the hybrid) is loaded, on a device of compute
	// capability 9.0.
	Warpgroup bool `json:"warpgroup"`
}

// KnownLimits returns the limits of GPUs by name, for planning without
// the GPU at hand: "h100" and "h200" (SXM: 132 SMs, sm_90a), "a100"
// (108 SMs) and "l4" (58 SMs, sm_89). A device's own limits, read by
// package kernels, are what SparseMatmul plans with; TestKnownLimitsH100
// on a GPU host checks the H100's against them.
func KnownLimits() map[string]Limits {
	hopper := Limits{SMs: 132, SharedPerBlock: 232448, SharedPerSM: 233472, Warpgroup: true}
	return map[string]Limits{
		"h100": hopper,
		"h200": hopper,
		"a100": {SMs: 108, SharedPerBlock: 166912, SharedPerSM: 167936},
		"l4":   {SMs: 58, SharedPerBlock: 101376, SharedPerSM: 102400},
	}
}

// Geometry of the decode kernels (kernels/cuda/gemv.cuh).
const (
	// MaxTokens is the most tokens a decode kernel multiplies: 8 tiles of
	// 8 tokens.
	MaxTokens = 64
	// ChunkColumns is the dense columns of k in one chunk, the unit of
	// the kernels' pipelines; k must be a multiple of it.
	ChunkColumns = 64
	maxWarps     = 8  // the kernels' __launch_bounds__(256)
	minWarps     = 2  // the smallest CTA Choose picks unless forced
	chunkWords   = 32 // u32 words of one token's activations per chunk
	padWords     = 4  // padding words per token row in shared memory
	// chunkBytes is the DRAM bytes of one warp's chunk: 32 rows of 64
	// packed bytes and 8 bytes of meta.
	chunkBytes = 32 * (64 + 8)
	// warpgroupWarps is the warpgroup form's consumer warps (kWgWarps in
	// kernels/cuda/gemv_wg.cuh), one row block each.
	warpgroupWarps = 4
	maxGridY       = 65535 // CUDA's grid.y limit: the slices of k
	// MaxDim is the largest n or k a plan takes: every kernel parameter
	// and grid dimension of its launch then fits a 32-bit int.
	MaxDim = 1 << 30
)

func ceilDiv(a, b int) int { return (a + b - 1) / b }
