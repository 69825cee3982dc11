// tma_probe.cu: how fast the prefill kernel's producer streams its copies
// when nothing multiplies them: the ceiling of spmm_wg.cuh's stage loop on
// the narrow shapes (docs/kernels.md §2.6).
//
// 8B k/v at 1,024 tokens on r128 t64 tiles: 128 CTAs (8 row tiles × 16
// token tiles) of 256 threads, each streaming its tile's K through the
// kernel's copies (sfs::spmm_wg::tma2d) into a ring of ST slots, one
// producer thread as in the kernel, in stages of C = 64 or 128 columns
// (the 64-column stages as the 256-row tiles take them, the 128-column ones
// as the 128-row tiles do: activations in C/64 boxes of 64 tokens × 64
// columns, packed values 128 rows × C/2 in the C-byte swizzle, meta 128
// rows × C/32 words), varying one thing at a time:
//   - the stage width and the ring: 4, 8 or 12 slots of 64 columns, 3, 4
//     or 6 of 128;
//   - the copies: all three, or the activations, the packed values or the
//     meta alone, or activations and packed values;
//   - the release: one consumer thread arriving on `empty` as each slot
//     lands (the kernel's: one a consumer warpgroup), or all 128;
//   - the CTAs: all 128, or 64 (the first 8 token tiles).
// Per row: the median over the CTAs of µs per 64 columns of K (the
// producer's first copy to the consumer's last landing), the launch
// (timeit: batches of 20 behind a large copy, median µs a launch), and the
// bytes a launch moves over the launch's time.
//
// Build and run from the repository root:
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/tma tools/probes/tma_probe.cu -lcuda && /tmp/tma
//
// Not part of the product or its tests.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_spmm.cuh"  // encode, and through it spmm_wg.cuh
#include "probe_clock.cuh"  // now
#include "probe_time.cuh"

using sfs::spmm_wg::TensorMap;

constexpr int kM = 1024, kN = 1024, kK = 4096;
constexpr int kRows = 128, kTokens = 64, kRowTiles = kN / kRows;
enum Copies { kX = 1, kPacked = 2, kMeta = 4 };

// Geometry of a stage of C columns of an r128 t64 tile (spmm_wg.cuh's
// Shape with kCols = C).
template <int C>
struct Stage {
  static constexpr int kXBytes = kTokens * C * 2, kPBytes = kRows * C, kUBytes = kRows * C / 8;
  static constexpr int kBytes = kXBytes + kPBytes + kUBytes, kCount = kK / C;
  static constexpr uint32_t bytes(int copies) {
    return ((copies & kX) ? kXBytes : 0) + ((copies & kPacked) ? kPBytes : 0) + ((copies & kMeta) ? kUBytes : 0);
  }
};

// Maps are one stage width's tensor maps.
struct StageMaps {
  TensorMap tx, tp, tu;
};

// stream is one CTA's stages: the producer (thread 128) copies, the
// consumers wait for each slot and release it; span[cta] gets the
// producer's first copy and the last landing.
template <int C, int ST, int kCopies, bool kAllArrive>
__global__ void __launch_bounds__(256, 1)
    stream(const __grid_constant__ TensorMap tx, const __grid_constant__ TensorMap tp,
           const __grid_constant__ TensorMap tu, uint64_t* span) {
  using G = Stage<C>;
  extern __shared__ uint4 smem4[];
  const uint32_t base = (static_cast<uint32_t>(__cvta_generic_to_shared(smem4)) + 1023) & ~1023u;
  const uint32_t bars = base + ST * G::kBytes;  // full[ST], then empty[ST]
  const int tid = threadIdx.x;
  const int n0 = (blockIdx.x % kRowTiles) * kRows, m0 = (blockIdx.x / kRowTiles) * kTokens;
  if (tid == 0) {
    for (int i = 0; i < ST; ++i) {
      sfs::gemv::mbar_init(bars + 8 * i, 1);
      sfs::gemv::mbar_init(bars + 8 * (ST + i), kAllArrive ? 128 : 1);
    }
    sfs::gemv::proxy_fence();
  }
  __syncthreads();
  if (tid == 128) {
    span[2 * blockIdx.x] = now();
    for (int q = 0; q < G::kCount; ++q) {
      const uint32_t s = q % ST;
      if (q >= ST) sfs::gemv::mbar_wait(bars + 8 * (ST + s), (q / ST - 1) & 1);
      const uint32_t st = base + s * G::kBytes, full = bars + 8 * s;
      sfs::gemv::mbar_expect(full, G::bytes(kCopies));
      if (kCopies & kX) {
        for (int j = 0; j < C / 64; ++j) sfs::spmm_wg::tma2d(st + j * kTokens * 128, tx, C * q + 64 * j, m0, full);
      }
      if (kCopies & kPacked) sfs::spmm_wg::tma2d(st + G::kXBytes, tp, C / 2 * q, n0, full);
      if (kCopies & kMeta) sfs::spmm_wg::tma2d(st + G::kXBytes + G::kPBytes, tu, n0, C / 32 * q, full);
    }
  } else if (tid < 128) {
    for (int q = 0; q < G::kCount; ++q) {
      const uint32_t s = q % ST;
      sfs::gemv::mbar_wait(bars + 8 * s, (q / ST) & 1);
      if (kAllArrive || tid == 0) sfs::gemv::mbar_arrive(bars + 8 * (ST + s));
    }
    if (tid == 0) span[2 * blockIdx.x + 1] = now();
  }
}

// run times stream<C, ST, kCopies, kAllArrive> on ctas CTAs and prints its row.
template <int C, int ST, int kCopies, bool kAllArrive>
void run(const StageMaps& m, const Busy& busy, uint64_t* span, int ctas) {
  using G = Stage<C>;
  auto k = stream<C, ST, kCopies, kAllArrive>;
  const int smem = 1024 + ST * G::kBytes + 16 * ST;
  static_assert(1024 + ST * G::kBytes + 16 * ST <= 232448, "the ring fits the shared memory");
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const float us = timeit(busy, [&](int) { k<<<ctas, 256, smem>>>(m.tx, m.tp, m.tu, span); });
  std::vector<uint64_t> t(2 * ctas);
  CK(cudaMemcpy(t.data(), span, t.size() * 8, cudaMemcpyDeviceToHost));
  std::vector<double> per;  // µs per 64 columns
  for (int c = 0; c < ctas; ++c) per.push_back((t[2 * c + 1] - t[2 * c]) / 1e3 / (kK / 64));
  std::sort(per.begin(), per.end());
  const double bytes = static_cast<double>(ctas) * G::kCount * G::bytes(kCopies);
  printf("C=%3d ST=%2d copies %-7s%-7s%-5s release %-4s CTAs %3d: %.3f us per 64 columns (median CTA, %.3f–%.3f), "
         "launch %6.2f us, %5.2f TB/s\n",
         C, ST, (kCopies & kX) ? "x" : "", (kCopies & kPacked) ? "packed" : "", (kCopies & kMeta) ? "meta" : "",
         kAllArrive ? "all" : "one", ctas, per[ctas / 2], per.front(), per.back(), us, bytes / us / 1e6);
}

int main() {
  CK(cudaFree(nullptr));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs: the prefill kernel's copies alone, 8B k/v at %d tokens on r128 t64\n", prop.name,
         prop.multiProcessorCount, kM);
  void *x, *p, *u;
  CK(cudaMalloc(&x, static_cast<size_t>(kM) * kK * 2));
  CK(cudaMalloc(&p, static_cast<size_t>(kN) * kK));
  CK(cudaMalloc(&u, static_cast<size_t>(kN) * kK / 8));
  CK(cudaMemset(x, 0x3c, static_cast<size_t>(kM) * kK * 2));
  CK(cudaMemset(p, 0x3c, static_cast<size_t>(kN) * kK));
  CK(cudaMemset(u, 0x44, static_cast<size_t>(kN) * kK / 8));
  const TensorMap tx = encode(x, 2, kK, kM, 64, kTokens, CU_TENSOR_MAP_SWIZZLE_128B);
  const StageMaps m64{tx, encode(p, 2, kK / 2, kN, 32, kRows, CU_TENSOR_MAP_SWIZZLE_64B),
                      encode(u, 4, kN, kK / 32, kRows, 2, CU_TENSOR_MAP_SWIZZLE_NONE)};
  const StageMaps m128{tx, encode(p, 2, kK / 2, kN, 64, kRows, CU_TENSOR_MAP_SWIZZLE_128B),
                       encode(u, 4, kN, kK / 32, kRows, 4, CU_TENSOR_MAP_SWIZZLE_NONE)};
  uint64_t* span;
  CK(cudaMalloc(&span, 2 * 128 * 8));
  Busy busy = make_busy(256 << 20);
  const int all = kRowTiles * (kM / kTokens);
  run<64, 8, kX | kPacked | kMeta, true>(m64, busy, span, all);
  run<64, 8, kX | kPacked | kMeta, false>(m64, busy, span, all);
  run<64, 4, kX | kPacked | kMeta, false>(m64, busy, span, all);
  run<64, 12, kX | kPacked | kMeta, false>(m64, busy, span, all);
  run<64, 8, kX, false>(m64, busy, span, all);
  run<64, 8, kPacked, false>(m64, busy, span, all);
  run<64, 8, kMeta, false>(m64, busy, span, all);
  run<64, 8, kX | kPacked, false>(m64, busy, span, all);
  run<64, 8, kX | kPacked | kMeta, false>(m64, busy, span, all / 2);
  run<128, 6, kX | kPacked | kMeta, false>(m128, busy, span, all);
  run<128, 4, kX | kPacked | kMeta, false>(m128, busy, span, all);
  run<128, 3, kX | kPacked | kMeta, false>(m128, busy, span, all);
  run<128, 6, kPacked, false>(m128, busy, span, all);
  run<128, 6, kX, false>(m128, busy, span, all);
  return 0;
}
