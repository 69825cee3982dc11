// gemv.cuh: the decode-size 2:4 sparse product (M ≤ 64 tokens), reading
// PyTorch's CUTLASS layout (packed + meta) exactly as stored.
//
//   Y[M][N] = X[M][K] · W[N][K]ᵀ (+ bias[N]),  W given as packed[N][K/2] + meta:
//
// summed in f32, the bias (if any) added to the sum, stored as f32 or
// rounded to the element type (Out).
//
// At M ≤ 64 the product is memory-bound: its time is the weight bytes over
// the memory bandwidth. The kernel streams the weight once, in long runs of
// each row, and keeps several stages of it in flight per warp; the tensor
// cores (mma.sp m16n8k32, tokens padded to the n = 8 tile) are far from
// busy.
//
// Work split. A row block of 32 weight rows is owned by kw warps (1, 2, 4
// or 8), which take the stages of the CTA's slice of K in turn (warp kq of
// the block stages kq, kq+kw, …); a CTA of `warps` warps (blockDim.x / 32)
// owns warps/kw row blocks and one slice of K (grid.y slices of `cps`
// chunks of 64 columns). kw > 1 splits K inside the CTA: at the end the
// block's warps add their sums through shared memory, with no trip to
// global memory, so a small weight fills the SMs with fewer slices.
//
// The CTA stages its slice of X (the M tokens and one row of zeros, which
// the padding tokens of the n = 8 tiles read) in shared memory, either
// whole, once, or (when the slice's activations would not fit, from M = 16
// or so) in windows of a few rounds of stages through two buffers, the
// next window queued as one starts, with a CTA barrier per window. Each
// warp then runs its own cp.async pipeline over its rows: a stage is SC
// chunks of all 32 rows, each row a contiguous run of SC·64 bytes (whole
// cache lines; loading the 64-byte pieces the fragments need straight into
// registers reached only about 55% of the copy bandwidth), plus the meta
// of the stage. ST stages ring in shared memory; the main loop has no
// CTA-wide barrier but the one per window of activations. With one slice
// the results are stored (store_sums: plus the bias where there is one, as
// f32 or rounded to the element type).
//
// Several slices (split K), deterministically and in one launch: the first
// warp of each row block (holding its block's sums of the slice) stores
// them to a workspace W[slice][token][row] (f32), then
// draws a ticket from its row block's counter with one acq_rel atomic. The
// warp that draws the last ticket adds the slices up in an order fixed by M
// and the slice count (see reduce), whichever warp that is, so Y is
// bit-identical from run to run; it stores Y with plain stores (as Out
// says) and puts the counter back to 0 for the next launch. The counters
// (one u32 per row block, zero between launches) lie just below W: row
// block rb's is ((u32*)W)[-1-rb].
//
// Operand mapping: the natural one, as in spmm.cuh. The weight rows are
// mma.sp's operand A (16 rows per mma), the tokens B (8 per mma), and
// k-tile p (32 dense columns, 8 groups = 8 packed u32 per row) of the
// chunk is one m16n8k32 product. Fragments come from shared memory with
// ldmatrix.x4: for A, the four 8×8 matrices are rows 0-7 and 8-15 of a
// 16-row half at the 16-byte units of packed u32 0-3 and 4-7 of the
// k-tile, which hands lane (g = lane/4, tig = lane%4) exactly a0..a3 =
// u32 tig and 4+tig of rows g and g+8; for B, the matrices are tokens
// 8t .. 8t+7 at the four 16-byte units of the k-tile's activations (X in
// its natural [token][k] layout), which hands it b0..b3 = words
// tig + {0, 4, 8, 12}. The meta needs no rearranging: the stored u32 of
// lane L for k-tile p and the warp's row block (docs/formats.md
// §1.5, §2) is mma.sp's metadata operand, with selector 0 for rows 0-15
// and 1 for rows 16-31 of the block.
//
// Requirements (checked by the Go caller): N % 32 == 0, K % 64 == 0,
// 1 ≤ M ≤ 8·NT, blockDim.x = 32·warps ≤ 256, kw ∈ {1, 2, 4, 8} dividing
// warps, dynamic shared memory as documented at the entry points and, with
// more than one slice, the workspace and counters described above. Slice s holds chunks
// [s·cps, min((s+1)·cps, K/64)) with cps = ceil(K/64 / gridDim.y); the Go
// planner makes none empty (an empty one would add zeros).
#pragma once

#include "common.cuh"

// SFS_GEMV_TRACE(point) marks points of the kernel (0 entry, 1 activations
// window 0 staged, 2 first stage landed, 3 main loop done, 4 sums stored;
// 5, in gemv_wg.cuh, the warp's sum done)
// for tools/probes/gemv_probe.cu and pdl_probe.cu, which define it to
// record the time;
// the product builds it to nothing.
#ifndef SFS_GEMV_TRACE
#define SFS_GEMV_TRACE(point)
#endif

namespace sfs {
namespace gemv {

constexpr int kMaxThreads = 256;  // at most 8 warps per CTA
constexpr int kChunk = 64;        // dense K columns per chunk (two mma k-tiles)
constexpr int kChunkWords = 32;   // u32 words of one token's X per chunk
constexpr int kPadWords = 4;      // 16 B per token row: conflict-free ldmatrix of 8 tokens

// Stage is the shared-memory layout of one pipeline stage of a warp: 32
// rows of SC chunks (64 bytes of packed values each), then the meta of the
// 2·SC k-tiles (32 words each). The 16-byte unit u of row r is stored at
// unit u ^ (r % 8) (the low three bits: within its 128 bytes), so that the
// eight rows an ldmatrix matrix reads at one unit fall in eight different
// groups of banks.
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

// ldsm4 loads four 8×8 matrices of 16-bit values from shared memory
// (ldmatrix.x4): lane L gives the address of row L%8 of matrix L/8 and
// receives, in r[j], the two values of row L/4, columns 2·(L%4) and
// 2·(L%4)+1 of matrix j. volatile: the ring slots it reads are refilled
// by cp.async, which the compiler cannot see.
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// lds32 loads one u32 from shared memory.
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
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

// Copies is what a lane needs to queue the cp.async copies of a stage: the
// global source of each of its copies for stage 0 of the slice, and the
// shared destination of its first copy in ring slot 0. Weights: copy i of
// lane L moves 16 bytes (piece L % kLanesPerRow) of row i·kRowsPerOp +
// L / kLanesPerRow of the warp's block, to unit piece ^ (row % 8) of the
// row (Stage); meta: copy i moves 4 words of k-tile 4i + L/8.
template <int SC>
struct Copies {
  using S = Stage<SC>;
  const uint4* w[S::kOps];
  const uint4* m[S::kMetaOps];
  uint32_t wdst, mdst;  // shared addresses in slot 0 (wdst: of row r, unit 0)
  size_t wstep, mstep;  // uint4 to the next stage
  int piece;            // 16-byte piece of the row run (weights)
  int swz;              // piece ^ r: the unit of copy 0 (copy i: swz ^ (i·kRowsPerOp % 8))
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
    // Copy i's row is i·kRowsPerOp + r with r < kRowsPerOp (a power of
    // two), so its low three bits are (i·kRowsPerOp % 8) ^ r.
    wdst = ring + r * S::kRowBytes;
    swz = piece ^ r;
    const uint32_t* mp = U + static_cast<size_t>(2 * c0 + (lane >> 3)) * N + 32 * rb + 4 * (lane & 7);
#pragma unroll
    for (int i = 0; i < S::kMetaOps; ++i) m[i] = reinterpret_cast<const uint4*>(mp + static_cast<size_t>(4 * i) * N);
    mdst = ring + S::kMetaOffset + (lane >> 3) * 128 + 16 * (lane & 7);
    wstep = static_cast<size_t>(SC) * 4;
    mstep = static_cast<size_t>(2 * SC) * N / 4;
  }

  // issue queues stage st of a slice of nc chunks into the slot at byte
  // offset slot of the ring. kFull: the whole stage is inside the slice;
  // otherwise chunks past it are zero-filled, never read. dw and dm move
  // every source by that many uint4 (gemv_wg.cuh's producer queues the
  // row blocks of four warps from one Copies: the next block's weights are
  // 32 rows further, its meta 32 words).
  template <bool kFull>
  __device__ __forceinline__ void issue(int st, int nc, uint32_t slot, size_t dw = 0, size_t dm = 0) const {
    const size_t wo = static_cast<size_t>(st) * wstep + dw;
    const size_t mo = static_cast<size_t>(st) * mstep + dm;
    const bool ok = kFull || st * SC + piece / 4 < nc;
#pragma unroll
    for (int i = 0; i < S::kOps; ++i) {
      const int unit = swz ^ ((i * S::kRowsPerOp) & 7);
      cp_async16s(wdst + slot + i * S::kRowsPerOp * S::kRowBytes + 16 * unit, ok ? w[i] + wo : w[0], ok);
    }
#pragma unroll
    for (int i = 0; i < S::kMetaOps; ++i) {
      const bool mok = kFull || st * SC + (4 * i + ktile) / 2 < nc;
      cp_async16s(mdst + slot + i * 4 * 128, mok ? m[i] + mo : m[0], mok);
    }
  }
};

// Lane is what a lane needs for its fragment loads: the ldmatrix row
// addresses of A (row ar of a 16-row half, the unit XOR of k-tile p's
// first unit in a chunk: aq ^ 2p) and of B (xa[t]: its token row of n-tile
// t, unit xu, at the start of the activation buffers).
template <int NT>
struct Lane {
  uint32_t arow;     // byte offset of row ar in a stage
  int aq;            // (lane/16) ^ (lane%8): unit bits of k-tile 0's matrices
  uint32_t xa[NT];   // shared address of this lane's B row of n-tile t, unit lane/8
  uint32_t meta;     // byte offset of this lane's meta word in a stage's k-tile 0
};

// lane_a sets the A and meta part of ln for lane, for stages of SC chunks:
// A rows ar = lane%8 (+8 for matrices 1 and 3) of each 16-row half, and
// the lane's meta word. Both kernels load A and meta this way.
template <int SC, int NT>
__device__ __forceinline__ void lane_a(Lane<NT>& ln, int lane) {
  ln.arow = (((lane >> 3) & 1) * 8 + (lane & 7)) * Stage<SC>::kRowBytes;
  ln.aq = (lane >> 4) ^ (lane & 7);
  ln.meta = 4 * lane;
}

// lane_b sets the B part of ln for lane: the activations' row of token
// 8t + lane%8 of n-tile t (tokens past the rows staged read the zero row
// at index rows), unit lane/8 of the k-tile, in a buffer at xs of rows of
// ts words.
template <int NT>
__device__ __forceinline__ void lane_b(Lane<NT>& ln, uint32_t xs, int rows, int ts, int lane) {
#pragma unroll
  for (int t = 0; t < NT; ++t) ln.xa[t] = xs + 4 * min(8 * t + (lane & 7), rows) * ts + 16 * (lane >> 3);
}

// zero_acc clears a warp's accumulators.
template <int NT>
__device__ __forceinline__ void zero_acc(float (&acc)[NT][2][4]) {
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[t][s][i] = 0.f;
}

// stage_multiply multiplies the chunks of ring slot `slot` (shared
// address; stage st of the slice) into the accumulators; the stage's
// activations start xoff bytes past the lane's B rows. kFull: all SC
// chunks are inside the slice, so there is no per-chunk test and the
// compiler may interleave them.
template <typename T, int NT, int SC, bool kFull>
__device__ __forceinline__ void stage_multiply(float (&acc)[NT][2][4], uint32_t slot, const Lane<NT>& ln,
                                               uint32_t xoff, int st, int nc) {
  using S = Stage<SC>;
#pragma unroll
  for (int i = 0; i < SC; ++i) {
    if (kFull || st * SC + i < nc) {
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        // k-tile 2i+p: units 4i+2p (u32 0-3) and 4i+2p+1 (u32 4-7) of the
        // rows; matrix j = lane/8 reads rows ar (+8 for j odd) at unit
        // 4i + 2p + j/2, stored at that ^ (row % 8) = (4i + 2p) ^ aq.
        const uint32_t unit = static_cast<uint32_t>((4 * i + 2 * p) ^ ln.aq);
        uint32_t a0[4], a1[4];
        ldsm4(a0, slot + ln.arow + 16 * unit);
        ldsm4(a1, slot + ln.arow + 16 * S::kRowBytes + 16 * unit);
        const uint32_t e = lds32(slot + S::kMetaOffset + (2 * i + p) * 128 + ln.meta);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          uint32_t b[4];
          ldsm4(b, ln.xa[t] + xoff + i * 128 + p * 64);
          mma<0>(T{}, acc[t][0], a0, b, e);
          mma<1>(T{}, acc[t][1], a1, b, e);
        }
      }
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

// Out is where a kernel's final sums go: y [M][N], 16-byte aligned, as f32
// (kind 0) or as the element type T rounded to nearest even (kind 1), each
// sum s of token m, row n stored as s + bias[n] where bias (N values of T)
// is not null, else as s. kind and bias are the same for the whole
// launch, so each branch on them is uniform. The split-K workspace takes
// the partial sums as an Out of kind 0 without a bias, which is what a
// float* converts to (the probes of tools/probes pass their f32 Y so).
struct Out {
  void* y;
  const uint16_t* bias;
  int kind;

  __device__ __forceinline__ Out(float* f32) : y(f32), bias(nullptr), kind(0) {}
  __device__ __forceinline__ Out(void* y_, const uint16_t* bias_, int kind_) : y(y_), bias(bias_), kind(kind_) {}

  // at returns the address of element e of y.
  __device__ __forceinline__ void* at(size_t e) const {
    return kind == 0 ? static_cast<void*>(static_cast<float*>(y) + e) : static_cast<void*>(static_cast<uint16_t*>(y) + e);
  }
};

// prefetch_bias asks for the bias of row block rb (32 values, in one or
// two lines: lane 0 names the first, lane 1 the last) in L1, so that the
// final stores, which load it only then, need not wait on DRAM for it.
// Nothing without a bias.
__device__ __forceinline__ void prefetch_bias(const Out& o, int rb, int lane) {
  if (o.bias != nullptr && lane < 2) {
    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(o.bias + 32 * rb + 31 * lane));
  }
}

// bias4 returns the bias of rows n … n+3 of o (o.bias not null) as f32.
template <typename T>
__device__ __forceinline__ float4 bias4(const Out& o, int n) {
  return make_float4(to_f32(T{}, o.bias[n]), to_f32(T{}, o.bias[n + 1]), to_f32(T{}, o.bias[n + 2]),
                     to_f32(T{}, o.bias[n + 3]));
}

// put1 stores v, the final value (bias added) of element e of y, as o's
// kind: f32, or rounded to T.
template <typename T>
__device__ __forceinline__ void put1(const Out& o, size_t e, float v) {
  if (o.kind == 0) {
    static_cast<float*>(o.y)[e] = v;
  } else {
    static_cast<uint16_t*>(o.y)[e] = round16(T{}, v);
  }
}

// put4 is put1 of elements e … e+3 (e a multiple of 4: one 16-byte or
// 8-byte store).
template <typename T>
__device__ __forceinline__ void put4(const Out& o, size_t e, const float4& v) {
  if (o.kind == 0) {
    *reinterpret_cast<float4*>(static_cast<float*>(o.y) + e) = v;
  } else {
    const uint64_t lo = round16x2(T{}, v.x, v.y), hi = round16x2(T{}, v.z, v.w);
    *reinterpret_cast<uint64_t*>(static_cast<uint16_t*>(o.y) + e) = lo | hi << 32;
  }
}

// reduce sums the partial sums of one warp's 32 weight rows (block rb) over
// the S slices of the workspace W[S][M][N] and stores the sums to o (the
// bias added last, loaded once the partial sums are in). Lane
// (grp = lane/8, c = lane%8) holds rows 32·rb + 4c .. +3 as one float4.
// Every load of a batch is independent, so a batch costs one L2 round trip:
//   - M ≥ 4: group grp sums tokens grp, grp+4, ... (2·NT of them) over the
//     slices in slice order, kLoads/(2·NT) slices (at least one) per batch;
//   - M ≤ 3: group grp sums slices grp, grp+4, ... in order, for all M
//     tokens, 4 of its slices per batch; group 0 then adds the sums of
//     groups 1, 2, 3 in that order.
// Either way the order of the additions depends only on M and S: the same
// bits every run, whichever warp is last.
template <typename T, int NT>
__device__ __forceinline__ void reduce(const Out& o, const float* W, int M, int N, int S, int rb, int lane) {
  const int grp = lane >> 3;
  const int n0 = 32 * rb + 4 * (lane & 7);  // the lane's first row
  const float* w = W + n0;
  const size_t plane = static_cast<size_t>(M) * N;  // one slice
  if (M >= 4) {
    constexpr int kTok = 2 * NT;  // tokens grp + 4t
    // Loads in flight per lane: at 64 tokens with 16 of them, a launch of
    // 8 slices spent 8 L2 round trips here.
    constexpr int kLoads = 32;
    constexpr int kSB = kTok >= kLoads ? 1 : kLoads / kTok;  // slices per batch
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
    if (o.bias != nullptr) {
      const float4 b = bias4<T>(o, n0);
#pragma unroll
      for (int t = 0; t < kTok; ++t) add4(sum[t], b);
    }
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      const int tok = grp + 4 * t;
      if (tok < M) put4<T>(o, static_cast<size_t>(tok) * N + n0, sum[t]);
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
    float4 b = make_float4(0.f, 0.f, 0.f, 0.f);
    if (o.bias != nullptr) b = bias4<T>(o, n0);
#pragma unroll
    for (int t = 0; t < 3; ++t) {
#pragma unroll
      for (int h = 1; h < 4; ++h) {
        float4 v;
        v.x = __shfl_sync(0xffffffffu, sum[t].x, lane + 8 * h);
        v.y = __shfl_sync(0xffffffffu, sum[t].y, lane + 8 * h);
        v.z = __shfl_sync(0xffffffffu, sum[t].z, lane + 8 * h);
        v.w = __shfl_sync(0xffffffffu, sum[t].w, lane + 8 * h);
        if (grp == 0) add4(sum[t], v);
      }
      if (o.bias != nullptr) add4(sum[t], b);
      if (grp == 0 && t < M) put4<T>(o, static_cast<size_t>(t) * N + n0, sum[t]);
    }
  }
}

// store_sums stores a warp's sums of its 32 weight rows (block rb) to o,
// in Y's [token][row] layout: to Y, or as an Out of a float*, to the
// workspace.
template <typename T, int NT>
__device__ __forceinline__ void store_sums(const Out& o, const float (&acc)[NT][2][4], int M, int N, int rb,
                                           int lane) {
  // d0, d1: row g, tokens 2·tig, 2·tig+1 of the n-tile; d2, d3: row g+8.
  const int g = lane >> 2;
  const int tig = lane & 3;
  float b[2][2] = {};  // the bias of rows 16s + g + 8h of the block, where there is one
  if (o.bias != nullptr) {
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
      for (int h = 0; h < 2; ++h) b[s][h] = to_f32(T{}, o.bias[32 * rb + 16 * s + g + 8 * h]);
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int row = 32 * rb + 16 * s + g;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int tok = 8 * t + 2 * tig + (i & 1);
        if (tok < M) {
          float v = acc[t][s][i];
          if (o.bias != nullptr) v += b[s][i >> 1];
          put1<T>(o, static_cast<size_t>(tok) * N + row + 8 * (i >> 1), v);
        }
      }
    }
  }
}

// finish stores a warp's sums of its 32 weight rows (block rb) for the
// CTA's slice of K: to o when the launch has one slice, else to the
// workspace, after which the last slice of the row block to draw its
// ticket, ctr[-1-rb], adds them all up (reduce). Both the mma.sp and the
// warpgroup kernels end with it; ctr is (unsigned*)W but for the
// warpgroup form's token groups.
template <typename T, int NT>
__device__ __forceinline__ void finish(const Out& o, float* __restrict__ W, const float (&acc)[NT][2][4], int M, int N,
                                       int rb, int lane, unsigned* ctr) {
  // One slice: the sums are final. Several: this slice's part of them goes
  // to the workspace, f32 in the same [token][row] layout as Y.
  const int slices = gridDim.y;
  if (slices == 1) {
    store_sums<T, NT>(o, acc, M, N, rb, lane);
  } else {
    store_sums<T, NT>(Out(W + static_cast<size_t>(blockIdx.y) * M * N), acc, M, N, rb, lane);
  }
  SFS_GEMV_TRACE(4);
  if (slices == 1) return;

  // Draw the row block's ticket once the whole warp has stored its sums:
  // the atomic releases them (the warp barrier puts every lane's stores
  // before it) and, for the last warp, acquires those of the other slices
  // (the barrier after it orders them before every lane's loads).
  __syncwarp();
  unsigned* counter = ctr - 1 - rb;
  unsigned ticket = 0;
  if (lane == 0) {
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\n" : "=r"(ticket) : "l"(counter) : "memory");
  }
  ticket = __shfl_sync(0xffffffffu, ticket, 0);
  __syncwarp();
  if (ticket != static_cast<unsigned>(slices - 1)) return;
  reduce<T, NT>(o, W, M, N, slices, rb, lane);
  if (lane == 0) *counter = 0u;  // every slice has drawn its ticket
}

// stage_x queues window w of the slice's activations (chunks [w·xw,
// min((w+1)·xw, nc)) of tokens 0 … rows-1, and a row of zeros) into the X
// buffer at shared address xb, in their natural layout (token rows of ts
// words), with 16-byte cp.async copies: warp `warp` copies chunks warp,
// warp+warps, … of the window, four tokens (eight units each) per copy.
// The token loop has no selects or predicates (the zero row is one
// zero-filling copy after it): at m = 64 staging is about a quarter of the
// instructions a warp issues (Nsight Compute, 8B gate_up).
__device__ __forceinline__ void stage_x(uint32_t xb, const uint16_t* __restrict__ X, int K, int c0, int w, int xw,
                                        int nc, int rows, int ts, int warp, int warps, int lane) {
  const int first = w * xw;
  const int cnt = min(xw, nc - first);
  const int u = lane & 7;   // 16-byte unit of the chunk
  const int tq = lane >> 3;  // token of the four
  const size_t step = static_cast<size_t>(K) / 2;  // uint4 of four tokens
  for (int lc = warp; lc < cnt; lc += warps) {
    const uint4* src = reinterpret_cast<const uint4*>(X) + (c0 + first + lc) * (kChunk / 8) + u +
                       static_cast<size_t>(tq) * (K / 8);
    uint32_t dst = xb + tq * ts * 4 + lc * 128 + 16 * u;
    int tok = tq;
#pragma unroll 4
    for (; tok < rows; tok += 4) {
      cp_async16s(dst, src, true);
      src += step;
      dst += 16 * ts;
    }
    if (tok == rows) cp_async16s(dst, X, false);  // row `rows`: zeros
  }
}

// bar_group waits at named barrier id for the n threads of one row
// block's warps (their barrier, not the CTA's).
__device__ __forceinline__ void bar_group(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

template <typename T, int NT, int SC>
__device__ __forceinline__ void kernel(const Out out, const uint16_t* __restrict__ X,
                                       const uint16_t* __restrict__ P, const uint32_t* __restrict__ U,
                                       float* __restrict__ W, int M, int N, int K, int xwin, int kw) {
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
  // The kw warps of a row block take its stages in turn: round r is
  // stages r·kw … r·kw+kw-1, warp kq of the block stage r·kw + kq.
  const int kq = warp % kw;
  const int rounds = (nst + kw - 1) / kw;
  const int round = kw * SC;  // chunks of the slice one round covers
  // Activations: the whole slice in one buffer (xwin = 0), or windows of
  // xw chunks through two buffers.
  const bool windowed = xwin > 0 && xwin < cps;
  const int xw = windowed ? xwin : cps;
  const int ts = xw * kChunkWords + kPadWords;
  const int rows = min(M, kTokens);  // token rows of X staged; row `rows` is zeros
  const uint32_t xbuf = 4 * (rows + 1) * ts;  // bytes of one X buffer
  // Layout: the warps' rings, then the X buffer(s), as shared addresses.
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t ring = base + warp * ST * S::kBytes;
  const uint32_t xs = base + warps * ST * S::kBytes;
  SFS_GEMV_TRACE(0);

  stage_x(xs, X, K, c0, 0, xw, nc, rows, ts, warp, warps, lane);
  cp_async_commit();

  // Start the weight stream before waiting for X. Warps past N only help
  // stage X.
  const int rb = blockIdx.x * (warps / kw) + warp / kw;  // weight row block of this warp
  const bool active = rb < N / 32;
  if (active && kq == 0) prefetch_bias(out, rb, lane);  // the warp that stores the block's sums
  const Copies<SC> cp(P, U, N, K, active ? rb : 0, c0, ring, lane);
#pragma unroll
  for (int r = 0; r < ST - 1; ++r) {
    const int s = r * kw + kq;
    if (active && s < nst) {
      if ((s + 1) * SC <= nc) {
        cp.template issue<true>(s, nc, r * S::kBytes);
      } else {
        cp.template issue<false>(s, nc, r * S::kBytes);
      }
    }
    cp_async_commit();
  }
  cp_async_wait<ST - 1>();  // this thread's copies of X window 0 (the oldest group)
  __syncthreads();
  SFS_GEMV_TRACE(1);
  if (!active && !windowed) return;

  // Fragment addresses (Lane): A and meta by lane_a; B rows: token 8t +
  // lane%8 of n-tile t, tokens past M read the zero row, at unit lane/8 of
  // the k-tile.
  Lane<NT> ln;
  lane_a<SC>(ln, lane);
  lane_b(ln, xs, rows, ts, lane);

  float acc[NT][2][4];
  zero_acc(acc);

  // Position of round r's activations: window win (in buffer win % 2),
  // chunk pos of it. Windows hold a whole number of rounds (xw % (kw·SC)
  // == 0 when windowed), and window w+1 is queued when window w starts, at
  // least ST-1 rounds (xw ≥ (ST-1)·kw·SC) before it is read, so the wait
  // below has completed its copies by then.
  int win = 0, pos = 0;
  for (int r = 0; r < rounds; ++r) {
    // Round r's stage has landed (this lane's copies) and every lane is
    // done with slot (r-1) % ST: make both visible across the warp, then
    // refill that slot with the stage of round r+ST-1.
    cp_async_wait<ST - 2>();
    if (r == 0) SFS_GEMV_TRACE(2);
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
    const int next = (r + ST - 1) * kw + kq;
    if (active && next < nst) {
      if ((next + 1) * SC <= nc) {
        cp.template issue<true>(next, nc, ((r + ST - 1) % ST) * S::kBytes);
      } else {
        cp.template issue<false>(next, nc, ((r + ST - 1) % ST) * S::kBytes);
      }
    }
    cp_async_commit();
    const int st = r * kw + kq;
    if (active && st < nst) {
      const uint32_t slot = ring + (r % ST) * S::kBytes;
      const uint32_t xoff = (win & 1) * xbuf + (pos + kq * SC) * 128;
      if ((st + 1) * SC <= nc) {
        stage_multiply<T, NT, SC, true>(acc, slot, ln, xoff, st, nc);
      } else {
        stage_multiply<T, NT, SC, false>(acc, slot, ln, xoff, st, nc);
      }
    }
    pos += round;
  }
  cp_async_wait<0>();
  SFS_GEMV_TRACE(3);
  if (!active) return;

  // Several warps per row block: each puts its sums in its own ring (free
  // now: its copies have landed and been read), and the block's first
  // warp adds them to its own in warp order, the same bits every run.
  if (kw > 1) {
    __syncwarp();
    constexpr int kAcc = NT * 8;  // accumulators per lane
    if (kq != 0) {
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const uint32_t a = ring + 4 * ((t * 8 + s * 4 + i) * 32 + lane);
            asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(a), "f"(acc[t][s][i]) : "memory");
          }
    }
    bar_group(1 + warp / kw, 32 * kw);
    if (kq != 0) return;
    for (int q = 1; q < kw; ++q) {
      const uint32_t other = base + (warp + q) * ST * S::kBytes;
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            acc[t][s][i] += __uint_as_float(lds32(other + 4 * ((t * 8 + s * 4 + i) * 32 + lane)));
    }
    static_assert(kAcc * 32 * 4 <= ST * S::kBytes, "a warp's sums fit in its ring");
  }

  finish<T, NT>(out, W, acc, M, N, rb, lane, reinterpret_cast<unsigned*>(W));
}

}  // namespace gemv
}  // namespace sfs
