// gemv_wg.cuh: the decode-size product of gemv.cuh in Hopper's warpgroup
// form (sm_90a only: wgmma and the arch-specific PTX target).
//
// Same operands, work split and results as gemv.cuh's kernel with 4 warps
// of one row block each (kw = 1); what differs is who copies and who
// multiplies:
//
//   - A fifth warp, the producer, queues every weight copy of the CTA: stage
//     q of each of the four consumer warps' rows into ring slot q % ST, in
//     order, and signals the slot's `full` mbarrier when its copies land
//     (cp.async.mbarrier.arrive.noinc: each of its 32 lanes arrives once its
//     own copies are done). It waits on the slot's `empty` mbarrier before
//     refilling it.
//   - The four consumer warps, one warpgroup, stage the activations and
//     multiply with wgmma.mma_async.sp m64nNk32 (N = 8·NT tokens): each
//     warp loads its 16-row A fragments and the stored meta words from its
//     ring slot exactly as gemv.cuh's stage_multiply does (ldmatrix.x4, the
//     same registers), issues the products, which read B (the activations)
//     from shared memory and run asynchronously, and releases the slot at
//     once. One instruction covers the 64 rows of the four warps: on an
//     H100 it issues at twice mma.sp's rate per SM sub-partition
//     (tools/probes/mma_rate.cu and wgmma_sp_probe.cu), and the B
//     fragments' ldmatrix, most of the shared-memory reads of gemv.cuh's
//     kernel at m ≥ 16, are gone.
//   - Every consumer thread arrives on `empty` after its own reads of the
//     slot. One arrival per warp after __syncwarp is as correct under the
//     PTX memory model and measured the same, but compute-sanitizer's
//     racecheck then reports the other lanes' reads as racing with the
//     refill (tools/probes/racecheck_mbarrier.cu shows it on a small
//     kernel); with every thread arriving it reports none.
//
// wgmma.sp with A from registers takes mma.sp's A fragments, meta words
// and selector unchanged, and its f32 accumulators of warp w are mma.sp's
// tiles of rows 16w … 16w+15 (d[4t + j] is tile t's d[j]), so finish()
// stores them as gemv.cuh's kernel does; the products are the same bits
// (tools/probes/wgmma_sp_probe.cu, and TestGPUDecodeWarpgroup for every
// plan). B is K-major in the 128-byte swizzle: token t of a chunk is one
// 128-byte row (its 64 activations) whose 16-byte unit u is stored at
// u ^ (t % 8); 8-token groups are 1024 bytes apart; chunk c of a window
// starts at c·8·NT·128 bytes; a buffer is 1024-byte aligned. (Plain core
// matrices, without the swizzle, measured up to 45% slower on an H100:
// docs/kernels.md.) Tokens past M and chunks past the slice are zero-filled, as
// are the packed values of chunks past the slice (the producer's copies):
// wgmma multiplies them (a branch around a wgmma makes ptxas serialize
// them all), and zeros times zeros add nothing. A warp past N multiplies
// whatever its ring holds into its own rows of the accumulators, which
// it never stores. Such chunks and warps get a valid meta pattern. The
// buffer of a slice staged whole holds a whole number of stages.
//
// The activations are staged by the consumers, whole or in windows of xw
// chunks through two buffers, as in gemv.cuh; at a new window each
// consumer waits for its products and its copies, fences them for the
// async proxy (wgmma reads shared memory through it) and meets the others
// at a named barrier, then queues the window after it into the buffer just
// freed.
//
// With several slices the partial sums are added up as in gemv.cuh, by the
// last slice of each row block to draw its ticket, or, in a cooperative
// launch (every CTA resident at once), by all the slices together
// (finish_coop): from 32 tokens the last slice's sum costs an L2 round trip
// per slice or two, the shared one about two in all. Two slices can run
// as a pair instead (finish_pair, kernel_wg's PAIR): each two CTAs of a
// row group are one cluster and the second pushes its sums into the
// first's shared memory, with no trip through L2 at all (the ticket sum
// cost 1.3-1.8 µs a call on an H100: docs/kernels.md).
//
// CTAs of 64 rows (kernel_wg's RB = 2) hold two row blocks instead of
// four: the two warps of a block share its ring and each multiplies one
// 16-row half, one wgmma per k-tile, so that the same slices make twice
// the CTAs (8B q/o: two slices of 64 CTAs fill 128 SMs, where 128-row
// CTAs needed four slices). At the end the half-1 warp hands its rows to
// the half-0 warp through shared memory, and the rest is the 128-row
// form's.
//
// Requirements (checked by the Go caller): those of gemv.cuh with
// blockDim.x = 160 (4 consumer warps and the producer), kw = 1, xwin a
// multiple of SC (or 0), and the dynamic shared memory documented at the
// entry points (sfsurgery_sm90a.cu); for a pair, gridDim.y = 2, no token
// groups, and a launch in clusters of (1, 2, 1).
#pragma once

#include "gemv.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "gemv_wg.cuh needs the sm_90a target (wgmma): build with -arch=compute_90a"
#endif

// SFS_GDC_LAUNCH() and SFS_GDC_WAIT() are the two halves of programmatic
// dependent launch (griddepcontrol) for tools/probes/pdl_probe.cu,
// which defines them: LAUNCH lets the next grid launch once every CTA of
// this one has run it, WAIT holds the consumers until the grid before has
// finished and its writes are visible. The producer's weight copies run
// ahead of WAIT (the weights are read-only); X, Y, the workspace and the
// counters are touched only after it (the bias, read-only too, is
// prefetched after it). The product builds both to nothing
// (docs/kernels.md): PDL gained 1.1-2.2 µs a run only behind
// another long-tailed product that triggers it, nothing behind a short
// kernel (a norm) even one that triggers at once, and cuBLASLt's kernels,
// the baseline, do not take part in it.
#ifndef SFS_GDC_LAUNCH
#define SFS_GDC_LAUNCH()
#endif
#ifndef SFS_GDC_WAIT
#define SFS_GDC_WAIT()
#endif

namespace sfs {
namespace gemv {

constexpr int kWgWarps = 4;  // consumer warps: one warpgroup

// wg_desc128 returns the wgmma shared-memory matrix descriptor of a
// K-major tile in the 128-byte swizzle at shared address addr: rows of
// 128 bytes whose unit u sits at u ^ (row % 8), 8-row groups 1024 bytes
// apart (the stride offset; the leading offset is unused in this mode).
__device__ __forceinline__ uint64_t wg_desc128(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// proxy_fence makes this thread's completed writes to shared memory
// visible to the async proxy, through which wgmma reads B.
__device__ __forceinline__ void proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// mbar_init, mbar_wait, mbar_arrive and mbar_arrive_cp are the mbarrier
// operations of the pipeline: init with an arrival count; wait until the
// phase of the given parity has completed (acquire); arrive (release);
// and arrive once this thread's cp.async copies so far have landed
// (.noinc: the arrival is one of the count).
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n\t.reg .pred done;\n"
      "SFS_MBAR_WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra SFS_MBAR_WAIT_%=;\n\t}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared::cta.b64 st, [%0];\n\t}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_cp(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}


// The cluster operations of the pair sum (finish_pair): this CTA's rank in
// its cluster; the cluster barrier's relaxed arrival and its (acquire)
// wait; the shared::cluster address of shared address addr in the CTA of
// rank `rank`; st_async4, an asynchronous 16-byte store to another CTA's
// shared memory that completes its bytes on that CTA's mbarrier bar; and
// mbar_expect, an arrival that also expects `bytes` of such stores.
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory"); }
__device__ __forceinline__ uint32_t map_rank(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ void st_async4(uint32_t addr, float a, float b, float c, float d, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(addr),
               "f"(a), "f"(b), "f"(c), "f"(d), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n\t}\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void sts128(uint32_t addr, float a, float b, float c, float d) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
__device__ __forceinline__ void lds128(uint32_t addr, float& a, float& b, float& c, float& d) {
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "r"(addr) : "memory");
}


// wg_mma<kSel>(T, acc, a, desc, e) adds A (this warp's 16 rows of half
// kSel of its block, as mma.sp's fragments) times B (8·NT tokens at desc)
// to half kSel of the accumulators: one wgmma.mma_async.sp of the
// warpgroup, accumulating (scale-d 1), B K-major (trans-b 0).
#define SFS_WG_T(t) "+f"(acc[t][kSel][0]), "+f"(acc[t][kSel][1]), "+f"(acc[t][kSel][2]), "+f"(acc[t][kSel][3])
#define SFS_WG_MMA(T, TS, NT, SHAPE, DREGS, AREGS, ...)                                                         \
  template <int kSel>                                                                                         \
  __device__ __forceinline__ void wg_mma(T, float (&acc)[NT][2][4], const uint32_t (&a)[4], uint64_t desc,      \
                                         uint32_t e) {                                                          \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                                     \
                 "wgmma.mma_async.sp.sync.aligned." SHAPE ".f32." TS "." TS " " DREGS ", " AREGS ", p, 1, 1, 0;\n}\n" \
                 : __VA_ARGS__                                                                                \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(e), "n"(kSel));                 \
  }
SFS_WG_MMA(BF16, "bf16", 1, "m64n8k32", "{%0, %1, %2, %3}", "{%4, %5, %6, %7}, %8, %9, %10", SFS_WG_T(0))
SFS_WG_MMA(F16, "f16", 1, "m64n8k32", "{%0, %1, %2, %3}", "{%4, %5, %6, %7}, %8, %9, %10", SFS_WG_T(0))
SFS_WG_MMA(BF16, "bf16", 2, "m64n16k32", "{%0, %1, %2, %3, %4, %5, %6, %7}", "{%8, %9, %10, %11}, %12, %13, %14", SFS_WG_T(0), SFS_WG_T(1))
SFS_WG_MMA(F16, "f16", 2, "m64n16k32", "{%0, %1, %2, %3, %4, %5, %6, %7}", "{%8, %9, %10, %11}, %12, %13, %14", SFS_WG_T(0), SFS_WG_T(1))
SFS_WG_MMA(BF16, "bf16", 4, "m64n32k32", "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}", "{%16, %17, %18, %19}, %20, %21, %22", SFS_WG_T(0), SFS_WG_T(1), SFS_WG_T(2), SFS_WG_T(3))
SFS_WG_MMA(F16, "f16", 4, "m64n32k32", "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}", "{%16, %17, %18, %19}, %20, %21, %22", SFS_WG_T(0), SFS_WG_T(1), SFS_WG_T(2), SFS_WG_T(3))
SFS_WG_MMA(BF16, "bf16", 8, "m64n64k32", "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}", "{%32, %33, %34, %35}, %36, %37, %38", SFS_WG_T(0), SFS_WG_T(1), SFS_WG_T(2), SFS_WG_T(3), SFS_WG_T(4), SFS_WG_T(5), SFS_WG_T(6), SFS_WG_T(7))
SFS_WG_MMA(F16, "f16", 8, "m64n64k32", "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}", "{%32, %33, %34, %35}, %36, %37, %38", SFS_WG_T(0), SFS_WG_T(1), SFS_WG_T(2), SFS_WG_T(3), SFS_WG_T(4), SFS_WG_T(5), SFS_WG_T(6), SFS_WG_T(7))
#undef SFS_WG_MMA
#undef SFS_WG_T

// wg_xbytes is the bytes of one buffer of activations for xcap chunks.
template <int NT>
__device__ __forceinline__ uint32_t wg_xbytes(int xcap) {
  return static_cast<uint32_t>(xcap) * 8 * NT * 128;
}

// stage_x_wg queues window w of the slice's activations (chunks [w·xw,
// min((w+1)·xw, nc)) of tokens 0 … rows-1) into the buffer at shared
// address xb, which holds xcap chunks, in the swizzled layout above; the
// rest of the buffer (tokens past rows, chunks past the slice) is
// zero-filled. Consumer thread tid copies unit u = tid % 8 of token rows
// tid/8 + 16j (j < NT/2) of every chunk, or with one 8-token tile of
// token tid/8 % 8 of every other chunk, so that each quarter-warp fills
// 128 contiguous bytes; its source and destination only step from chunk
// to chunk, one chunk a trip. (The window switch is on the consumers'
// critical path: this form of the loop took 64 tokens 2-8% faster than
// one that worked out every copy's addresses from its index, and rolled
// it is up to 1.5% faster at 32 tokens than unrolled; docs/kernels.md.)
template <int NT>
__device__ __forceinline__ void stage_x_wg(uint32_t xb, const uint16_t* __restrict__ X, int K, int c0, int w, int xw,
                                           int xcap, int nc, int rows, int tid) {
  static_assert(32 * kWgWarps == 128, "stage_x_wg maps 128 consumer threads");
  constexpr int kTok = 8 * NT;
  constexpr int kStep = NT == 1 ? 2 : 1;     // chunks between a thread's copies
  constexpr int kPer = NT == 1 ? 1 : NT / 2;  // copies per chunk: tokens t0 + 16j
  const int first = w * xw;
  const int cnt = min(xw, nc - first);
  const int u = tid & 7;
  const int t0 = NT == 1 ? (tid >> 3) & 7 : tid >> 3;
  const int lc0 = NT == 1 ? tid >> 6 : 0;
  const uint16_t* src = X + static_cast<size_t>(t0) * K + static_cast<size_t>(c0 + first + lc0) * kChunk + 8 * u;
  uint32_t dst = xb + (lc0 * kTok + t0) * 128 + 16 * (u ^ (t0 & 7));
#pragma unroll 1
  for (int lc = lc0; lc < xcap; lc += kStep, src += kStep * kChunk, dst += kStep * kTok * 128) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const bool real = lc < cnt && t0 + 16 * j < rows;
      cp_async16s(dst + j * 16 * 128, real ? src + static_cast<size_t>(16 * j) * K : X, real);
    }
  }
}

// stage_multiply_wg multiplies the SC chunks of ring slot `slot` (stage st
// of the slice) into the accumulators, with the activations of the stage's
// first chunk at shared address xs; the warpgroup's four warps run it
// together (wgmma is collective). It waits for the previous stage's
// products (their A registers are reused), loads every A fragment and meta
// word of the stage (a valid meta pattern for chunks past the slice and
// when live is false; see the top of this file for their A fragments),
// issues the products and commits them without waiting: the slot may be
// refilled as soon as it returns. RB = 4: the warp's slot holds its own
// row block, both 16-row halves, two products per k-tile (accumulator
// halves 0 and 1). RB = 2: the slot is its row block's, shared with the
// other warp of the block, and the warp multiplies its half `half` only,
// one product per k-tile into accumulator half 0 (with selector 0: the
// caller points ln.meta at the meta words selector 1 would read).
template <typename T, int NT, int SC, int RB>
__device__ __forceinline__ void stage_multiply_wg(float (&acc)[NT][2][4], uint32_t slot, const Lane<NT>& ln,
                                                  uint32_t xs, int st, int nc, bool live, int half) {
  using S = Stage<SC>;
  constexpr int H = RB == 4 ? 2 : 1;  // halves a warp multiplies
  uint32_t a[SC][2][H][4];
  uint32_t e[SC][2];
  wg_wait_all();
#pragma unroll
  for (int i = 0; i < SC; ++i) {
    const bool ok = live && st * SC + i < nc;
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      // k-tile 2i+p, as in stage_multiply.
      const uint32_t unit = static_cast<uint32_t>((4 * i + 2 * p) ^ ln.aq);
      if (RB == 4) {
        ldsm4(a[i][p][0], slot + ln.arow + 16 * unit);
        ldsm4(a[i][p][H - 1], slot + ln.arow + 16 * S::kRowBytes + 16 * unit);
      } else {
        ldsm4(a[i][p][0], slot + ln.arow + half * 16 * S::kRowBytes + 16 * unit);
      }
      e[i][p] = lds32(slot + S::kMetaOffset + (2 * i + p) * 128 + ln.meta);
      e[i][p] = ok ? e[i][p] : 0x44444444u;  // groups keeping positions 0 and 1
    }
  }
  wg_fence();
#pragma unroll
  for (int i = 0; i < SC; ++i) {
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      // k-tile 2i+p: chunk i's 128-byte token rows, bytes 64p … 64p+63.
      const uint64_t desc = wg_desc128(xs + i * 8 * NT * 128 + p * 64);
      wg_mma<0>(T{}, acc, a[i][p][0], desc, e[i][p]);
      if (RB == 4) wg_mma<1>(T{}, acc, a[i][p][H - 1], desc, e[i][p]);
    }
  }
  wg_commit();
}

// finish_coop is finish for a launch whose CTAs are all resident at once
// (a cooperative launch): the S slices of row block rb share the sum
// instead of leaving it to the last one. Each warp stores its partial
// sums, announces them on the block's arrival counter and waits until all
// S have; then slice s adds up tokens [s·q, (s+1)·q) (q = ceil(M/S)) over
// the S partial sums in slice order from zero, as reduce does from 4
// tokens, and stores them to o (the bias added last, loaded once the
// partial sums are in); the last warp to leave (departure counter)
// puts both counters back to 0. The counters: arrival ctr[-1-rb],
// departure ctr[-1-rb-blocks] (ctr is (u32*)W but for token groups).
template <typename T, int NT>
__device__ __forceinline__ void finish_coop(const Out& o, float* __restrict__ W, const float (&acc)[NT][2][4], int M,
                                            int N, int rb, int lane, unsigned* ctr) {
  const int S = gridDim.y, slice = blockIdx.y, blocks = N / 32;
  store_sums<T, NT>(Out(W + static_cast<size_t>(slice) * M * N), acc, M, N, rb, lane);
  __syncwarp();
  unsigned* arrive = ctr - 1 - rb;
  unsigned* depart = arrive - blocks;
  if (lane == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(arrive) : "memory");
    unsigned v = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(arrive) : "memory");
    } while (v < static_cast<unsigned>(S));
  }
  __syncwarp();
  // Lane (tt = lane/8, c = lane%8): token t0 + tt + 4i, rows 32·rb + 4c .. +3.
  const int q = (M + S - 1) / S, t0 = slice * q, t1 = min(M, t0 + q);
  const int n0 = 32 * rb + 4 * (lane & 7);
  const float* w = W + n0;
  const size_t plane = static_cast<size_t>(M) * N;
  constexpr int kLoads = 32;
  for (int t = t0 + (lane >> 3); t < t1; t += 4) {
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < S; s0 += kLoads) {
      float4 p[kLoads];
#pragma unroll
      for (int j = 0; j < kLoads; ++j) {
        p[j] = make_float4(0.f, 0.f, 0.f, 0.f);
        ld_cg4(p[j], w + (s0 + j) * plane + static_cast<size_t>(t) * N, s0 + j < S);
      }
#pragma unroll
      for (int j = 0; j < kLoads; ++j) {
        if (s0 + j < S) add4(sum, p[j]);
      }
    }
    if (o.bias != nullptr) add4(sum, bias4<T>(o, n0));
    put4<T>(o, static_cast<size_t>(t) * N + n0, sum);
  }
  __syncwarp();
  if (lane == 0) {
    unsigned old;
    asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], 1;\n" : "=r"(old) : "l"(depart) : "memory");
    if (old == static_cast<unsigned>(S - 1)) {
      *arrive = 0u;
      *depart = 0u;
    }
  }
}

// finish_pair is finish for a launch of two slices whose CTAs pair up as
// clusters of (1, 2, 1) (kernel_wg with PAIR): the slice-1 CTA (rank 1)
// pushes its warp's sums into the slice-0 CTA's shared memory at buf with
// asynchronous stores that complete on the mbarrier bar there, and leaves;
// the slice-0 warp waits for them, adds them up as reduce does two slices
// ((0 + slice 0) + slice 1: the same bits) and stores them to o. No
// workspace, no ticket, no trip through L2 but the stores of Y. Lane L's
// float4 (t, s) is at buf + ((2t + s)·32 + L)·16: every store and load
// conflict-free.
template <typename T, int NT>
__device__ __forceinline__ void finish_pair(const Out& o, float (&acc)[NT][2][4], int M, int N, int rb, int lane,
                                            uint32_t buf, uint32_t bar) {
  const uint32_t mine = buf + 16 * lane;
  if (cluster_rank() == 1) {
    cluster_wait();  // the slice-0 CTA's mbarriers are initialized
    const uint32_t to = map_rank(mine, 0), rbar = map_rank(bar, 0);
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int s = 0; s < 2; ++s)
        st_async4(to + (2 * t + s) * 512, acc[t][s][0], acc[t][s][1], acc[t][s][2], acc[t][s][3], rbar);
    return;
  }
  if (lane == 0) mbar_expect(bar, 32 * 2 * NT * 16);
  mbar_wait(bar, 0);
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      float v[4];
      lds128(mine + (2 * t + s) * 512, v[0], v[1], v[2], v[3]);
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[t][s][i] = (0.f + acc[t][s][i]) + v[i];
    }
  store_sums<T, NT>(o, acc, M, N, rb, lane);
}

// kernel_wg is the warpgroup form's kernel. RB is the row blocks of a CTA:
// 4 (128 rows, each consumer warp one block) or 2 (64 rows: the warps of
// a block multiply one 16-row half each, with one product per k-tile, and
// twice as many CTAs cover the same slices). PAIR: the pair sum (two
// slices, clusters of (1, 2, 1): finish_pair), a template parameter so that
// the other kernels carry none of its code (with it as a runtime argument
// they ran 1-2% slower: docs/kernels.md); else mode 0 is the
// last slice's sum, 1 the cooperative sum.
template <typename T, int NT, int SC, int RB = kWgWarps, bool PAIR = false>
__device__ __forceinline__ void kernel_wg(Out out, const uint16_t* __restrict__ X,
                                          const uint16_t* __restrict__ P, const uint32_t* __restrict__ U,
                                          float* __restrict__ W, int M, int N, int K, int xwin, int mode) {
  static_assert(RB == 4 || RB == 2, "a CTA holds 4 or 2 row blocks");
  using S = Stage<SC>;
  // Ring depth: the same ring bytes per CTA whatever RB.
  constexpr int ST = S::kDepth * (kWgWarps / RB);
  constexpr int kTokens = 8 * NT;
  constexpr int kThreads = 32 * kWgWarps;  // the consumers
  extern __shared__ uint4 smem4[];
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  unsigned* ctr = reinterpret_cast<unsigned*>(W);  // the row blocks' counters lie below it
  if (gridDim.z > 1) {
    // Token group z = blockIdx.z: tokens [z·8·NT, (z+1)·8·NT) of M, with
    // its own partial sums (S·8·NT·N floats from W + z·S·8·NT·N) and
    // counters (2·N/32 words from ctr - z·2·N/32 down).
    const size_t first = static_cast<size_t>(blockIdx.z) * kTokens;
    X += first * K;
    out.y = out.at(first * N);
    W += blockIdx.z * static_cast<size_t>(gridDim.y) * kTokens * N;
    ctr -= blockIdx.z * 2 * (N / 32);
    M = min(kTokens, M - static_cast<int>(first));
  }
  const int chunks = K / kChunk;
  const int cps = (chunks + gridDim.y - 1) / gridDim.y;  // chunks per slice
  const int c0 = blockIdx.y * cps;
  const int nc = min(cps, chunks - c0);  // ≥ 1 for the Go planner's grids
  const int nst = (nc + SC - 1) / SC;    // pipeline stages of the slice
  const bool windowed = xwin > 0 && xwin < cps;
  const int xw = windowed ? xwin : cps;                           // chunks of a window
  const int xcap = windowed ? xwin : (cps + SC - 1) / SC * SC;    // chunks a buffer holds
  const int rows = min(M, kTokens);
  const uint32_t xbuf = wg_xbytes<NT>(xcap);
  // Layout: the row blocks' rings, the activation buffer(s) from the next
  // 1024-byte boundary (the swizzle is anchored there; the Go planner
  // allows 1024 bytes for it), the ST full and ST empty mbarriers, for
  // RB = 2 the halves' exchange (RB·512·NT bytes), and for the pair sum
  // its buffers (RB·1024·NT) and its RB mbarriers.
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem4));
  const uint32_t xs = (base + RB * ST * S::kBytes + 1023) & ~1023u;
  const uint32_t bars = xs + (windowed ? 2 : 1) * xbuf;
  const uint32_t xch = bars + 16 * ST;
  const uint32_t push = xch + (RB == 2 ? RB * 512 * NT : 0);
  const uint32_t pbars = push + RB * 1024 * NT;
  constexpr bool pair = PAIR;
  const int blocks = N / 32;
  SFS_GEMV_TRACE(0);
  if (tid == 0) {
    for (int i = 0; i < ST; ++i) {
      mbar_init(bars + 8 * i, 32);                 // full: the producer's lanes
      mbar_init(bars + 8 * (ST + i), kThreads);  // empty: every consumer thread
    }
    if (pair) {
      for (int i = 0; i < RB; ++i) mbar_init(pbars + 8 * i, 1);  // the slice-0 warp's expect
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
  }
  __syncthreads();
  if (pair) cluster_arrive_relaxed();  // finish_pair's rank 1 waits for it
  SFS_GDC_LAUNCH();

  if (warp == kWgWarps) {
    // The producer: stage q of every row block into slot q % ST of its
    // ring, in order. One Copies, of the CTA's first row block, serves
    // all: block b's rows are 32·b rows further (32·b·K/16 uint4), its
    // meta 32·b words (8·b uint4), its ring b·ST stages.
    const Copies<SC> cp(P, U, N, K, blockIdx.x * RB, c0, base, lane);
    const int live = min(RB, blocks - static_cast<int>(blockIdx.x) * RB);  // row blocks inside N
    const size_t rowsU4 = static_cast<size_t>(2 * K);                      // 32 rows of K/16 uint4
    for (int q = 0; q < nst; ++q) {
      const int s = q % ST;
      if (q >= ST) mbar_wait(bars + 8 * (ST + s), (q / ST - 1) & 1);  // its stage q-ST was read
      for (int w = 0; w < live; ++w) {
        const uint32_t slot = w * ST * S::kBytes + s * S::kBytes;
        if ((q + 1) * SC <= nc) {
          cp.template issue<true>(q, nc, slot, w * rowsU4, 8 * w);
        } else {
          cp.template issue<false>(q, nc, slot, w * rowsU4, 8 * w);
        }
      }
      mbar_arrive_cp(bars + 8 * s);
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }

  // The consumers (under a programmatic launch, past SFS_GDC_WAIT only
  // once the grid before has finished: see its definition).
  SFS_GDC_WAIT();
  stage_x_wg<NT>(xs, X, K, c0, 0, xw, xcap, nc, rows, tid);
  cp_async_commit();
  cp_async_wait<0>();
  proxy_fence();
  bar_group(1, kThreads);
  SFS_GEMV_TRACE(1);
  const int rbl = RB == 4 ? warp : warp >> 1;  // the warp's row block in the CTA
  const int half = RB == 4 ? 0 : warp & 1;     // RB = 2: its 16-row half
  const int rb = blockIdx.x * RB + rbl;
  const bool active = rb < blocks;
  if (active && half == 0) prefetch_bias(out, rb, lane);  // the warp that stores the block's sums
  Lane<NT> ln;  // A rows and meta as in gemv.cuh; B needs no lane addresses
  lane_a<SC>(ln, lane);
  // Half 1 multiplies with selector 0: lane L reads the meta word of lane
  // L ^ 2, which selector 1 would have read (docs/formats.md §2).
  if (half) ln.meta = 4 * (lane ^ 2);
  float acc[NT][2][4];
  zero_acc(acc);
  const uint32_t ring = base + rbl * ST * S::kBytes;
  int win = 0, pos = 0;  // window of stage r, and its first chunk in it
  for (int r = 0; r < nst; ++r) {
    if (pos == xw) {
      // A new window: every consumer's products of the previous one are
      // done and this one's copies are visible to wgmma.
      ++win;
      pos = 0;
      wg_wait_all();
      cp_async_wait<0>();
      proxy_fence();
      bar_group(1, kThreads);
    }
    if (windowed && pos == 0 && (win + 1) * xw < nc) {
      stage_x_wg<NT>(xs + ((win + 1) & 1) * xbuf, X, K, c0, win + 1, xw, xcap, nc, rows, tid);
      cp_async_commit();
    }
    const int s = r % ST;
    mbar_wait(bars + 8 * s, (r / ST) & 1);
    if (r == 0) SFS_GEMV_TRACE(2);
    stage_multiply_wg<T, NT, SC, RB>(acc, ring + s * S::kBytes, ln, xs + (win & 1) * xbuf + pos * 8 * NT * 128, r,
                                     nc, active, half);
    mbar_arrive(bars + 8 * (ST + s));  // this thread's reads of the slot are done
    pos += SC;
  }
  wg_wait_all();
  cp_async_wait<0>();
  SFS_GEMV_TRACE(3);
  if (!active) return;
  if (RB == 2) {
    // The block's half-1 warp hands its rows (accumulator half 0) to the
    // half-0 warp, whose accumulator half 1 they become; the rest is the
    // 4-block form's.
    const uint32_t x = xch + rbl * 512 * NT + 16 * lane;
    if (half) {
#pragma unroll
      for (int t = 0; t < NT; ++t) sts128(x + t * 512, acc[t][0][0], acc[t][0][1], acc[t][0][2], acc[t][0][3]);
      // Named barriers 2 and 3, as immediates: a register id would make
      // ptxas reserve all 16 of the CTA's barriers.
      if (rbl == 0) {
        asm volatile("bar.arrive 2, 64;\n" ::: "memory");
      } else {
        asm volatile("bar.arrive 3, 64;\n" ::: "memory");
      }
      return;
    }
    if (rbl == 0) {
      asm volatile("bar.sync 2, 64;\n" ::: "memory");
    } else {
      asm volatile("bar.sync 3, 64;\n" ::: "memory");
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) lds128(x + t * 512, acc[t][1][0], acc[t][1][1], acc[t][1][2], acc[t][1][3]);
  }
  if (PAIR) {
    finish_pair<T, NT>(out, acc, M, N, rb, lane, push + rbl * 1024 * NT, pbars + 8 * rbl);
  } else if (mode == 1 && gridDim.y > 1) {
    finish_coop<T, NT>(out, W, acc, M, N, rb, lane, ctr);
  } else {
    finish<T, NT>(out, W, acc, M, N, rb, lane, ctr);
  }
  SFS_GEMV_TRACE(5);
}

}  // namespace gemv
}  // namespace sfs
