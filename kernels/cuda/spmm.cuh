// spmm.cuh: 2:4 sparse GEMM on the sparse tensor cores, reading PyTorch's
// CUTLASS layout (packed + meta) exactly as stored.
//
//   Y[M][N] (f32) = X[M][K] · W[N][K]ᵀ,  W given as packed[N][K/2] + meta.
//
// The sparse operand A of mma.sp is the weight (16 weight rows per mma), B is
// Xᵀ (8 tokens per mma). Stored meta, viewed as uint32 U, holds for weight
// row block b (32 rows) and k-tile p (32 dense columns) the 32 words
// U[p·N + 32b + lane]: lane reads one word and uses it with selector 0 for
// rows 32b..32b+15 and selector 1 for rows 32b+16..32b+31
// (docs/formats.md §1.5 and §2).
//
// CTA tile: 64 tokens × 64 weight rows, K in steps of 64, 3-stage cp.async
// pipeline, 4 warps. Warp w owns weight row block (w & 1) and tokens
// 32·(w >> 1) .. +31, i.e. 2 × 4 mma.sp of m16n8k32 per k-tile.
// Requirements (checked by the Go caller): N % 32 == 0, K % 64 == 0, M ≥ 1.
#pragma once

#include "common.cuh"

namespace sfs {
namespace spmm {

constexpr int kThreads = 128;
constexpr int kTileTokens = 64;
constexpr int kTileRows = 64;
constexpr int kTileK = 64;
constexpr int kStages = 3;
// Shared-memory row strides in 16-bit elements. The +8 padding makes the
// fragment loads below free of bank conflicts and keeps rows 16-byte aligned.
constexpr int kXStride = kTileK + 8;      // 72 halves = 36 words per token
constexpr int kWStride = kTileK / 2 + 8;  // 40 halves = 20 words per weight row
constexpr int kMetaWords = 2 * kTileRows; // 2 k-tiles × 64 rows

struct __align__(16) Smem {
  uint16_t x[kStages][kTileTokens * kXStride];
  uint16_t w[kStages][kTileRows * kWStride];
  uint32_t meta[kStages][kMetaWords];
};

template <int kSel>
__device__ __forceinline__ void mma_sp(BF16, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[4],
                                       uint32_t e) {
  asm volatile(
      "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, %13;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e),
        "n"(kSel));
}

template <int kSel>
__device__ __forceinline__ void mma_sp(F16, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[4],
                                       uint32_t e) {
  asm volatile(
      "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, %13;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e),
        "n"(kSel));
}

// load_stage issues the cp.async copies of k-block kb into pipeline slot
// slot. Rows past M (tokens) or N (weights) are zero-filled, never read.
__device__ __forceinline__ void load_stage(Smem& sm, int slot, int kb, const uint16_t* __restrict__ X,
                                           const uint16_t* __restrict__ P, const uint32_t* __restrict__ U,
                                           int M, int N, int K, int m0, int n0, int tid) {
  const int k0 = kb * kTileK;
  // X: 64 tokens × 64 halves = 512 chunks of 16 bytes, 4 per thread.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int c = tid + i * kThreads;
    const int row = c >> 3;
    const int col = (c & 7) * 8;
    const int tok = m0 + row;
    const bool ok = tok < M;
    const uint16_t* src = ok ? X + static_cast<size_t>(tok) * K + k0 + col : X;
    cp_async16(&sm.x[slot][row * kXStride + col], src, ok);
  }
  // packed W: 64 rows × 32 halves = 256 chunks, 2 per thread.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = tid + i * kThreads;
    const int row = c >> 2;
    const int col = (c & 3) * 8;
    const int wr = n0 + row;
    const bool ok = wr < N;
    const uint16_t* src = ok ? P + static_cast<size_t>(wr) * (K / 2) + k0 / 2 + col : P;
    cp_async16(&sm.w[slot][row * kWStride + col], src, ok);
  }
  // meta: 2 k-tiles × 64 words = 32 chunks of 4 words. N % 32 == 0, so a
  // chunk never straddles N.
  if (tid < 32) {
    const int pp = tid >> 4;
    const int r = (tid & 15) * 4;
    const int p = kb * 2 + pp;
    const bool ok = n0 + r < N;
    const uint32_t* src = ok ? U + static_cast<size_t>(p) * N + n0 + r : U;
    cp_async16(&sm.meta[slot][pp * kTileRows + r], src, ok);
  }
}

template <typename T>
__device__ __forceinline__ void kernel(float* __restrict__ Y, const uint16_t* __restrict__ X,
                                       const uint16_t* __restrict__ P, const uint32_t* __restrict__ U, int M,
                                       int N, int K) {
  __shared__ Smem sm;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int g = lane >> 2;   // mma group id
  const int tig = lane & 3;  // thread in group
  const int rb = warp & 1;   // weight row block of this warp inside the tile
  const int tb = warp >> 1;  // token half of this warp inside the tile
  const int m0 = blockIdx.x * kTileTokens;
  const int n0 = blockIdx.y * kTileRows;
  const int numK = K / kTileK;
  // With N % 64 == 32 the second row block of the last tile is past N: its
  // warps still help load (zero-filled) but issue no mma and store nothing.
  const bool active = n0 + rb * 32 < N;

  float acc[2][4][4];
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[s][t][i] = 0.f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < numK) load_stage(sm, s, s, X, P, U, M, N, K, m0, n0, tid);
    cp_async_commit();
  }

  for (int kb = 0; kb < numK; ++kb) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage kb visible to all; slot (kb-1)%kStages free
    const int next = kb + kStages - 1;
    if (next < numK) load_stage(sm, next % kStages, next, X, P, U, M, N, K, m0, n0, tid);
    cp_async_commit();

    const int slot = kb % kStages;
    if (active) {
#pragma unroll
      for (int pp = 0; pp < 2; ++pp) {
        const uint32_t e = sm.meta[slot][pp * kTileRows + rb * 32 + lane];
        uint32_t a[2][4];
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          const uint32_t* r0 =
              reinterpret_cast<const uint32_t*>(&sm.w[slot][(rb * 32 + s * 16 + g) * kWStride]);
          const uint32_t* r8 = r0 + 8 * kWStride / 2;
          a[s][0] = r0[pp * 8 + tig];
          a[s][1] = r8[pp * 8 + tig];
          a[s][2] = r0[pp * 8 + 4 + tig];
          a[s][3] = r8[pp * 8 + 4 + tig];
        }
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const uint32_t* xr =
              reinterpret_cast<const uint32_t*>(&sm.x[slot][(tb * 32 + t * 8 + g) * kXStride]);
          uint32_t b[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) b[j] = xr[pp * 16 + tig + 4 * j];
          mma_sp<0>(T{}, acc[0][t], a[0], b, e);
          mma_sp<1>(T{}, acc[1][t], a[1], b, e);
        }
      }
    }
  }
  cp_async_wait<0>();

  if (!active) return;
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const int wrow = n0 + rb * 32 + s * 16 + g;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int tok = m0 + tb * 32 + t * 8 + 2 * tig;
      if (tok < M) {
        float* y = Y + static_cast<size_t>(tok) * N + wrow;
        y[0] = acc[s][t][0];
        y[8] = acc[s][t][2];
      }
      if (tok + 1 < M) {
        float* y = Y + static_cast<size_t>(tok + 1) * N + wrow;
        y[0] = acc[s][t][1];
        y[8] = acc[s][t][3];
      }
    }
  }
}

}  // namespace spmm
}  // namespace sfs

// spmm_bf16 and spmm_f16: grid (ceil(M/64), ceil(N/64)), block 128, static
// shared memory. Y is f32 [M][N]; X is [M][K]; P (packed) is [N][K/2]; U is
// the stored meta viewed as uint32 (N·K/32 words).
extern "C" __global__ void __launch_bounds__(sfs::spmm::kThreads)
    spmm_bf16(float* __restrict__ Y, const uint16_t* __restrict__ X, const uint16_t* __restrict__ P,
              const uint32_t* __restrict__ U, int M, int N, int K) {
  sfs::spmm::kernel<sfs::BF16>(Y, X, P, U, M, N, K);
}

extern "C" __global__ void __launch_bounds__(sfs::spmm::kThreads)
    spmm_f16(float* __restrict__ Y, const uint16_t* __restrict__ X, const uint16_t* __restrict__ P,
             const uint32_t* __restrict__ U, int M, int N, int K) {
  sfs::spmm::kernel<sfs::F16>(Y, X, P, U, M, N, K);
}
