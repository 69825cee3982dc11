// probe_hybrid.cuh: the hybrid decode kernel (kernels/cuda/gemv_hy.cuh: CTAs of
// one 32-row block, the warpgroup form's producer feeding four mma.sp
// consumer warps) as plain __global__ functions for pdl_probe's "hy"
// plans (BF16), and hy_kernel to pick one. gemv_hy.cuh includes
// kernels/cuda/gemv_wg.cuh itself, so a probe built with -DGEMV_WG_CUH=another
// version cannot include this too. Not part of the product.
#pragma once

#include "../../kernels/cuda/gemv_hy.cuh"

#define SFS_PROBE_HY(name, NT, SC, PAIR)                                                                  \
  __global__ void __launch_bounds__(160)                                                                  \
      name(float* Y, const uint16_t* X, const uint16_t* P, const uint32_t* U, float* W, int M, int N, int K, \
           int xwin, int mode) {                                                                          \
    sfs::gemv::kernel_hy<sfs::BF16, NT, SC, PAIR>(Y, X, P, U, W, M, N, K, xwin);                           \
  }
SFS_PROBE_HY(hy_t1_s2, 1, 2, false)
SFS_PROBE_HY(hy_t1_s4, 1, 4, false)
SFS_PROBE_HY(hy_t2_s2, 2, 2, false)
SFS_PROBE_HY(hy_t2_s4, 2, 4, false)
SFS_PROBE_HY(hy_t4_s2, 4, 2, false)
SFS_PROBE_HY(hy_t4_s4, 4, 4, false)
SFS_PROBE_HY(hy_t8_s2, 8, 2, false)
SFS_PROBE_HY(hy_t8_s4, 8, 4, false)
SFS_PROBE_HY(hyp_t1_s2, 1, 2, true)
SFS_PROBE_HY(hyp_t1_s4, 1, 4, true)
SFS_PROBE_HY(hyp_t2_s2, 2, 2, true)
SFS_PROBE_HY(hyp_t2_s4, 2, 4, true)
SFS_PROBE_HY(hyp_t4_s2, 4, 2, true)
SFS_PROBE_HY(hyp_t4_s4, 4, 4, true)
SFS_PROBE_HY(hyp_t8_s2, 8, 2, true)
SFS_PROBE_HY(hyp_t8_s4, 8, 4, true)
#undef SFS_PROBE_HY

// hy_kernel returns the hybrid kernel for nt tiles (1, 2, 4, 8), sc (2, 4),
// with the pair sum or not.
inline WgKernel hy_kernel(int nt, int sc, bool pair) {
  const WgKernel k[2][4][2] = {
      {{hy_t1_s2, hy_t1_s4}, {hy_t2_s2, hy_t2_s4}, {hy_t4_s2, hy_t4_s4}, {hy_t8_s2, hy_t8_s4}},
      {{hyp_t1_s2, hyp_t1_s4}, {hyp_t2_s2, hyp_t2_s4}, {hyp_t4_s2, hyp_t4_s4}, {hyp_t8_s2, hyp_t8_s4}}};
  return k[pair][nt == 1 ? 0 : nt == 2 ? 1 : nt == 4 ? 2 : 3][sc == 4];
}
