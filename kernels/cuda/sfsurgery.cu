// sfsurgery.cu: the one translation unit behind kernels/ptx/sfsurgery.ptx.
// Built to compute_80 PTX (see kernels/generate.go for the exact command).
// sfsurgery_sm90a.cu is the other one: the decode kernel's warpgroup form,
// for sm_90a only.
//
// Entry points (extern "C"):
//   spmm_bf16, spmm_f16   2:4 sparse GEMM from packed + meta (spmm.cuh)
//   gemv_{bf16,f16}_t{1,2,4,8}_s{2,4}
//                         the same product at decode sizes, M ≤ 64 (gemv.cuh;
//                         defined below, as gemv.cuh is shared by both units)
//   decode_ampere16       packed + meta → dense pruned W (decode.cuh)
//   dense_bf16, dense_f16 plain dense GEMM, CUDA cores (dense.cuh)
#include "spmm.cuh"
#include "gemv.cuh"
#include "decode.cuh"
#include "dense.cuh"

// gemv_{bf16,f16}_t{1,2,4,8}_s{2,4}: grid (ceil(N/32 / (warps/kw)),
// slices), block 32·warps (≤ 256), kw warps per row block, dynamic shared
// memory warps·ST·Stage<SC>::kBytes + nb·4·(min(M, 8·NT) + 1)·(xw·32 + 4)
// bytes with cps = ceil(K/64 / slices) and, for xwin = 0 or xwin ≥ cps (the
// slice's activations staged whole), xw = cps and nb = 1, else (staged in
// windows of xwin chunks through two buffers) xw = xwin and nb = 2; a window
// size must then be a multiple of kw·SC and at least (ST-1)·kw·SC. NT is
// the number of 8-token tiles (M ≤ 8·NT), SC the chunks per pipeline
// stage. X is [M][K]; P (packed) is [N][K/2]; U is the stored meta viewed
// as uint32 (N·K/32 words). W (several slices only; unused with one) is
// the f32 workspace [slices][M][N], 16-byte aligned, preceded by the N/32
// u32 ticket counters, all zero at launch and left zero. Y is [M][N],
// 16-byte aligned, written with plain stores: the f32 sum s of token m,
// row n, plus float(B[n]) where B (N values of the element type) is not
// null, stored as f32 where out = 0 and rounded to nearest even to the
// element type where out = 1 (with B null and out = 0, s itself).
#define SFS_GEMV(name, T, NT, SC)                                                                             \
  extern "C" __global__ void __launch_bounds__(sfs::gemv::kMaxThreads)                                       \
      name(void* __restrict__ Y, const uint16_t* __restrict__ X, const uint16_t* __restrict__ P,             \
           const uint32_t* __restrict__ U, float* __restrict__ W, int M, int N, int K, int xwin, int kw,       \
           const uint16_t* __restrict__ B, int out) {                                                         \
    sfs::gemv::kernel<T, NT, SC>(sfs::gemv::Out(Y, B, out), X, P, U, W, M, N, K, xwin, kw);                  \
  }
#define SFS_GEMV_SC(SC)                              \
  SFS_GEMV(gemv_bf16_t1_s##SC, sfs::BF16, 1, SC)     \
  SFS_GEMV(gemv_bf16_t2_s##SC, sfs::BF16, 2, SC)     \
  SFS_GEMV(gemv_bf16_t4_s##SC, sfs::BF16, 4, SC)     \
  SFS_GEMV(gemv_bf16_t8_s##SC, sfs::BF16, 8, SC)     \
  SFS_GEMV(gemv_f16_t1_s##SC, sfs::F16, 1, SC)       \
  SFS_GEMV(gemv_f16_t2_s##SC, sfs::F16, 2, SC)       \
  SFS_GEMV(gemv_f16_t4_s##SC, sfs::F16, 4, SC)       \
  SFS_GEMV(gemv_f16_t8_s##SC, sfs::F16, 8, SC)

SFS_GEMV_SC(2)
SFS_GEMV_SC(4)

#undef SFS_GEMV_SC
#undef SFS_GEMV
