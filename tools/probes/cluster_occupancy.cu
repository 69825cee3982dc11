// cluster_occupancy.cu: how many thread-block clusters of each size the GPU
// runs at once with one CTA per SM, and where it puts them: the question
// behind a slice sum in a cluster's shared memory for more than two slices
// (docs/kernels.md) and behind launchplan.PrefillClusterCTAs.
//
// For cluster sizes 1 to 8 and 16 (16 is non-portable) and dynamic
// shared memory of 50, 100, 150 and 200 KB, a kernel of 160 threads (the
// warpgroup form's block) reports cudaOccupancyMaxActiveClusters; then a
// grid of 128 CTAs (16 row blocks × 8 slices) in clusters of 8 and of 4
// along y is launched with 200 and with 110 KB, each CTA spinning 50 µs
// and recording its SM, start and end (globaltimer): one wave if every
// start precedes every end. Build and run from the repository root:
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/cl tools/probes/cluster_occupancy.cu && /tmp/cl
//
// Not part of the product or its tests.
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#include "probe_clock.cuh"  // now

#define CK(x)                                                                   \
  do {                                                                          \
    cudaError_t e_ = (x);                                                       \
    if (e_ != cudaSuccess) {                                                    \
      printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

// spin records each CTA's SM, start and end, spinning spin_ns between.
__global__ void spin(uint64_t* out, uint64_t spin_ns) {
  extern __shared__ uint4 smem[];
  const uint64_t t0 = now();
  if (threadIdx.x == 0) {
    uint32_t sm;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
    smem[0].x = sm;
    while (now() - t0 < spin_ns) {
    }
    const int b = blockIdx.x + gridDim.x * blockIdx.y;
    out[3 * b] = sm;
    out[3 * b + 1] = t0;
    out[3 * b + 2] = now();
  }
}

// cluster_config returns a launch of grid CTAs of 160 threads with kb KB
// of dynamic shared memory in clusters of (1, c, 1), its attribute in *at.
static cudaLaunchConfig_t cluster_config(dim3 grid, int kb, int c, cudaLaunchAttribute* at) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(160, 1, 1);
  cfg.dynamicSmemBytes = kb * 1024;
  at->id = cudaLaunchAttributeClusterDimension;
  at->val.clusterDim.x = 1;
  at->val.clusterDim.y = c;
  at->val.clusterDim.z = 1;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  return cfg;
}

int main() {
  CK(cudaFuncSetAttribute(spin, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024));
  CK(cudaFuncSetAttribute(spin, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  printf("max active clusters (160 threads, 1 CTA each on as many SMs as it takes):\n");
  printf("%8s", "smem KB");
  const int sizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 16};
  for (int c : sizes) printf(" %6s%-2d", "cl", c);
  printf("\n");
  for (int kb : {50, 100, 150, 200}) {
    printf("%8d", kb);
    for (int c : sizes) {
      cudaLaunchAttribute at;
      // A grid of whole clusters: the cluster size divides it.
      const cudaLaunchConfig_t cfg = cluster_config(dim3(1, 16 * c, 1), kb, c, &at);
      int n = -1;
      cudaError_t e = cudaOccupancyMaxActiveClusters(&n, spin, &cfg);
      if (e != cudaSuccess) {
        printf(" %8s", cudaGetErrorName(e));
        cudaGetLastError();
      } else {
        printf(" %8d", n);
      }
    }
    printf("\n");
  }
  // One launch of 16 row blocks × 8 slices in clusters of (1, 8, 1) and
  // (1, 4, 1), with 200 and 110 KB.
  for (int kb : {200, 110}) for (int c : {8, 4}) {
    const int gx = 16, gy = 8, n = gx * gy;
    uint64_t* d;
    CK(cudaMalloc(&d, 3 * n * sizeof(uint64_t)));
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t cfg = cluster_config(dim3(gx, gy, 1), kb, c, &at);
    CK(cudaLaunchKernelEx(&cfg, spin, d, (uint64_t)50000));
    CK(cudaDeviceSynchronize());
    std::vector<uint64_t> h(3 * n);
    CK(cudaMemcpy(h.data(), d, h.size() * 8, cudaMemcpyDeviceToHost));
    uint64_t s0 = ~0ull, lastStart = 0, firstEnd = ~0ull, lastEnd = 0;
    for (int b = 0; b < n; ++b) {
      s0 = std::min(s0, h[3 * b + 1]);
      lastStart = std::max(lastStart, h[3 * b + 1]);
      firstEnd = std::min(firstEnd, h[3 * b + 2]);
      lastEnd = std::max(lastEnd, h[3 * b + 2]);
    }
    std::vector<int> sms;
    for (int b = 0; b < n; ++b) sms.push_back(static_cast<int>(h[3 * b]));
    std::sort(sms.begin(), sms.end());
    int most = 0;
    for (size_t i = 0; i < sms.size(); ++i) most = std::max(most, static_cast<int>(std::count(sms.begin(), sms.end(), sms[i])));
    const int distinct = static_cast<int>(std::unique(sms.begin(), sms.end()) - sms.begin());
    printf("grid (%d, %d) clusters (1, %d, 1), %d KB: %d distinct SMs (at most %d CTAs on one), last start %.1f µs, first end %.1f µs, "
           "last end %.1f µs (%s)\n",
           gx, gy, c, kb, distinct, most, (lastStart - s0) / 1e3, (firstEnd - s0) / 1e3, (lastEnd - s0) / 1e3,
           lastStart < firstEnd ? "one wave" : "more than one wave");
    // The SMs of each cluster (blockIdx.x is the cluster's row block).
    if (c == 8 && kb == 110) {
      for (int x = 0; x < gx; ++x) {
        printf("  cluster %2d:", x);
        for (int y = 0; y < gy; ++y) printf(" %3d", static_cast<int>(h[3 * (x + gx * y)]));
        printf("\n");
      }
    }
    CK(cudaFree(d));
  }
  return 0;
}
