// gemv.cuh: the decode-size 2:4 sparse product (M ≤ 64 tokens), reading
// PyTorch's CUTLASS layout (packed + meta) exactly as stored.
//
//   Y[M][N] (f32) = X[M][K] · W[N][K]ᵀ,  W given as packed[N][K/2] + meta.
//
// At M ≤ 64 the product is memory-bound: its time is the weight bytes over
// the memory bandwidth. The kernel streams the weight once, in long runs of
// each row, and keeps several stages of it in flight per warp; the tensor
// cores (mma.sp m16n8k32, tokens padded to the n = 8 tile) are far from
// busy.
//
// Work split. A warp owns one block of 32 weight rows; a CTA of `warps`
// warps (blockDim.x / 32) owns 32·warps rows and one slice of K (grid.y
// slices of `cps` chunks of 64 columns). The CTA stages its slice of X (the
// M tokens and one row of zeros, which the padding tokens of the n = 8
// tiles read) in shared memory, either whole, once, or (when the slice's
// activations would not fit, from M = 16 or so) in windows of a few stages
// through two buffers, the next window queued as one starts, with a CTA
// barrier per window. Each warp then runs its own
// cp.async pipeline over its rows: a stage is SC chunks of all 32 rows, each
// row a contiguous run of SC·64 bytes (whole cache lines; loading the
// 64-byte pieces the fragments need straight into registers reached only
// about 55% of the copy bandwidth), plus the meta of the stage. ST stages
// ring in shared memory; no CTA-wide barrier after the staging of X. With
// one slice the results are stored.
//
// Several slices (split K), deterministically and in one launch: each warp
// stores its partial sums to a workspace W[slice][token][row] (f32), then
// draws a ticket from its row block's counter with one acq_rel atomic. The
// warp that draws the last ticket adds the slices up in an order fixed by M
// and the slice count (see reduce), whichever warp that is, so Y is
// bit-identical from run to run; it stores Y with plain stores and puts the
// counter back to 0 for the next launch. The counters (one u32 per row
// block, zero between launches) lie just below W: row block rb's is
// ((u32*)W)[-1-rb].
//
// Operand mapping. Per chunk (64 dense columns = 16 groups of 4 = 16 packed
// u32 per row), lane (g = lane/4, tig = lane%4) reads one uint4 of packed
// u32 4·tig .. 4·tig+3 from each of rows g, g+8, g+16, g+24 of its block.
// Those four groups are fed to two "virtual" m16n8k32 k-tiles: virtual mma
// m takes u32 2m as a0/a1 (rows g, g+8) and u32 2m+1 as a2/a3, so its
// virtual group v (0..7) is physical group π_m(v) = 4·(v%4) + v/4 + 2m of
// the chunk. The metadata and the activations follow the same permutation:
//   - meta: the stored u32 of lane L for k-tile p (shared/docs/formats.md
//     §1.5, §2) holds nibbles of groups 0-3 (L even) or 4-7 (L odd) of its
//     rows. Virtual nibble q of lane L (h = L%2) is physical group
//     4q + h + 2m, i.e. nibble h + 2m of the word of k-tile q/2 held by
//     lane L (q%2 == h) or its partner L^1: the pair's two words are one
//     8-byte shared load per k-tile, then a few shifts and masks.
//   - activations: b_i of lane (g, tig) is X word 8·(tig/2) + 4m + tig%2 +
//     {0, 16, 2, 18}[i] of the chunk (word = 2 values). The staging copies
//     each word of a token's chunk (4-byte cp.async) to a permuted slot so
//     that these are 8 consecutive words per tig: two 16-byte shared loads
//     per n-tile.
// Selector 0 serves rows g, g+8 (meta from lanes 4g, 4g+1), selector 1
// rows 16+g, 24+g (lanes 4g+2, 4g+3), as in spmm.cuh.
//
// Requirements (checked by the Go caller): N % 32 == 0, K % 64 == 0,
// 1 ≤ M ≤ 8·NT, blockDim.x = 32·warps ≤ 256, dynamic shared memory as
// documented at the entry points and, with more than one slice, the
// workspace and counters described above. Slice s holds chunks
// [s·cps, min((s+1)·cps, K/64)) with cps = ceil(K/64 / gridDim.y); the Go
// planner makes none empty (an empty one would add zeros).
#pragma once

#include "common.cuh"

namespace sfs {
namespace gemv {

constexpr int kMaxThreads = 256;  // at most 8 warps per CTA
constexpr int kChunk = 64;        // dense K columns per chunk (two mma k-tiles)
constexpr int kChunkWords = 32;   // u32 words of one token's X per chunk
constexpr int kPadWords = 4;      // 16 B per token row: conflict-free 16-byte loads

// Stage is the shared-memory layout of one pipeline stage of a warp: 32
// rows of SC chunks (64 bytes of packed values each), then the meta of the
// 2·SC k-tiles (32 words each). In odd rows the two 64-byte halves of each
// 128 bytes are swapped (16-byte unit u is stored at u ^ 4), so that the
// fragment loads of rows g and g+1 fall in different banks without padding.
template <int SC>
struct Stage {
  static_assert(SC == 2 || SC == 4, "SC must be 2 or 4");
  static constexpr int kRowBytes = SC * 64;
  static constexpr int kMetaOffset = 32 * kRowBytes;
  static constexpr int kBytes = kMetaOffset + 2 * SC * 128;
  // Stages in the ring: kDepth-1 in flight while one is multiplied.
  static constexpr int kDepth = SC == 2 ? 4 : 3;
  // Weight copies per stage: a row's SC·64 bytes are SC·4 lanes.
  static constexpr int kLanesPerRow = 4 * SC;
  static constexpr int kRowsPerOp = 32 / kLanesPerRow;
  static constexpr int kOps = 32 / kRowsPerOp;
  static constexpr int kMetaOps = SC / 2;  // 4 k-tiles of 32 words per copy
};

// cp_async16s is cp_async16 with the shared-memory address already in the
// shared window.
__device__ __forceinline__ void cp_async16s(uint32_t dst, const void* gmem, bool pred) {
  const int src_bytes = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes) : "memory");
}

// cp_async4 copies 4 bytes from global to shared memory (zero-filled, not
// read, when pred is false).
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool pred) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = pred ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes) : "memory");
}

// mma is mma.sp m16n8k32 (f32 accumulators) with selector kSel, written
// without `volatile` so that the compiler may interleave the products of
// consecutive chunks (spmm.cuh's version is volatile).
template <int kSel>
__device__ __forceinline__ void mma(BF16, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[4],
                                   uint32_t e) {
  asm("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, %13;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e),
        "n"(kSel));
}

template <int kSel>
__device__ __forceinline__ void mma(F16, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[4],
                                   uint32_t e) {
  asm("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, %13;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e),
        "n"(kSel));
}

// slot_of maps activation word w (0..31) of a chunk to its position in
// shared memory: bit 0 of w (which half of a group) and bit 3 select the
// 8-word run read by lanes with that tig, bits 1-2 and 4 the place in it.
__device__ __forceinline__ int slot_of(int w) {
  const int t0 = w & 1, lo = (w >> 1) & 3, t1 = (w >> 3) & 1, hi = (w >> 4) & 1;
  return hi | (lo << 1) | (t0 << 3) | (t1 << 4);
}

// nibbles gathers the virtual metadata word of one virtual mma: nibble q of
// each 16-bit half comes from nibble `sh`/4 of word w[q].
__device__ __forceinline__ uint32_t nibbles(const uint32_t (&w)[4], int sh) {
  uint32_t e = 0;
#pragma unroll
  for (int q = 0; q < 4; ++q) e |= ((w[q] >> sh) & 0x000f000fu) << (4 * q);
  return e;
}

// Chunk is the part of one weight chunk a lane holds: the packed values of
// rows g, g+8, g+16, g+24 and the stored meta words its rows need: w[q] is
// the word of k-tile q/2 held by the even (q%2 = 0) or odd lane of this
// lane's pair, i.e. groups 4·(q%2) .. 4·(q%2)+3 of the k-tile.
struct Chunk {
  uint4 a[4];
  uint32_t w[4];
};

// comp returns component i of v.
__device__ __forceinline__ uint32_t comp(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// multiply adds the products of one chunk to the accumulators. xs[t]
// points at the permuted activations of this lane's token of n-tile t (its
// 8-word run) in the chunk.
template <typename T, int NT>
__device__ __forceinline__ void multiply(float (&acc)[NT][2][4], const Chunk& ch, const uint32_t* const (&xs)[NT],
                                         int lane) {
  // Virtual nibble q of lane half h is nibble h + 2m of w[q].
  const int h = lane & 1;
  uint32_t x[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) x[q] = ch.w[q] >> (4 * h);
  const uint32_t e[2] = {nibbles(x, 0), nibbles(x, 8)};
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const uint32_t a0[4] = {comp(ch.a[0], 2 * m), comp(ch.a[1], 2 * m), comp(ch.a[0], 2 * m + 1),
                            comp(ch.a[1], 2 * m + 1)};
    const uint32_t a1[4] = {comp(ch.a[2], 2 * m), comp(ch.a[3], 2 * m), comp(ch.a[2], 2 * m + 1),
                            comp(ch.a[3], 2 * m + 1)};
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const uint4 bv = *reinterpret_cast<const uint4*>(xs[t] + 4 * m);
      const uint32_t b[4] = {bv.x, bv.y, bv.z, bv.w};
      mma<0>(T{}, acc[t][0], a0, b, e[m]);
      mma<1>(T{}, acc[t][1], a1, b, e[m]);
    }
  }
}

// Copies is what a lane needs to queue the cp.async copies of a stage: the
// global source of each of its copies for stage 0 of the slice, and the
// shared destination of its first copy in ring slot 0. Weights: copy i of
// lane L moves 16 bytes (piece L % kLanesPerRow) of row i·kRowsPerOp +
// L / kLanesPerRow of the warp's block; meta: copy i moves 4 words of k-tile
// 4i + L/8.
template <int SC>
struct Copies {
  using S = Stage<SC>;
  const uint4* w[S::kOps];
  const uint4* m[S::kMetaOps];
  uint32_t wdst, mdst;  // shared addresses in slot 0
  size_t wstep, mstep;  // uint4 to the next stage
  int piece;            // 16-byte piece of the row run (weights)
  int ktile;            // k-tile of the stage of meta copy 0

  __device__ __forceinline__ Copies(const uint16_t* __restrict__ P, const uint32_t* __restrict__ U, int N, int K,
                                    int rb, int c0, uint32_t ring, int lane) {
    const size_t rowU4 = static_cast<size_t>(K) / 16;  // uint4 per packed row
    const int r = lane / S::kLanesPerRow;                // row of copy 0
    piece = lane % S::kLanesPerRow;
    ktile = lane >> 3;
    const uint4* p = reinterpret_cast<const uint4*>(P) + static_cast<size_t>(32 * rb + r) * rowU4 +
                     static_cast<size_t>(c0) * 4 + piece;
#pragma unroll
    for (int i = 0; i < S::kOps; ++i) w[i] = p + static_cast<size_t>(i * S::kRowsPerOp) * rowU4;
    // kRowsPerOp is even, so every copy of this lane has the parity of r.
    wdst = ring + r * S::kRowBytes + 16 * (piece ^ ((r & 1) << 2));
    const uint32_t* mp = U + static_cast<size_t>(2 * c0 + (lane >> 3)) * N + 32 * rb + 4 * (lane & 7);
#pragma unroll
    for (int i = 0; i < S::kMetaOps; ++i) m[i] = reinterpret_cast<const uint4*>(mp + static_cast<size_t>(4 * i) * N);
    mdst = ring + S::kMetaOffset + (lane >> 3) * 128 + 16 * (lane & 7);
    wstep = static_cast<size_t>(SC) * 4;
    mstep = static_cast<size_t>(2 * SC) * N / 4;
  }

  // issue queues stage st of a slice of nc chunks into the slot at byte
  // offset slot of the ring. kFull: the whole stage is inside the slice;
  // otherwise chunks past it are zero-filled, never read.
  template <bool kFull>
  __device__ __forceinline__ void issue(int st, int nc, uint32_t slot) const {
    const size_t wo = static_cast<size_t>(st) * wstep;
    const size_t mo = static_cast<size_t>(st) * mstep;
    const bool ok = kFull || st * SC + piece / 4 < nc;
#pragma unroll
    for (int i = 0; i < S::kOps; ++i) {
      cp_async16s(wdst + slot + i * S::kRowsPerOp * S::kRowBytes, ok ? w[i] + wo : w[0], ok);
    }
#pragma unroll
    for (int i = 0; i < S::kMetaOps; ++i) {
      const bool mok = kFull || st * SC + (4 * i + ktile) / 2 < nc;
      cp_async16s(mdst + slot + i * 4 * 128, mok ? m[i] + mo : m[0], mok);
    }
  }
};

// stage_multiply multiplies the chunks of ring slot `slot` (stage st of the
// slice) into the accumulators; the stage's activations start xoff words
// past xl. kFull: all SC chunks are inside the slice, so there is no
// per-chunk test and the compiler may interleave them.
template <typename T, int NT, int SC, bool kFull>
__device__ __forceinline__ void stage_multiply(float (&acc)[NT][2][4], const char* slot,
                                               const uint32_t* const (&xl)[NT], int xoff, int st, int nc, int g,
                                               int tig, int lane) {
  using S = Stage<SC>;
#pragma unroll
  for (int i = 0; i < SC; ++i) {
    const int cl = st * SC + i;  // chunk of the slice
    if (kFull || cl < nc) {
      Chunk ch;
      // Rows g+8j share the parity of g: odd rows hold chunk i at i ^ 1.
      const int off = 64 * (i ^ (g & 1)) + 16 * tig;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        ch.a[j] = *reinterpret_cast<const uint4*>(slot + (g + 8 * j) * S::kRowBytes + off);
      }
      // The words of this lane's pair: one 8-byte load per k-tile.
      const uint32_t* mw = reinterpret_cast<const uint32_t*>(slot + S::kMetaOffset + 2 * i * 128) + (lane & ~1);
      const uint2 m0 = *reinterpret_cast<const uint2*>(mw);
      const uint2 m1 = *reinterpret_cast<const uint2*>(mw + 32);
      ch.w[0] = m0.x;
      ch.w[1] = m0.y;
      ch.w[2] = m1.x;
      ch.w[3] = m1.y;
      const uint32_t* xc[NT];
#pragma unroll
      for (int t = 0; t < NT; ++t) xc[t] = xl[t] + xoff + i * kChunkWords;
      multiply<T, NT>(acc, ch, xc, lane);
    }
  }
}

// ld_cg4 sets v to the 16 bytes at p, read through L2 (never from L1, which
// may hold stale lines), when pred; else it leaves v and reads nothing.
__device__ __forceinline__ void ld_cg4(float4& v, const float* p, bool pred) {
  asm volatile(
      "{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %5, 0;\n\t@q ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];\n\t}\n"
      : "+f"(v.x), "+f"(v.y), "+f"(v.z), "+f"(v.w)
      : "l"(p), "r"(static_cast<int>(pred))
      : "memory");
}

__device__ __forceinline__ void add4(float4& a, const float4& b) {
  a.x += b.x;
  a.y += b.y;
  a.z += b.z;
  a.w += b.w;
}

// reduce sums the partial sums of one warp's 32 weight rows (block rb) over
// the S slices of the workspace W[S][M][N] and stores the sums to Y. Lane
// (grp = lane/8, c = lane%8) holds rows 32·rb + 4c .. +3 as one float4.
// Every load of a batch is independent, so a batch costs one L2 round trip:
//   - M ≥ 4: group grp sums tokens grp, grp+4, ... (2·NT of them) over the
//     slices in slice order, 16/(2·NT) slices (at least one) per batch;
//   - M ≤ 3: group grp sums slices grp, grp+4, ... in order, for all M
//     tokens, 4 of its slices per batch; group 0 then adds the sums of
//     groups 1, 2, 3 in that order.
// Either way the order of the additions depends only on M and S: the same
// bits every run, whichever warp is last.
template <int NT>
__device__ __forceinline__ void reduce(float* __restrict__ Y, const float* W, int M, int N, int S, int rb,
                                       int lane) {
  const int grp = lane >> 3;
  const float* w = W + 32 * rb + 4 * (lane & 7);
  float* y = Y + 32 * rb + 4 * (lane & 7);
  const size_t plane = static_cast<size_t>(M) * N;  // one slice
  if (M >= 4) {
    constexpr int kTok = 2 * NT;                       // tokens grp + 4t
    constexpr int kSB = kTok >= 16 ? 1 : 16 / kTok;  // slices per batch
    float4 sum[kTok];
#pragma unroll
    for (int t = 0; t < kTok; ++t) sum[t] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < S; s0 += kSB) {
      float4 p[kSB][kTok];
#pragma unroll
      for (int j = 0; j < kSB; ++j) {
#pragma unroll
        for (int t = 0; t < kTok; ++t) {
          const int tok = grp + 4 * t;
          p[j][t] = make_float4(0.f, 0.f, 0.f, 0.f);
          ld_cg4(p[j][t], w + (s0 + j) * plane + static_cast<size_t>(tok) * N, s0 + j < S && tok < M);
        }
      }
#pragma unroll
      for (int j = 0; j < kSB; ++j) {
        if (s0 + j < S) {
#pragma unroll
          for (int t = 0; t < kTok; ++t) add4(sum[t], p[j][t]);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      const int tok = grp + 4 * t;
      if (tok < M) *reinterpret_cast<float4*>(y + static_cast<size_t>(tok) * N) = sum[t];
    }
  } else {
    constexpr int kSB = 4;  // slices of this group per batch
    float4 sum[3];
#pragma unroll
    for (int t = 0; t < 3; ++t) sum[t] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int j0 = 0; grp + 4 * j0 < S; j0 += kSB) {
      float4 p[kSB][3];
#pragma unroll
      for (int j = 0; j < kSB; ++j) {
        const int sl = grp + 4 * (j0 + j);
#pragma unroll
        for (int t = 0; t < 3; ++t) {
          p[j][t] = make_float4(0.f, 0.f, 0.f, 0.f);
          ld_cg4(p[j][t], w + sl * plane + static_cast<size_t>(t) * N, sl < S && t < M);
        }
      }
#pragma unroll
      for (int j = 0; j < kSB; ++j) {
        if (grp + 4 * (j0 + j) < S) {
#pragma unroll
          for (int t = 0; t < 3; ++t) add4(sum[t], p[j][t]);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < 3; ++t) {
#pragma unroll
      for (int h = 1; h < 4; ++h) {
        float4 o;
        o.x = __shfl_sync(0xffffffffu, sum[t].x, lane + 8 * h);
        o.y = __shfl_sync(0xffffffffu, sum[t].y, lane + 8 * h);
        o.z = __shfl_sync(0xffffffffu, sum[t].z, lane + 8 * h);
        o.w = __shfl_sync(0xffffffffu, sum[t].w, lane + 8 * h);
        if (grp == 0) add4(sum[t], o);
      }
      if (grp == 0 && t < M) *reinterpret_cast<float4*>(y + static_cast<size_t>(t) * N) = sum[t];
    }
  }
}

// stage_x queues window w of the slice's activations (chunks [w·xw,
// min((w+1)·xw, nc)) of tokens 0 … rows-1, and a row of zeros) into X
// buffer xb with 4-byte cp.async copies, each word straight to its
// permuted slot: no register round trip, so a thread's copies are all in
// flight at once. Warp `warp` copies chunks warp, warp+warps, … of the
// window, token by token down one column of slots (a copy and three
// adds per token; at M = 64 this loop was a quarter of the kernel's
// instructions when it walked the tokens outside), one word per lane.
__device__ __forceinline__ void stage_x(uint32_t* xb, const uint16_t* __restrict__ X, int K, int c0, int w, int xw,
                                        int nc, int rows, int ts, int warp, int warps, int lane) {
  const int first = w * xw;
  const int cnt = min(xw, nc - first);
  const size_t row = static_cast<size_t>(K) / 2;  // u32 words per token
  for (int lc = warp; lc < cnt; lc += warps) {
    const uint32_t* src = reinterpret_cast<const uint32_t*>(X) + (c0 + first + lc) * kChunkWords + lane;
    uint32_t* dst = xb + lc * kChunkWords + slot_of(lane);
    const uint32_t* src0 = src;
#pragma unroll 4
    for (int tok = 0; tok < rows; ++tok) {
      cp_async4(dst, src, true);
      src += row;
      dst += ts;
    }
    cp_async4(dst, src0, false);  // the row of zeros
  }
}

template <typename T, int NT, int SC>
__device__ __forceinline__ void kernel(float* __restrict__ Y, const uint16_t* __restrict__ X,
                                       const uint16_t* __restrict__ P, const uint32_t* __restrict__ U,
                                       float* __restrict__ W, int M, int N, int K, int xwin) {
  using S = Stage<SC>;
  constexpr int ST = S::kDepth;
  constexpr int kTokens = 8 * NT;
  extern __shared__ uint4 smem4[];
  char* smem = reinterpret_cast<char*>(smem4);
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warps = blockDim.x >> 5;
  const int chunks = K / kChunk;
  const int cps = (chunks + gridDim.y - 1) / gridDim.y;  // chunks per slice
  const int c0 = blockIdx.y * cps;
  const int nc = min(cps, chunks - c0);  // ≥ 1 for the Go planner's grids; ≤ 0 adds zeros
  const int nst = (nc + SC - 1) / SC;    // pipeline stages of the slice
  // Activations: the whole slice in one buffer (xwin = 0), or windows of
  // xw chunks through two buffers.
  const bool windowed = xwin > 0 && xwin < cps;
  const int xw = windowed ? xwin : cps;
  const int ts = xw * kChunkWords + kPadWords;
  const int rows = min(M, kTokens);  // token rows of X staged; row `rows` is zeros
  const int xbuf = (rows + 1) * ts;  // words of one X buffer
  // Layout: the warps' rings, then the X buffer(s).
  char* ring = smem + warp * ST * S::kBytes;
  uint32_t* xs = reinterpret_cast<uint32_t*>(smem + warps * ST * S::kBytes);

  stage_x(xs, X, K, c0, 0, xw, nc, rows, ts, warp, warps, lane);
  cp_async_commit();

  // Start the weight stream before waiting for X. Warps past N only help
  // stage X.
  const int rb = blockIdx.x * warps + warp;  // weight row block of this warp
  const bool active = rb < N / 32;
  const Copies<SC> cp(P, U, N, K, active ? rb : 0, c0, static_cast<uint32_t>(__cvta_generic_to_shared(ring)),
                      lane);
#pragma unroll
  for (int s = 0; s < ST - 1; ++s) {
    if (active && s < nst) {
      if ((s + 1) * SC <= nc) {
        cp.template issue<true>(s, nc, s * S::kBytes);
      } else {
        cp.template issue<false>(s, nc, s * S::kBytes);
      }
    }
    cp_async_commit();
  }
  cp_async_wait<ST - 1>();  // this thread's copies of X window 0 (the oldest group)
  __syncthreads();
  if (!active && !windowed) return;

  const int g = lane >> 2;
  const int tig = lane & 3;
  // This lane's token of n-tile t is 8t+g; tokens past M read the zero row.
  const uint32_t* xl[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) xl[t] = xs + min(8 * t + g, rows) * ts + 8 * tig;

  float acc[NT][2][4];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[t][s][i] = 0.f;

  // Position of stage st's activations: window win (in buffer win % 2),
  // chunk pos of it. Windows hold a whole number of stages (xw % SC == 0
  // when windowed), and window w+1 is queued when window w starts, at
  // least ST-1 stages (xw ≥ (ST-1)·SC) before it is read, so the wait
  // below has completed its copies by then.
  int win = 0, pos = 0;
  for (int st = 0; st < nst; ++st) {
    // Stage st has landed (this lane's copies) and every lane is done with
    // slot (st-1) % ST: make both visible across the warp, then refill
    // that slot with stage st+ST-1.
    cp_async_wait<ST - 2>();
    if (pos == xw) {
      // A new window: every warp is done with the previous one, whose
      // buffer takes the window after this one, and this one's copies
      // (each thread waited for its own) are visible to all.
      ++win;
      pos = 0;
      __syncthreads();
    } else {
      __syncwarp();
    }
    if (windowed && pos == 0 && (win + 1) * xw < nc) {
      stage_x(xs + ((win + 1) & 1) * xbuf, X, K, c0, win + 1, xw, nc, rows, ts, warp, warps, lane);
    }
    const int next = st + ST - 1;
    if (active && next < nst) {
      if ((next + 1) * SC <= nc) {
        cp.template issue<true>(next, nc, (next % ST) * S::kBytes);
      } else {
        cp.template issue<false>(next, nc, (next % ST) * S::kBytes);
      }
    }
    cp_async_commit();
    if (active) {
      const char* slot = ring + (st % ST) * S::kBytes;
      const int xoff = (win & 1) * xbuf + pos * kChunkWords;
      if ((st + 1) * SC <= nc) {
        stage_multiply<T, NT, SC, true>(acc, slot, xl, xoff, st, nc, g, tig, lane);
      } else {
        stage_multiply<T, NT, SC, false>(acc, slot, xl, xoff, st, nc, g, tig, lane);
      }
    }
    pos += SC;
  }
  cp_async_wait<0>();
  if (!active) return;

  // One slice: the sums are final. Several: this slice's part of them goes
  // to the workspace, the same [token][row] layout as Y.
  const int slices = gridDim.y;
  float* out = slices == 1 ? Y : W + static_cast<size_t>(blockIdx.y) * M * N;
  // d0, d1: row g, tokens 2·tig, 2·tig+1 of the n-tile; d2, d3: row g+8.
#pragma unroll
  for (int t = 0; t < NT; ++t) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int row = 32 * rb + 16 * s + g;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int tok = 8 * t + 2 * tig + (i & 1);
        if (tok < M) out[static_cast<size_t>(tok) * N + row + 8 * (i >> 1)] = acc[t][s][i];
      }
    }
  }
  if (slices == 1) return;

  // Draw the row block's ticket once the whole warp has stored its sums:
  // the atomic releases them (the warp barrier puts every lane's stores
  // before it) and, for the last warp, acquires those of the other slices
  // (the barrier after it orders them before every lane's loads).
  __syncwarp();
  unsigned* counter = reinterpret_cast<unsigned*>(W) - 1 - rb;
  unsigned ticket = 0;
  if (lane == 0) {
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\n" : "=r"(ticket) : "l"(counter) : "memory");
  }
  ticket = __shfl_sync(0xffffffffu, ticket, 0);
  __syncwarp();
  if (ticket != static_cast<unsigned>(slices - 1)) return;
  reduce<NT>(Y, W, M, N, slices, rb, lane);
  if (lane == 0) *counter = 0u;  // every slice has drawn its ticket
}

}  // namespace gemv
}  // namespace sfs

// gemv_{bf16,f16}_t{1,2,4,8}_s{2,4}: grid (ceil(N/32 / warps), slices),
// block 32·warps (≤ 256), dynamic shared memory
// warps·ST·Stage<SC>::kBytes + B·4·(min(M, 8·NT) + 1)·(xw·32 + 4) bytes with
// cps = ceil(K/64 / slices) and, for xwin = 0 or xwin ≥ cps (the slice's
// activations staged whole), xw = cps and B = 1, else (staged in windows
// of xwin chunks through two buffers) xw = xwin and B = 2; a window size
// must then be a multiple of SC and at least (ST-1)·SC. NT is the number
// of 8-token tiles (M ≤ 8·NT), SC the chunks per pipeline stage. Y is f32
// [M][N], written with plain stores, 16-byte aligned; X is [M][K]; P
// (packed) is [N][K/2]; U is the stored meta viewed as uint32 (N·K/32
// words). W (several slices only; unused with one) is the f32 workspace
// [slices][M][N], 16-byte aligned, preceded by the N/32 u32 ticket
// counters, all zero at launch and left zero.
#define SFS_GEMV(name, T, NT, SC)                                                                             \
  extern "C" __global__ void __launch_bounds__(sfs::gemv::kMaxThreads)                                       \
      name(float* __restrict__ Y, const uint16_t* __restrict__ X, const uint16_t* __restrict__ P,            \
           const uint32_t* __restrict__ U, float* __restrict__ W, int M, int N, int K, int xwin) {           \
    sfs::gemv::kernel<T, NT, SC>(Y, X, P, U, W, M, N, K, xwin);                                              \
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
