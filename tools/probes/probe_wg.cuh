// probe_wg.cuh: the warpgroup form's kernel (kernels/cuda/gemv_wg.cuh, included
// first) as plain __global__ functions for the standalone probes
// (coop_probe.cu, pdl_probe.cu): wg_t{NT}_s{SC} for BF16 and every
// entry point the product has, and wg_kernel(NT, SC) to pick one; the
// same for 64-row CTAs and with the pair sum, and wg_kernel_rb to pick
// among all.
#pragma once

typedef void (*WgKernel)(float*, const uint16_t*, const uint16_t*, const uint32_t*, float*, int, int, int, int, int);

#define SFS_PROBE_WG(name, NT, SC)                                                                       \
  __global__ void __launch_bounds__(32 * (sfs::gemv::kWgWarps + 1))                                    \
      name(float* Y, const uint16_t* X, const uint16_t* P, const uint32_t* U, float* W, int M, int N, int K, \
           int xwin, int coop) {                                                                         \
    sfs::gemv::kernel_wg<sfs::BF16, NT, SC>(Y, X, P, U, W, M, N, K, xwin, coop);                         \
  }
SFS_PROBE_WG(wg_t1_s2, 1, 2)
SFS_PROBE_WG(wg_t1_s4, 1, 4)
SFS_PROBE_WG(wg_t2_s2, 2, 2)
SFS_PROBE_WG(wg_t2_s4, 2, 4)
SFS_PROBE_WG(wg_t4_s2, 4, 2)
SFS_PROBE_WG(wg_t4_s4, 4, 4)
SFS_PROBE_WG(wg_t8_s2, 8, 2)
SFS_PROBE_WG(wg_t8_s4, 8, 4)
#undef SFS_PROBE_WG

// wg_kernel returns the kernel for nt 8-token tiles (1, 2, 4, 8) and
// stages of sc chunks (2, 4).
inline WgKernel wg_kernel(int nt, int sc) {
  const WgKernel fns[4][2] = {{wg_t1_s2, wg_t1_s4}, {wg_t2_s2, wg_t2_s4}, {wg_t4_s2, wg_t4_s4}, {wg_t8_s2, wg_t8_s4}};
  return fns[nt == 1 ? 0 : nt == 2 ? 1 : nt == 4 ? 2 : 3][sc == 4];
}

// The 64-row CTAs (RB = 2) and the pair sum (PAIR), as the product's
// gemv_wg64_*, gemv_wg_pair_* and gemv_wg64_pair_*.
#define SFS_PROBE_WGX(name, NT, SC, RB, PAIR)                                                            \
  __global__ void __launch_bounds__(32 * (sfs::gemv::kWgWarps + 1))                                    \
      name(float* Y, const uint16_t* X, const uint16_t* P, const uint32_t* U, float* W, int M, int N, int K, \
           int xwin, int coop) {                                                                         \
    sfs::gemv::kernel_wg<sfs::BF16, NT, SC, RB, PAIR>(Y, X, P, U, W, M, N, K, xwin, coop);               \
  }
#define SFS_PROBE_WGX_ALL(prefix, RB, PAIR)                \
  SFS_PROBE_WGX(prefix##_t1_s2, 1, 2, RB, PAIR)            \
  SFS_PROBE_WGX(prefix##_t1_s4, 1, 4, RB, PAIR)            \
  SFS_PROBE_WGX(prefix##_t2_s2, 2, 2, RB, PAIR)            \
  SFS_PROBE_WGX(prefix##_t2_s4, 2, 4, RB, PAIR)            \
  SFS_PROBE_WGX(prefix##_t4_s2, 4, 2, RB, PAIR)            \
  SFS_PROBE_WGX(prefix##_t4_s4, 4, 4, RB, PAIR)            \
  SFS_PROBE_WGX(prefix##_t8_s2, 8, 2, RB, PAIR)            \
  SFS_PROBE_WGX(prefix##_t8_s4, 8, 4, RB, PAIR)
SFS_PROBE_WGX_ALL(wg64, 2, false)
SFS_PROBE_WGX_ALL(wgp, 4, true)
SFS_PROBE_WGX_ALL(wg64p, 2, true)
#undef SFS_PROBE_WGX_ALL
#undef SFS_PROBE_WGX

// wg_kernel_rb is wg_kernel for CTAs of rb row blocks (4 or 2), with the
// pair sum or not.
inline WgKernel wg_kernel_rb(int nt, int sc, int rb, bool pair) {
  if (rb == 4 && !pair) return wg_kernel(nt, sc);
  const WgKernel fns[3][4][2] = {
      {{wg64_t1_s2, wg64_t1_s4}, {wg64_t2_s2, wg64_t2_s4}, {wg64_t4_s2, wg64_t4_s4}, {wg64_t8_s2, wg64_t8_s4}},
      {{wgp_t1_s2, wgp_t1_s4}, {wgp_t2_s2, wgp_t2_s4}, {wgp_t4_s2, wgp_t4_s4}, {wgp_t8_s2, wgp_t8_s4}},
      {{wg64p_t1_s2, wg64p_t1_s4}, {wg64p_t2_s2, wg64p_t2_s4}, {wg64p_t4_s2, wg64p_t4_s4}, {wg64p_t8_s2, wg64p_t8_s4}}};
  return fns[rb == 4 ? 1 : pair ? 2 : 0][nt == 1 ? 0 : nt == 2 ? 1 : nt == 4 ? 2 : 3][sc == 4];
}
