// sfsurgery_sm90a.cu: the translation unit behind
// kernels/ptx/sfsurgery_sm90a.ptx, built for the arch-specific sm_90a
// target (see kernels/generate.go for the exact command). The driver
// compiles it only for compute capability 9.0 (H100, H200); the Go package
// loads it there, beside sfsurgery.ptx.
//
// Entry points (extern "C"):
//   gemv_wg_{bf16,f16}_t{1,2,4,8}_s{2,4}
//        the decode-size product in Hopper's warpgroup form (gemv_wg.cuh)
//   gemv_wg64_{bf16,f16}_t{1,2,4,8}_s{2,4}
//        the same with CTAs of 64 rows (kernel_wg's RB = 2)
//   gemv_wg_pair_*, gemv_wg64_pair_*
//        the two with the pair sum (kernel_wg's PAIR)
//   gemv_hy_{bf16,f16}_t{1,2,4,8}_s{2,4}, gemv_hy_pair_*
//        CTAs of one 32-row block (gemv_hy.cuh), and with the pair sum
//   spmm_wg_{bf16,f16}_r256_t{128,192}, spmm_wg_{bf16,f16}_r128_t{64,128}
//        the prefill-size product (spmm_wg.cuh): tiles of 256 weight
//        rows by 128 or 192 tokens, or 128 rows by 64 or 128; each also
//        as *_splitk, with K split over several CTAs
#include "gemv_hy.cuh"
#include "spmm_wg.cuh"

// gemv_wg_{bf16,f16}_t{1,2,4,8}_s{2,4}: grid (ceil(N/128), slices), block
// 160 (4 consumer warps, one row block each, and the producer), dynamic
// shared memory 4·ST·Stage<SC>::kBytes + 1024 + nb·xcap·8·NT·128 + 16·ST
// bytes with ST = Stage<SC>::kDepth,
// cps = ceil(K/64 / slices) and, for xwin = 0 or xwin ≥ cps (the
// slice's activations staged whole), xcap = cps rounded up to a multiple of
// SC and nb = 1, else (in windows of xwin chunks, a multiple of SC, through
// two buffers) xcap = xwin and nb = 2. The operands (Y, X, P, U, and the
// bias B and output type out, the last two parameters), the workspace and
// the counters are those of gemv.cuh's entry points (sfsurgery.cu), and so
// is the result, bit for bit. coop picks the split-K sum, each with the same
// bits: 0 the last slice's; 1 (several slices, M ≥ 4, every CTA resident
// at once: a cooperative launch) the slices share it (finish_coop in
// gemv_wg.cuh) and need 2·(N/32) counters below the workspace.
//
// gemv_wg64_{bf16,f16}_t{1,2,4,8}_s{2,4}: the same but for CTAs of 64
// rows: grid (ceil(N/64), slices), ST = 2·Stage<SC>::kDepth (the same ring
// bytes), and 2·512·NT more bytes of shared memory (the two halves of a
// row block meet there).
//
// gemv_wg_pair_* and gemv_wg64_pair_*: gemv_wg_* and gemv_wg64_* for two
// slices launched as clusters of (1, 2, 1): slice 1 pushes its sums into
// slice 0's shared memory (finish_pair), the same bits as coop = 0 (which
// is what to launch where the clusters are refused), no workspace used;
// RB·(1024·NT + 8) more bytes of shared memory (RB = 4 or 2 row blocks per
// CTA), coop ignored.
// grid.z = G > 1 splits the tokens into G groups of 8·NT (the last holds
// the rest): group z multiplies tokens z·8·NT … with its own S·8·NT·N
// partial sums, from W + z·S·8·NT·N, and its own 2·(N/32) counters, the
// z-th such run below W (so 2·G·(N/32) counters in all).
#define SFS_GEMV_WG(name, T, NT, SC, RB, PAIR)                                                              \
  extern "C" __global__ void __launch_bounds__(32 * (sfs::gemv::kWgWarps + 1))                              \
      name(void* __restrict__ Y, const uint16_t* __restrict__ X, const uint16_t* __restrict__ P,            \
           const uint32_t* __restrict__ U, float* __restrict__ W, int M, int N, int K, int xwin, int coop,     \
           const uint16_t* __restrict__ B, int out) {                                                         \
    sfs::gemv::kernel_wg<T, NT, SC, RB, PAIR>(sfs::gemv::Out(Y, B, out), X, P, U, W, M, N, K, xwin, coop);  \
  }
#define SFS_GEMV_WG_SC(P, RB, PAIR, SC)                           \
  SFS_GEMV_WG(P##_bf16_t1_s##SC, sfs::BF16, 1, SC, RB, PAIR)  \
  SFS_GEMV_WG(P##_bf16_t2_s##SC, sfs::BF16, 2, SC, RB, PAIR)  \
  SFS_GEMV_WG(P##_bf16_t4_s##SC, sfs::BF16, 4, SC, RB, PAIR)  \
  SFS_GEMV_WG(P##_bf16_t8_s##SC, sfs::BF16, 8, SC, RB, PAIR)  \
  SFS_GEMV_WG(P##_f16_t1_s##SC, sfs::F16, 1, SC, RB, PAIR)    \
  SFS_GEMV_WG(P##_f16_t2_s##SC, sfs::F16, 2, SC, RB, PAIR)    \
  SFS_GEMV_WG(P##_f16_t4_s##SC, sfs::F16, 4, SC, RB, PAIR)    \
  SFS_GEMV_WG(P##_f16_t8_s##SC, sfs::F16, 8, SC, RB, PAIR)

SFS_GEMV_WG_SC(gemv_wg, 4, false, 2)
SFS_GEMV_WG_SC(gemv_wg, 4, false, 4)
SFS_GEMV_WG_SC(gemv_wg64, 2, false, 2)
SFS_GEMV_WG_SC(gemv_wg64, 2, false, 4)
SFS_GEMV_WG_SC(gemv_wg_pair, 4, true, 2)
SFS_GEMV_WG_SC(gemv_wg_pair, 4, true, 4)
SFS_GEMV_WG_SC(gemv_wg64_pair, 2, true, 2)
SFS_GEMV_WG_SC(gemv_wg64_pair, 2, true, 4)

#undef SFS_GEMV_WG_SC
#undef SFS_GEMV_WG

// gemv_hy_{bf16,f16}_t{1,2,4,8}_s{2,4}: the hybrid (gemv_hy.cuh) for CTAs
// of one 32-row block: grid (N/32, slices), block 160 (4 consumer warps
// and the producer), dynamic shared memory ST·Stage<SC>::kBytes +
// nb·4·(R+1)·(xw·32+4) + 16·ST + 3·1024·NT bytes with ST =
// 4·Stage<SC>::kDepth, R = min(M, 8·NT) token rows and, for xwin = 0 or
// xwin ≥ cps (the slice's activations staged whole), xw = cps and nb = 1,
// else (windows of xwin chunks, a multiple of 4·SC) xw = xwin and nb = 2;
// no token groups; coop ignored (the last slice's sum). Operands (B and
// out the last two parameters), workspace, counters and result as gemv.cuh's
// entry points (sfsurgery.cu), bit for bit those of gemv with 4 warps and
// kw = 4.
//
// gemv_hy_pair_*: the same for two slices launched as clusters of (1, 2,
// 1), summed as a pair (finish_pair), the same bits as gemv_hy_* (which is
// what to launch where the clusters are refused); 1024·NT + 8 more bytes
// of shared memory.
#define SFS_GEMV_HY(name, T, NT, SC, PAIR)                                                                  \
  extern "C" __global__ void __launch_bounds__(32 * (sfs::gemv::kWgWarps + 1))                              \
      name(void* __restrict__ Y, const uint16_t* __restrict__ X, const uint16_t* __restrict__ P,            \
           const uint32_t* __restrict__ U, float* __restrict__ W, int M, int N, int K, int xwin, int coop,     \
           const uint16_t* __restrict__ B, int out) {                                                         \
    sfs::gemv::kernel_hy<T, NT, SC, PAIR>(sfs::gemv::Out(Y, B, out), X, P, U, W, M, N, K, xwin);            \
  }
#define SFS_GEMV_HY_SC(P, PAIR, SC)                           \
  SFS_GEMV_HY(P##_bf16_t1_s##SC, sfs::BF16, 1, SC, PAIR)  \
  SFS_GEMV_HY(P##_bf16_t2_s##SC, sfs::BF16, 2, SC, PAIR)  \
  SFS_GEMV_HY(P##_bf16_t4_s##SC, sfs::BF16, 4, SC, PAIR)  \
  SFS_GEMV_HY(P##_bf16_t8_s##SC, sfs::BF16, 8, SC, PAIR)  \
  SFS_GEMV_HY(P##_f16_t1_s##SC, sfs::F16, 1, SC, PAIR)    \
  SFS_GEMV_HY(P##_f16_t2_s##SC, sfs::F16, 2, SC, PAIR)    \
  SFS_GEMV_HY(P##_f16_t4_s##SC, sfs::F16, 4, SC, PAIR)    \
  SFS_GEMV_HY(P##_f16_t8_s##SC, sfs::F16, 8, SC, PAIR)

SFS_GEMV_HY_SC(gemv_hy, false, 2)
SFS_GEMV_HY_SC(gemv_hy, false, 4)
SFS_GEMV_HY_SC(gemv_hy_pair, true, 2)
SFS_GEMV_HY_SC(gemv_hy_pair, true, 4)

#undef SFS_GEMV_HY_SC
#undef SFS_GEMV_HY

// spmm_wg_{bf16,f16}_r{R}_t{BN}: the prefill-size product (spmm_wg.cuh)
// in tiles of R weight rows (128·NWG: NWG consumer warpgroups) by BN
// tokens: a persistent grid (at most the units below; one CTA per SM),
// block 128·(NWG + 1) (the consumers, then the producer's warpgroup),
// dynamic shared memory sfs::spmm_wg::Shape<NWG, BN>::kSmem bytes.
// Y [M][N] is f32 where out = 0, the element type rounded to nearest even
// where out = 1, the bias B (N values of the element type) added where
// not null; the operands X [M][K], packed [N][K/2] and the meta come as
// the tensor maps tx, tp and tu that spmm_wg.cuh's TensorMap describes.
// K is one split: S is not read (1); a unit is a tile.
//
// spmm_wg_{bf16,f16}_r{R}_t{BN}_splitk: the same with K in S splits, 1 ≤
// S ≤ 8 (spmm_wg.cuh: Split K): a unit is one split of one tile, the
// grid exactly the ceil(N/R)·ceil(M/BN)·S units, in clusters of (S, 1,
// 1), the S splits of a tile.
#define SFS_SPMM_WG(name, T, NWG, BN, SPLIT)                                                                   \
  extern "C" __global__ void __launch_bounds__(sfs::spmm_wg::Shape<NWG, BN>::kThreads, 1)                     \
      name(void* __restrict__ Y, const __grid_constant__ sfs::spmm_wg::TensorMap tx,                             \
           const __grid_constant__ sfs::spmm_wg::TensorMap tp, const __grid_constant__ sfs::spmm_wg::TensorMap tu, \
           int M, int N, int K, const uint16_t* __restrict__ B, int out, int S) {                                   \
    sfs::spmm_wg::kernel<T, NWG, BN, SPLIT>(sfs::gemv::Out(Y, B, out), tx, tp, tu, M, N, K, S);                \
  }
#define SFS_SPMM_WG_TILE(R, BN, NWG)                                                    \
  SFS_SPMM_WG(spmm_wg_bf16_r##R##_t##BN, sfs::BF16, NWG, BN, false)                     \
  SFS_SPMM_WG(spmm_wg_f16_r##R##_t##BN, sfs::F16, NWG, BN, false)                       \
  SFS_SPMM_WG(spmm_wg_bf16_r##R##_t##BN##_splitk, sfs::BF16, NWG, BN, true)             \
  SFS_SPMM_WG(spmm_wg_f16_r##R##_t##BN##_splitk, sfs::F16, NWG, BN, true)
SFS_SPMM_WG_TILE(256, 128, 2)
SFS_SPMM_WG_TILE(128, 128, 1)
SFS_SPMM_WG_TILE(256, 192, 2)
SFS_SPMM_WG_TILE(128, 64, 1)
#undef SFS_SPMM_WG_TILE
#undef SFS_SPMM_WG
