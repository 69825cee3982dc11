// dense.cuh: a plain dense GEMM on the CUDA cores, the fallback when
// cuBLASLt is missing and a second reference in tests.
//
//   Y[M][N] (f32) = X[M][K] · W[N][K]ᵀ, 16-bit inputs, f32 accumulate.
//
// CTA tile 64 tokens × 64 weight rows, K in steps of 16 through shared
// memory (as f32), 256 threads with 4 × 4 outputs each. Any M, N, K ≥ 1.
#pragma once

#include "common.cuh"

namespace sfs {
namespace dense {

constexpr int kThreads = 256;
constexpr int kTile = 64;
constexpr int kTileK = 16;

template <typename T>
__device__ __forceinline__ void kernel(float* __restrict__ Y, const uint16_t* __restrict__ X,
                                       const uint16_t* __restrict__ W, int M, int N, int K) {
  __shared__ float xs[kTileK][kTile + 4];
  __shared__ float ws[kTileK][kTile + 4];
  const int tid = threadIdx.x;
  const int tx = tid & 15;  // 4 weight rows each
  const int ty = tid >> 4;  // 4 tokens each
  const int m0 = blockIdx.x * kTile;
  const int n0 = blockIdx.y * kTile;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;

  for (int k0 = 0; k0 < K; k0 += kTileK) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = tid + i * kThreads;  // 0..1023
      const int row = e >> 4;
      const int kk = e & 15;
      const int kg = k0 + kk;
      const int tok = m0 + row;
      const int wr = n0 + row;
      xs[kk][row] = (tok < M && kg < K) ? to_f32(T{}, X[static_cast<size_t>(tok) * K + kg]) : 0.f;
      ws[kk][row] = (wr < N && kg < K) ? to_f32(T{}, W[static_cast<size_t>(wr) * K + kg]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = xs[kk][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = ws[kk][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int tok = m0 + ty * 4 + i;
    if (tok >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int wr = n0 + tx * 4 + j;
      if (wr < N) Y[static_cast<size_t>(tok) * N + wr] = acc[i][j];
    }
  }
}

}  // namespace dense
}  // namespace sfs

// dense_bf16 and dense_f16: grid (ceil(M/64), ceil(N/64)), block 256.
extern "C" __global__ void __launch_bounds__(sfs::dense::kThreads)
    dense_bf16(float* __restrict__ Y, const uint16_t* __restrict__ X, const uint16_t* __restrict__ W, int M,
               int N, int K) {
  sfs::dense::kernel<sfs::BF16>(Y, X, W, M, N, K);
}

extern "C" __global__ void __launch_bounds__(sfs::dense::kThreads)
    dense_f16(float* __restrict__ Y, const uint16_t* __restrict__ X, const uint16_t* __restrict__ W, int M,
              int N, int K) {
  sfs::dense::kernel<sfs::F16>(Y, X, W, M, N, K);
}
