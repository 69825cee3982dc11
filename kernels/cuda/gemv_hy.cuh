// gemv_hy.cuh: the decode-size product of gemv.cuh for CTAs of one 32-row
// block, the "hybrid" of its two forms (sm_90a only, beside gemv_wg.cuh).
//
// On 1024 rows, two slices of one-block CTAs make 64 CTAs, and summed as
// a pair (finish_pair in gemv_wg.cuh) they need no split-K tail through
// L2, which costs 70B k/v (1024 × 8192) about 1.5 µs a call in its
// planner's 128 CTAs of 16 slices on an H100 (docs/kernels.md).
// Neither form streams such CTAs well: the mma.sp kernel's warps each
// queue their own copies (8.3 µs at one token against the planner's 7.6),
// and the warpgroup form's wgmma multiplies 64 rows where the CTA has 32
// (8.4-8.6). So this kernel takes the warpgroup form's producer and the
// mma.sp form's products:
//
//   - A fifth warp, the producer, queues the block's stages into a ring of
//     ST = 4·Stage<SC>::kDepth slots (the warpgroup form's ring bytes) and
//     signals each slot's `full` mbarrier when its copies land, as
//     kernel_wg's producer does; it waits on the slot's `empty` mbarrier
//     before refilling it.
//   - The four consumer warps stage the activations as gemv.cuh's kernel
//     does (stage_x: the slice whole, or windows of xw chunks through two
//     buffers) and take the slice's stages in turn, warp w stages w, w+4,
//     …, multiplying each with stage_multiply exactly as gemv.cuh's kernel
//     with kw = 4 does; each lane arrives on the slot's `empty` after its
//     reads (count 32: one warp reads a slot).
//   - At the end warps 1-3 hand their sums to warp 0 through shared
//     memory and warp 0 adds them in warp order, as gemv.cuh's kernel adds
//     its kw warps' sums, then finishes: the last slice's sum (finish), or
//     with PAIR the pair sum.
//
// The products and sums are those of gemv.cuh's kernel with 4 warps of
// one row block (kw = 4), bit for bit, for the same slices and stages
// (TestGPUDecodeHybrid). Measured in `pdl_probe hy` (H100, µs;
// docs/kernels.md): 70B k/v as a pair, 7.0-7.3 at one token against
// the planner's 8.0, 7.4 / 7.5 at 2 / 4 against 8.1, 7.9-8.2 at 8 against
// 8.3, but 9.0-9.2 at 16 against 8.3; 8B k/v at one token 5.0 against 6.1.
// The activations, queued behind the weights' stream, bound it as the
// tokens grow.
//
// Requirements (checked by the Go caller): those of gemv.cuh with
// blockDim.x = 160 (4 consumer warps and the producer), gridDim.x = N/32,
// no token groups, xwin a multiple of 4·SC (or 0), and the dynamic shared
// memory documented at the entry points (sfsurgery_sm90a.cu); for a
// pair, gridDim.y = 2 and a launch in clusters of (1, 2, 1).
#pragma once

#include "gemv_wg.cuh"

namespace sfs {
namespace gemv {

// kernel_hy is the hybrid kernel: PAIR, the pair sum (clusters of (1, 2,
// 1)), else the last slice's sum.
template <typename T, int NT, int SC, bool PAIR>
__device__ __forceinline__ void kernel_hy(const Out out, const uint16_t* __restrict__ X,
                                          const uint16_t* __restrict__ P, const uint32_t* __restrict__ U,
                                          float* __restrict__ W, int M, int N, int K, int xwin) {
  using S = Stage<SC>;
  constexpr int kC = kWgWarps;       // consumer warps
  constexpr int ST = S::kDepth * kC;  // ring slots: the warpgroup form's ring bytes
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
    // The producer: stage q into slot q % ST, once the warp that read the
    // slot's stage q-ST is done with it.
    const Copies<SC> cp(P, U, N, K, rb, c0, base, lane);
    for (int q = 0; q < nst; ++q) {
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

  // The consumers: the activations (window 0), then warp w the stages w,
  // w+4, … in rounds of four; a window holds whole rounds (xw % (4·SC) ==
  // 0), and the next is queued when one starts and complete, for every
  // warp, when it is reached. Warp 0, which stores the sums, asks for the
  // bias first.
  if (warp == 0) prefetch_bias(out, rb, lane);
  stage_x(xs, X, K, c0, 0, xw, nc, rows, ts, warp, kC, lane);
  cp_async_commit();
  cp_async_wait<0>();
  bar_group(1, 32 * kC);
  SFS_GEMV_TRACE(1);

  Lane<NT> ln;
  lane_a<SC>(ln, lane);
  lane_b(ln, xs, rows, ts, lane);
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
  // Warps 1-3 hand their sums to warp 0 (lane L's float4 (t, s) at
  // ((2t + s)·32 + L)·16: conflict-free), which adds them in warp order,
  // as gemv.cuh's kernel adds its kw warps'. Named barrier 2, as an
  // immediate (a register id would make ptxas reserve all 16).
  if (warp != 0) {
    const uint32_t mine = sums + (warp - 1) * 1024 * NT;
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int s = 0; s < 2; ++s)
        sts128(mine + ((2 * t + s) * 32 + lane) * 16, acc[t][s][0], acc[t][s][1], acc[t][s][2], acc[t][s][3]);
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
    finish_pair<T, NT>(out, acc, M, N, rb, lane, push, pbar);
  } else {
    finish<T, NT>(out, W, acc, M, N, rb, lane, reinterpret_cast<unsigned*>(W));
  }
  SFS_GEMV_TRACE(5);
}

}  // namespace gemv
}  // namespace sfs
