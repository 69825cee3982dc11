// probe_spmm.cuh: the operands of the prefill probes (spmm_wg_probe.cu,
// splitk_probe.cu): a random M × N × K problem with random valid meta
// (make), optionally its f32 reference product by the tiled mma.sp kernel
// (spmm.cuh), and the tensor maps of spmm_wg.cuh's TensorMap (encode).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "../../kernels/cuda/spmm.cuh"
#include "../../kernels/cuda/spmm_wg.cuh"
#include "probe_check.cuh"

template <typename T>
__global__ void ref_kernel(float* Y, const uint16_t* X, const uint16_t* P, const uint32_t* U, int M, int N, int K) {
  sfs::spmm::kernel<T>(Y, X, P, U, M, N, K);
}

using sfs::spmm_wg::TensorMap;

// encode makes a 2-D tensor map of rows × cols elements of `bytes` bytes
// (row stride cols·bytes), box bw × bh, with the given swizzle.
inline TensorMap encode(const void* ptr, int bytes, uint64_t cols, uint64_t rows, uint32_t bw, uint32_t bh,
                        CUtensorMapSwizzle sw) {
  TensorMap tm;
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {cols * bytes};
  const cuuint32_t box[2] = {bw, bh};
  const cuuint32_t es[2] = {1, 1};
  CUresult r = cuTensorMapEncodeTiled(reinterpret_cast<CUtensorMap*>(&tm),
                                      bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16 : CU_TENSOR_MAP_DATA_TYPE_UINT32, 2,
                                      const_cast<void*>(ptr), dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, sw,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "cuTensorMapEncodeTiled: %d\n", r);
    exit(1);
  }
  return tm;
}

// Maps are the three tensor maps of a product on tile Shape<NWG, BN>,
// with the boxes spmm_wg.cuh's TensorMap gives for the tile's kCols.
struct Maps {
  TensorMap tx, tp, tu;
};
template <int NWG, int BN>
inline Maps encode_maps(const void* X, const void* P, const void* U, int M, int N, int K) {
  using Sh = sfs::spmm_wg::Shape<NWG, BN>;
  return Maps{encode(X, 2, K, M, 64, BN, CU_TENSOR_MAP_SWIZZLE_128B),
              encode(P, 2, K / 2, N, Sh::kCols / 2, Sh::kRows,
                     Sh::kCols == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B),
              encode(U, 4, N, K / 32, Sh::kRows, Sh::kKTiles, CU_TENSOR_MAP_SWIZZLE_NONE)};
}

// bits16 returns the raw bits of v in the element type (round to nearest even).
inline uint16_t bits16(bool f16, float v) {
  if (f16) {
    __half h = __float2half_rn(v);
    uint16_t r;
    memcpy(&r, &h, 2);
    return r;
  }
  uint32_t u;
  memcpy(&u, &v, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
inline float f32of(bool f16, uint16_t b) {
  if (f16) {
    __half h;
    memcpy(&h, &b, 2);
    return __half2float(h);
  }
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float v;
  memcpy(&v, &u, 4);
  return v;
}

struct Problem {
  int M, N, K;
  uint16_t *X, *P, *B;
  uint32_t* U;
  float* ref;
  void* Y;
};

inline Problem make(std::mt19937& rng, bool f16, int M, int N, int K, bool withRef) {
  Problem p{M, N, K};
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<uint16_t> x(static_cast<size_t>(M) * K), w(static_cast<size_t>(N) * K / 2), b(N);
  for (auto& v : x) v = bits16(f16, nd(rng));
  for (auto& v : w) v = bits16(f16, nd(rng) * 0.05f);
  for (auto& v : b) v = bits16(f16, nd(rng));
  static const uint32_t nib[6] = {0x4, 0x8, 0xC, 0x9, 0xD, 0xE};
  std::vector<uint32_t> u(static_cast<size_t>(N) * K / 32);
  for (auto& v : u) {
    v = 0;
    for (int i = 0; i < 8; ++i) v |= nib[rng() % 6] << (4 * i);
  }
  CK(cudaMalloc(&p.X, x.size() * 2));
  CK(cudaMalloc(&p.P, w.size() * 2));
  CK(cudaMalloc(&p.B, b.size() * 2));
  CK(cudaMalloc(&p.U, u.size() * 4));
  CK(cudaMalloc(&p.Y, static_cast<size_t>(M) * N * 4));
  CK(cudaMemcpy(p.X, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(p.P, w.data(), w.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(p.B, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(p.U, u.data(), u.size() * 4, cudaMemcpyHostToDevice));
  p.ref = nullptr;
  if (withRef) {
    CK(cudaMalloc(&p.ref, static_cast<size_t>(M) * N * 4));
    dim3 grid((M + 63) / 64, (N + 63) / 64);
    if (f16) {
      ref_kernel<sfs::F16><<<grid, 128>>>(p.ref, p.X, p.P, p.U, M, N, K);
    } else {
      ref_kernel<sfs::BF16><<<grid, 128>>>(p.ref, p.X, p.P, p.U, M, N, K);
    }
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
  }
  return p;
}

inline void release(Problem& p) {
  CK(cudaFree(p.X));
  CK(cudaFree(p.P));
  CK(cudaFree(p.B));
  CK(cudaFree(p.U));
  CK(cudaFree(p.Y));
  if (p.ref) CK(cudaFree(p.ref));
}
