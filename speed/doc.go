// Package speed measures, on the GPU at hand, how fast 2:4 sparse weights
// multiply against dense ones, and turns the measurements into a dispatch
// policy an engine can apply.
//
// For each weight shape (N out, K in) and token count M it times y[M][N] =
// x[M][K]·Wᵀ through three backends: dense cuBLASLt (the heuristic's top
// candidates, keeping the fastest, as an engine would), the package
// kernels' own kernels reading sfsurgery's packed + meta layout (what
// SparseMatmul runs: the decode kernels up to 64 tokens, above them the
// wgmma.sp prefill kernel on sm_90a and the tiled mma.sp one elsewhere), and
// cuSPARSELt when the library is found (plan and algorithm search once per
// shape and M, never per call). Every sparse result is compared with the
// dense one before it is timed; a wrong result is reported as an error,
// never as a speed.
//
// Timing follows the device notes of this project: CUDA events around each
// iteration, warm-up first, the median of at least 20 runs, a large
// device-to-device copy queued ahead so the GPU never waits for the host,
// and inputs rotated among enough copies that the set exceeds twice the L2
// cache. The ceilings (copy bandwidth, a large cuBLASLt GEMM) are measured
// in the same run, and every row reports the fraction of its floor
// max(bytes / bandwidth, FLOPs / peak) that it reached.
//
// What needs no GPU is pure and tested here: shapes of a checkpoint,
// policy derivation ([DerivePolicy]), the Amdahl estimate ([Amdahl]), the
// floors ([Cost]) and the plot ([WritePlot]). [Run] needs a GPU.
package speed
