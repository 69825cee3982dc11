package launchplan

// Limits are the device properties the planner works with.
type Limits struct {
	SMs            int // streaming multiprocessors
	SharedPerBlock int // dynamic shared memory one CTA may use: the opt-in maximum
	SharedPerSM    int // shared memory of one SM
	// Warpgroup reports that the sm_90a module ([ModuleSM90a]: the
	// warpgroup form and the hybrid) is loaded, on a device of compute
	// capability 9.0.
	Warpgroup bool
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
)

func ceilDiv(a, b int) int { return (a + b - 1) / b }
