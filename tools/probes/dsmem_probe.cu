// dsmem_probe.cu: how long the prefill kernel's split-K sum (spmm_wg.cuh's
// cluster_sum) takes on its own, without the products before it: the
// question behind the 2–3 µs its phase takes in splitk_probe.cu's traces
// (docs/kernels.md §2.6).
//
// A grid of 128 CTAs (the most clusters of S that fit 128) of 128 threads,
// in clusters of S = 2, 3, 4, 6 and 8 along x, each CTA with 140 KB of
// dynamic shared memory (one a SM, as the r128 t64 tile's ring). Each CTA
// stores 2048 float4s of sums (the r128 t64 tile's 32 KB) to its shared
// memory, a cluster barrier publishes them, and CTA r adds the r-th S-th
// of them over the S CTAs in rank order, B float4s a thread at a time
// (their S loads all queued before the first add), then stores the sums:
//   - "none": not at all (a sum that never matches is the guard);
//   - "f32x4": one 16-byte store a float4, coalesced;
//   - "bf16": four 2-byte stores a float4, as cluster_sum stores a 16-bit
//     y (rows 8 apart, token pairs).
// "local" reads the CTA's own shared memory S times instead of the S CTAs'
// (ld.shared, not the cluster's network). "runtime S" is cluster_sum's own
// form of the loads: S an argument, the loop over all kMaxSplits = 8 ranks
// with the loads past S predicated off. A second cluster barrier keeps
// the shared memory alive. Each CTA's thread 0 stamps the global timer
// after the first barrier and after the second; the probe prints the
// median and the largest of those spans over the CTAs, and the launch's
// time (CUDA events, the median of 20), and checks every stored sum; the
// exit status is 1 if any is wrong.
//
// Build and run from the repository root:
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/dsmem tools/probes/dsmem_probe.cu && /tmp/dsmem
//
// Not part of the product or its tests.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../../kernels/cuda/spmm_wg.cuh"  // ld_dsmem4, kMaxSplits; gemv::map_rank, lds128
#include "probe_check.cuh"
#include "probe_clock.cuh"  // now

using sfs::gemv::map_rank;
using sfs::spmm_wg::kMaxSplits;
using sfs::spmm_wg::ld_dsmem4;

constexpr int kThreads = 128;
constexpr int kAll = 2048;                 // float4s of a CTA's sums (128 rows × 64 tokens)
constexpr int kSmem = 140 * 1024;          // one CTA a SM
constexpr float kNever = 1.2345e30f;       // no sum takes it

enum Store { kNone, kF32x4, kBF16 };

// ld_local loads the 16 bytes at shared::cta address addr.
__device__ __forceinline__ float4 ld_local(uint32_t addr) {
  float4 v;
  sfs::gemv::lds128(addr, v.x, v.y, v.z, v.w);
  return v;
}

// value is what CTA rank stores as component c of float4 e.
__host__ __device__ inline float value(int rank, int e, int c) { return static_cast<float>((rank + 1) * 0.25f + e * 4 + c); }

// sum is one CTA's part: publish, add its share over the S CTAs, store.
// kRuntime: S is the argument s_arg (the template's S is kMaxSplits, the
// loads past s_arg predicated off), as cluster_sum has it.
template <int S, int B, bool kLocal, Store kStore, bool kRuntime>
__global__ void __launch_bounds__(kThreads, 1) sum(float* y, uint16_t* y16, uint64_t* span, int s_arg) {
  const int ns = kRuntime ? s_arg : S;
  extern __shared__ uint4 smem4[];
  const uint32_t base = (static_cast<uint32_t>(__cvta_generic_to_shared(smem4)) + 1023) & ~1023u;
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  const int ct = threadIdx.x, cluster = blockIdx.x / ns;
  for (int e = ct; e < kAll; e += kThreads) {
    const uint32_t at = base + e * 16;
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "f"(value(r, e, 0)), "f"(value(r, e, 1)),
                 "f"(value(r, e, 2)), "f"(value(r, e, 3))
                 : "memory");
  }
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  const uint64_t t0 = now();
  const int share = (kAll + ns - 1) / ns;
  const int lo = static_cast<int>(r) * share, hi = min(kAll, lo + share);
  for (int e0 = lo + ct; e0 < hi; e0 += B * kThreads) {
    float4 v[B][S];
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const uint32_t at = base + (e0 + b * kThreads) * 16;
#pragma unroll
      for (int s = 0; s < S; ++s) {
        if (s < ns && e0 + b * kThreads < hi) v[b][s] = kLocal ? ld_local(at) : ld_dsmem4(map_rank(at, s));
      }
    }
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int e = e0 + b * kThreads;
      if (e >= hi) break;
      float4 t = v[b][0];
#pragma unroll
      for (int s = 1; s < S; ++s) {
        if (s < ns) t.x += v[b][s].x, t.y += v[b][s].y, t.z += v[b][s].z, t.w += v[b][s].w;
      }
      const size_t at = static_cast<size_t>(cluster) * kAll + e;
      if (kStore == kF32x4 || (kStore == kNone && t.x + t.y + t.z + t.w == kNever)) {
        reinterpret_cast<float4*>(y)[at] = t;
      } else if (kStore == kBF16) {
        // cluster_sum's pattern: rows 8 apart, tokens in pairs, a 64-token
        // tile row-major in tokens of 128 rows.
        const int w = (e % kThreads) >> 5, lane = e & 31, f = (e / kThreads) % 8, h = e / kThreads / 8;
        const int row = 64 * h + 16 * w + (lane >> 2), tok = 8 * f + 2 * (lane & 3);
        const float vals[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const size_t o = static_cast<size_t>(cluster) * 128 * 64 + static_cast<size_t>(tok + (i & 1)) * 128 + row + 8 * (i >> 1);
          y16[o] = static_cast<uint16_t>(__float_as_uint(vals[i]) >> 16);
        }
        if (e == lo) y[at * 4] = t.x;  // the check's witness
      }
    }
  }
  __syncwarp();
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
  if (ct == 0) span[blockIdx.x] = now() - t0;
}

// run launches sum<S, B, kLocal, kStore> (with kRuntime, sum<kMaxSplits,
// ...> with S its argument) on the most clusters of S that fit 128 CTAs,
// prints its spans, its launch time and its check, and returns the count
// of wrong sums.
template <int S, int B, bool kLocal, Store kStore, bool kRuntime = false>
long run(float* y, uint16_t* y16, uint64_t* span) {
  auto k = sum<kRuntime ? kMaxSplits : S, B, kLocal, kStore, kRuntime>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const int grid = 128 / S * S;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = S;
  at[0].val.clusterDim.y = 1;
  at[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmem;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  CK(cudaMemset(y, 0, static_cast<size_t>(grid) * kAll * 16));
  CK(cudaLaunchKernelEx(&cfg, k, y, y16, span, S));
  CK(cudaDeviceSynchronize());
  // The check: each stored float4's sum over the ranks ("none" stores
  // nothing, "bf16" the first component of one float4 a CTA).
  std::vector<float> got(static_cast<size_t>(grid) * kAll * 4);
  CK(cudaMemcpy(got.data(), y, got.size() * 4, cudaMemcpyDeviceToHost));
  long bad = 0;
  const int share = (kAll + S - 1) / S;
  for (int c = 0; c < grid / S; ++c) {
    for (int e = 0; e < kAll; ++e) {
      if (kStore == kNone || (kStore == kBF16 && e % share != 0)) continue;
      for (int comp = 0; comp < (kStore == kBF16 ? 1 : 4); ++comp) {
        float want = 0;
        for (int s = 0; s < S; ++s) want += value(kLocal ? e / share : s, e, comp);
        if (got[(static_cast<size_t>(c) * kAll + e) * 4 + comp] != want) ++bad;
      }
    }
  }
  std::vector<float> ms;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 20; ++i) {
    CK(cudaEventRecord(a));
    CK(cudaLaunchKernelEx(&cfg, k, y, y16, span, S));
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::vector<uint64_t> sp(grid);
  CK(cudaMemcpy(sp.data(), span, grid * 8, cudaMemcpyDeviceToHost));
  std::sort(sp.begin(), sp.end());
  std::sort(ms.begin(), ms.end());
  static const char* names[] = {"none", "f32x4", "bf16"};
  printf("S=%d B=%d %-7s%s store %-5s: sum phase median %6.2f us, largest %6.2f us; launch %6.2f us; bad %ld %s\n", S, B,
         kLocal ? "local" : "cluster", kRuntime ? " (runtime S)" : "", names[kStore], sp[grid / 2] / 1e3, sp.back() / 1e3, ms[10] * 1e3, bad,
         bad == 0 ? "ok" : "FAIL");
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return bad;
}

// sizes runs every form for clusters of S and returns the wrong sums.
template <int S>
long sizes(float* y, uint16_t* y16, uint64_t* span) {
  return run<S, 1, false, kNone>(y, y16, span) + run<S, 1, false, kF32x4>(y, y16, span) +
         run<S, 1, false, kBF16>(y, y16, span) + run<S, 1, false, kBF16, true>(y, y16, span) +
         run<S, 1, true, kBF16>(y, y16, span) + run<S, 4, false, kNone>(y, y16, span) +
         run<S, 4, false, kBF16>(y, y16, span);
}

int main() {
  float* y;
  uint16_t* y16;
  uint64_t* span;
  CK(cudaMalloc(&y, static_cast<size_t>(128) * kAll * 16));
  CK(cudaMalloc(&y16, static_cast<size_t>(128) * kAll * 8));
  CK(cudaMalloc(&span, 128 * 8));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs: split-K sums of a 128 x 64 tile (2048 float4s a CTA), 128 threads a CTA\n", prop.name,
         prop.multiProcessorCount);
  const long bad = sizes<2>(y, y16, span) + sizes<3>(y, y16, span) + sizes<4>(y, y16, span) +
                   sizes<6>(y, y16, span) + sizes<8>(y, y16, span);
  return bad == 0 ? 0 : 1;
}
