// probe_hybrid.cuh: a decode kernel for CTAs of one 32-row block (the
// pair sum's 64 CTAs on 1024 rows), for pdl_probe's "hy" plans
// (kernels/notes.md, session 14). The warpgroup form's producer warp and
// ring (cuda/gemv_wg.cuh, included first: mbarriers, one Copies for the
// one block) feed four consumer warps that each take whole stages in
// turn (warp w stages w, w+4, …) and multiply them with mma.sp exactly as
// gemv.cuh's kernel does (stage_x's activations, stage_multiply); at the
// end warps 1-3 hand their sums to warp 0 through shared memory, which
// adds them in warp order and finishes (the pair sum, or the last
// slice's). With one 32-row block a CTA, the warpgroup form's wgmma
// would multiply 32 useful rows of its 64 and issue twice the products
// per byte of its 64-row CTAs; mma.sp wastes no rows. Measured (kernels/notes.md, session 14): 70B k/v at one
// token 6.9-7.3 µs against the planner's 8.0, at 8 tokens 7.9-8.2 against
// 8.3, at 16 slower (9.0-9.2 against 8.3); its shared memory does not fit
// 64 tokens. Not part of the product.
#pragma once

// SFS_HY_HEAD ≥ 0: the producer queues that many stages, then waits until
// the consumers have queued the activations (named barrier 4); -1: no wait.
#ifndef SFS_HY_HEAD
#define SFS_HY_HEAD -1
#endif

namespace sfs {
namespace gemv {

template <typename T, int NT, int SC, bool PAIR>
__device__ __forceinline__ void kernel_hy(float* __restrict__ Y, const uint16_t* __restrict__ X,
                                          const uint16_t* __restrict__ P, const uint32_t* __restrict__ U,
                                          float* __restrict__ W, int M, int N, int K, int xwin) {
  using S = Stage<SC>;
  constexpr int kC = 4;                   // consumer warps
  constexpr int ST = S::kDepth * kC;      // ring slots: the warpgroup form's ring bytes
  constexpr int kTokens = 8 * NT;
  extern __shared__ uint4 smem4[];
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int chunks = K / kChunk;
  const int cps = (chunks + gridDim.y - 1) / gridDim.y;
  const int c0 = blockIdx.y * cps;
  const int nc = min(cps, chunks - c0);
  const int nst = (nc + SC - 1) / SC;
  const bool windowed = xwin > 0 && xwin < cps;
  const int xw = windowed ? xwin : cps;
  const int ts = xw * kChunkWords + kPadWords;
  const int rows = min(M, kTokens);
  const uint32_t xbuf = 4 * (rows + 1) * ts;
  // Layout: the ring, the X buffer(s), ST full and ST empty mbarriers, the
  // sums of warps 1-3 (1024·NT bytes each), the pair's buffer and mbarrier.
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem4));
  const uint32_t xs = base + ST * S::kBytes;
  const uint32_t bars = xs + (windowed ? 2 : 1) * xbuf;
  const uint32_t sums = bars + 16 * ST;
  const uint32_t push = sums + (kC - 1) * 1024 * NT;
  const uint32_t pbar = push + 1024 * NT;
  const int rb = blockIdx.x;
  if (tid == 0) {
    for (int i = 0; i < ST; ++i) {
      mbar_init(bars + 8 * i, 32);         // full: the producer's lanes
      mbar_init(bars + 8 * (ST + i), 32);  // empty: the lanes of the one warp that reads it
    }
    if (PAIR) {
      mbar_init(pbar, 1);
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
  }
  __syncthreads();
  if (PAIR) cluster_arrive_relaxed();
  SFS_GEMV_TRACE(0);

  if (warp == kC) {
    const Copies<SC> cp(P, U, N, K, rb, c0, base, lane);
    for (int q = 0; q < nst; ++q) {
#if SFS_HY_HEAD >= 0
      if (q == SFS_HY_HEAD) asm volatile("bar.sync 4, 160;\n" ::: "memory");
#endif
      const int s = q % ST;
      if (q >= ST) mbar_wait(bars + 8 * (ST + s), (q / ST - 1) & 1);
      if ((q + 1) * SC <= nc) {
        cp.template issue<true>(q, nc, s * S::kBytes);
      } else {
        cp.template issue<false>(q, nc, s * S::kBytes);
      }
      mbar_arrive_cp(bars + 8 * s);
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }

  stage_x(xs, X, K, c0, 0, xw, nc, rows, ts, warp, kC, lane);
  cp_async_commit();
#if SFS_HY_HEAD >= 0
  asm volatile("bar.arrive 4, 160;\n" ::: "memory");
#endif
  cp_async_wait<0>();
  bar_group(1, 32 * kC);
  SFS_GEMV_TRACE(1);

  Lane<NT> ln;
  lane_a<SC>(ln, lane);
#pragma unroll
  for (int t = 0; t < NT; ++t) ln.xa[t] = xs + 4 * min(8 * t + (lane & 7), rows) * ts + 16 * (lane >> 3);
  float acc[NT][2][4];
  zero_acc(acc);
  const int rounds = (nst + kC - 1) / kC;
  int win = 0, pos = 0;
  for (int r = 0; r < rounds; ++r) {
    if (pos == xw) {
      ++win;
      pos = 0;
      cp_async_wait<0>();
      bar_group(1, 32 * kC);
    }
    if (windowed && pos == 0 && (win + 1) * xw < nc) {
      stage_x(xs + ((win + 1) & 1) * xbuf, X, K, c0, win + 1, xw, nc, rows, ts, warp, kC, lane);
      cp_async_commit();
    }
    const int st = r * kC + warp;
    if (st < nst) {
      const int s = st % ST;
      mbar_wait(bars + 8 * s, (st / ST) & 1);
      if (r == 0 && warp == 0) SFS_GEMV_TRACE(2);
      const uint32_t slot = base + s * S::kBytes;
      const uint32_t xoff = (win & 1) * xbuf + (pos + warp * SC) * 128;
      if ((st + 1) * SC <= nc) {
        stage_multiply<T, NT, SC, true>(acc, slot, ln, xoff, st, nc);
      } else {
        stage_multiply<T, NT, SC, false>(acc, slot, ln, xoff, st, nc);
      }
      mbar_arrive(bars + 8 * (ST + s));
    }
    pos += kC * SC;
  }
  SFS_GEMV_TRACE(3);
  // Warps 1-3 hand their sums to warp 0, which adds them in warp order.
  if (warp != 0) {
    const uint32_t mine = sums + (warp - 1) * 1024 * NT;
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int s = 0; s < 2; ++s) sts128(mine + ((2 * t + s) * 32 + lane) * 16, acc[t][s][0], acc[t][s][1], acc[t][s][2], acc[t][s][3]);
    asm volatile("bar.arrive 2, 128;\n" ::: "memory");
    return;
  }
  asm volatile("bar.sync 2, 128;\n" ::: "memory");
  for (int q = 0; q < kC - 1; ++q) {
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        float o[4];
        lds128(sums + q * 1024 * NT + ((2 * t + s) * 32 + lane) * 16, o[0], o[1], o[2], o[3]);
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[t][s][i] += o[i];
      }
  }
  if (PAIR) {
    finish_pair<NT>(Y, acc, M, N, rb, lane, push, pbar);
  } else {
    finish<NT>(Y, W, acc, M, N, rb, lane, reinterpret_cast<unsigned*>(W));
  }
  SFS_GEMV_TRACE(5);
}

}  // namespace gemv
}  // namespace sfs

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
