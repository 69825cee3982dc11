// probe_trace.cuh: the kernels' trace points for the standalone probes
// (gemv_probe.cu, pdl_probe.cu, splitk_probe.cu). Include it before the
// kernel header: it defines SFS_GEMV_TRACE(point) and SFS_SPMM_TRACE(point)
// to stamp the global timer when thread 0 of each CTA reaches a point
// (kernels/cuda/gemv.cuh and spmm_wg.cuh list them), and
// print_trace prints, for the last launch of ctas CTAs, each point's min /
// median / max over the CTAs in µs after the first CTA's entry.
#pragma once

#include <algorithm>
#include <cstdio>
#include <vector>

#include "probe_check.cuh"  // CK

constexpr int kTracePoints = 6;
__device__ unsigned long long g_trace[1 << 14][kTracePoints];
#define SFS_GEMV_TRACE(point)                                  \
  do {                                                         \
    if (threadIdx.x == 0) {                                    \
      unsigned long long t_;                                   \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));   \
      g_trace[blockIdx.y * gridDim.x + blockIdx.x][point] = t_; \
    }                                                          \
  } while (0)
#define SFS_SPMM_TRACE(point) SFS_GEMV_TRACE(point)

// print_trace prints the spread of each trace point the last launch of
// ctas CTAs reached (stamps older than its first entry are an earlier
// launch's, and left out).
inline void print_trace(int ctas) {
  std::vector<unsigned long long> tr(static_cast<size_t>(ctas) * kTracePoints);
  CK(cudaMemcpyFromSymbol(tr.data(), g_trace, tr.size() * 8));
  unsigned long long t0 = ~0ull;
  for (int c = 0; c < ctas; ++c) t0 = std::min(t0, tr[c * kTracePoints]);
  for (int pt = 0; pt < kTracePoints; ++pt) {
    std::vector<float> v;
    for (int c = 0; c < ctas; ++c) {
      const unsigned long long t = tr[c * kTracePoints + pt];
      if (t >= t0 && t - t0 < 1000000) v.push_back((t - t0) / 1e3f);
    }
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    printf("  [%d] %.2f/%.2f/%.2f", pt, v.front(), v[v.size() / 2], v.back());
  }
  printf("\n");
}
