// tma_probe.cu: how fast the prefill kernel's producer streams its copies
// when nothing multiplies them: the ceiling of spmm_wg.cuh's stage loop on
// the narrow shapes, where the kernel takes about 0.2 µs a stage of r128
// t64 with its products and 0.175 without (docs/kernels.md §2.6), and
// neither a deeper ring nor one stream of copies fewer moves it much.
//
// 8B k/v at 1,024 tokens on r128 t64 tiles: 128 CTAs (8 row tiles × 16
// token tiles) of 256 threads, each streaming its tile's 64 stages of K
// through the kernel's tensor maps and copies (sfs::spmm_wg::tma2d:
// activations 64 tokens × 64 columns, packed values 128 rows × 32, meta
// 128 rows × 2 words) into a ring of ST slots of Shape<1, 64>, one
// producer thread as in the kernel, varying one thing at a time:
//   - the ring: 4, 8 (the kernel's) or 12 slots;
//   - the copies: all three, or the activations, the packed values or the
//     meta alone, or activations and packed values;
//   - the release: one consumer thread arriving on `empty` as each slot
//     lands, or all 128 consumer threads arriving (the kernel's);
//   - the CTAs: all 128, or 64 (the first 8 token tiles).
// Per row: the median over the CTAs of µs a stage (the producer's first
// copy to the consumer's last landing, over the stages), the launch
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
using Sh = sfs::spmm_wg::Shape<1, 64>;

constexpr int kM = 1024, kN = 1024, kK = 4096;
constexpr int kRowTiles = kN / Sh::kRows, kStages = kK / 64;
enum Copies { kX = 1, kPacked = 2, kMeta = 4 };

// stream is one CTA's stages: the producer (thread 128) copies, the
// consumers wait for each slot and release it; span[cta] gets the
// producer's first copy and the last landing.
template <int ST, int kCopies, bool kAllArrive>
__global__ void __launch_bounds__(256, 1)
    stream(const __grid_constant__ TensorMap tx, const __grid_constant__ TensorMap tp,
           const __grid_constant__ TensorMap tu, uint64_t* span) {
  extern __shared__ uint4 smem4[];
  const uint32_t base = (static_cast<uint32_t>(__cvta_generic_to_shared(smem4)) + 1023) & ~1023u;
  const uint32_t bars = base + ST * Sh::kStageBytes;  // full[ST], then empty[ST]
  const int tid = threadIdx.x;
  const int n0 = (blockIdx.x % kRowTiles) * Sh::kRows, m0 = (blockIdx.x / kRowTiles) * 64;
  constexpr uint32_t kBytes =
      ((kCopies & kX) ? Sh::kBBytes : 0) + ((kCopies & kPacked) ? Sh::kABytes : 0) + ((kCopies & kMeta) ? Sh::kMetaBytes : 0);
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
    for (int q = 0; q < kStages; ++q) {
      const uint32_t s = q % ST;
      if (q >= ST) sfs::gemv::mbar_wait(bars + 8 * (ST + s), (q / ST - 1) & 1);
      const uint32_t st = base + s * Sh::kStageBytes, full = bars + 8 * s;
      sfs::gemv::mbar_expect(full, kBytes);
      if (kCopies & kX) sfs::spmm_wg::tma2d(st, tx, 64 * q, m0, full);
      if (kCopies & kPacked) sfs::spmm_wg::tma2d(st + Sh::kBBytes, tp, 32 * q, n0, full);
      if (kCopies & kMeta) sfs::spmm_wg::tma2d(st + Sh::kBBytes + Sh::kABytes, tu, n0, 2 * q, full);
    }
  } else if (tid < 128) {
    for (int q = 0; q < kStages; ++q) {
      const uint32_t s = q % ST;
      sfs::gemv::mbar_wait(bars + 8 * s, (q / ST) & 1);
      if (kAllArrive || tid == 0) sfs::gemv::mbar_arrive(bars + 8 * (ST + s));
    }
    if (tid == 0) span[2 * blockIdx.x + 1] = now();
  }
}

// run times stream<ST, kCopies, kAllArrive> on ctas CTAs and prints its row.
template <int ST, int kCopies, bool kAllArrive>
void run(const Maps& m, const Busy& busy, uint64_t* span, int ctas) {
  auto k = stream<ST, kCopies, kAllArrive>;
  const int smem = 1024 + ST * Sh::kStageBytes + 16 * ST;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const float us = timeit(busy, [&](int) { k<<<ctas, 256, smem>>>(m.tx, m.tp, m.tu, span); });
  std::vector<uint64_t> t(2 * ctas);
  CK(cudaMemcpy(t.data(), span, t.size() * 8, cudaMemcpyDeviceToHost));
  std::vector<double> per;
  for (int c = 0; c < ctas; ++c) per.push_back((t[2 * c + 1] - t[2 * c]) / 1e3 / kStages);
  std::sort(per.begin(), per.end());
  const double bytes = static_cast<double>(ctas) * kStages *
                       (((kCopies & kX) ? Sh::kBBytes : 0) + ((kCopies & kPacked) ? Sh::kABytes : 0) +
                        ((kCopies & kMeta) ? Sh::kMetaBytes : 0));
  printf("ST=%2d copies %-7s%-7s%-5s release %-4s CTAs %3d: %.3f us a stage (median CTA, %.3f–%.3f), launch %6.2f us, %5.2f TB/s\n",
         ST, (kCopies & kX) ? "x" : "", (kCopies & kPacked) ? "packed" : "", (kCopies & kMeta) ? "meta" : "",
         kAllArrive ? "all" : "one", ctas, per[ctas / 2], per.front(), per.back(), us, bytes / us / 1e6);
}

int main() {
  CK(cudaFree(nullptr));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs: the prefill kernel's copies alone, 8B k/v at %d tokens on r128 t64 (%d-byte stages)\n", prop.name,
         prop.multiProcessorCount, kM, Sh::kStageBytes);
  void *x, *p, *u;
  CK(cudaMalloc(&x, static_cast<size_t>(kM) * kK * 2));
  CK(cudaMalloc(&p, static_cast<size_t>(kN) * kK));
  CK(cudaMalloc(&u, static_cast<size_t>(kN) * kK / 8));
  CK(cudaMemset(x, 0x3c, static_cast<size_t>(kM) * kK * 2));
  CK(cudaMemset(p, 0x3c, static_cast<size_t>(kN) * kK));
  CK(cudaMemset(u, 0x44, static_cast<size_t>(kN) * kK / 8));
  Maps m;
  m.tx = encode(x, 2, kK, kM, 64, 64, CU_TENSOR_MAP_SWIZZLE_128B);
  m.tp = encode(p, 2, kK / 2, kN, 32, Sh::kRows, CU_TENSOR_MAP_SWIZZLE_64B);
  m.tu = encode(u, 4, kN, kK / 32, Sh::kRows, 2, CU_TENSOR_MAP_SWIZZLE_NONE);
  uint64_t* span;
  CK(cudaMalloc(&span, 2 * 128 * 8));
  Busy busy = make_busy(256 << 20);
  const int all = kRowTiles * (kM / 64);
  run<8, kX | kPacked | kMeta, true>(m, busy, span, all);
  run<8, kX | kPacked | kMeta, false>(m, busy, span, all);
  run<4, kX | kPacked | kMeta, false>(m, busy, span, all);
  run<12, kX | kPacked | kMeta, false>(m, busy, span, all);
  run<8, kX, false>(m, busy, span, all);
  run<8, kPacked, false>(m, busy, span, all);
  run<8, kMeta, false>(m, busy, span, all);
  run<8, kX | kPacked, false>(m, busy, span, all);
  run<8, kX | kPacked | kMeta, false>(m, busy, span, all / 2);
  run<12, kX | kPacked | kMeta, false>(m, busy, span, all / 2);
  return 0;
}
