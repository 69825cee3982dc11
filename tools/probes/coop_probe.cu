// coop_probe.cu: the warpgroup form's split-K launches (kernels/cuda/gemv_wg.cuh)
// with the slices added up by the last one (tickets) and shared by all of
// them in a cooperative launch (finish_coop), side by side, on the GPU
// machine without Go:
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/coop tools/probes/coop_probe.cu && /tmp/coop
//
// For each plan: µs per call of each (median of 7 batches of 20, weights
// rotated through 8 copies), and whether their outputs are the same bits.
// Not part of the product or its tests.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../../kernels/cuda/gemv_wg.cuh"
#include "probe_time.cuh"  // CK, Busy, timeit

#include "probe_wg.cuh"     // wg_t*_s*

int main() {
  const int kRot = 8;
  const size_t maxPack = 8192ull * 28672;
  std::vector<uint16_t> h(maxPack / 2);
  for (size_t i = 0; i < h.size(); ++i) h[i] = 0x3c00 + ((i * 2654435761u >> 7) & 0x3ff);
  std::vector<uint16_t*> pack(kRot);
  std::vector<uint32_t*> meta(kRot);
  for (int r = 0; r < kRot; ++r) {
    CK(cudaMalloc(&pack[r], maxPack));
    CK(cudaMalloc(&meta[r], maxPack / 8));
    CK(cudaMemcpy(pack[r], h.data(), maxPack, cudaMemcpyHostToDevice));
    CK(cudaMemset(meta[r], 0x44, maxPack / 8));
  }
  std::vector<uint16_t> hx(64 * 28672);
  for (size_t i = 0; i < hx.size(); ++i) hx[i] = 0x3800 + ((i * 40503u >> 5) & 0x3ff);
  uint16_t* x;
  float *y0, *y1;
  char* w;
  CK(cudaMalloc(&x, hx.size() * 2));
  CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&y0, 64 * 28672 * 4));
  CK(cudaMalloc(&y1, 64 * 28672 * 4));
  const size_t counters = 8192;
  CK(cudaMalloc(&w, counters * 4 + 32 * 64 * 28672ull * 4));
  CK(cudaMemset(w, 0, counters * 4));
  float* work = reinterpret_cast<float*>(w + counters * 4);
  const Busy busy = make_busy(256 << 20);
  for (auto fn : {wg_t1_s4, wg_t2_s4, wg_t8_s2})
    CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  struct Case { const char* name; int N, K, M, slices, xw; };
  const Case cases[] = {
      {"k_v", 1024, 4096, 64, 4, 0},    {"k_v", 1024, 4096, 64, 8, 0},     {"k_v", 1024, 4096, 64, 16, 0},
      {"k_v", 1024, 4096, 16, 8, 0},    {"k_v", 1024, 4096, 16, 16, 0},    {"k_v", 1024, 4096, 1, 16, 0},
      {"q_o", 4096, 4096, 64, 4, 6},    {"q_o", 4096, 4096, 64, 4, 0},     {"q_o", 4096, 4096, 16, 4, 8},
      {"q_o", 4096, 4096, 1, 4, 8},     {"down", 4096, 14336, 64, 4, 6},   {"70b_kv", 1024, 8192, 64, 8, 6},
      {"70b_kv", 1024, 8192, 64, 16, 0}, {"70b_down", 8192, 28672, 64, 2, 6},
  };
  for (const Case& c : cases) {
    const int NT = c.M <= 8 ? 1 : c.M <= 16 ? 2 : 8;
    const int sc = NT == 8 ? 2 : 4;
    auto fn = NT == 1 ? wg_t1_s4 : NT == 2 ? wg_t2_s4 : wg_t8_s2;
    const int chunks = c.K / 64, cps = (chunks + c.slices - 1) / c.slices;
    const bool windowed = c.xw > 0 && c.xw < cps;
    const int xcap = windowed ? c.xw : (cps + sc - 1) / sc * sc;
    const int depth = sc == 2 ? 4 : 3;
    const int smem = 4 * depth * (32 * sc * 64 + 2 * sc * 128) + 1024 + (windowed ? 2 : 1) * xcap * 8 * NT * 128 +
                     2 * depth * 8;
    dim3 grid((c.N / 32 + 3) / 4, c.slices);
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, 160, smem));
    if (smem > 227 * 1024 || int(grid.x * grid.y) > per_sm * sms) {
      printf("%-8s m=%-2d s%-2d xw%d: %d bytes, %d CTAs for %d resident: skipped\n", c.name, c.M, c.slices,
             windowed ? c.xw : 0, smem, grid.x * grid.y, per_sm * sms);
      continue;
    }
    float us[2];
    for (int mode = 0; mode < 2; ++mode) {
      float* y = mode ? y1 : y0;
      int xwin = windowed ? c.xw : 0, M = c.M, N = c.N, K = c.K;
      auto launch = [&](int i) {
        const uint16_t* P = pack[i % kRot];
        const uint32_t* U = meta[i % kRot];
        if (mode == 0) {
          fn<<<grid, 160, smem>>>(y, x, P, U, work, M, N, K, xwin, 0);
        } else {
          int coop = 1;
          void* args[] = {&y, &x, &P, &U, &work, &M, &N, &K, &xwin, &coop};
          CK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(fn), grid, dim3(160), args, smem, 0));
        }
      };
      us[mode] = timeit(busy, launch);
      launch(0);
      CK(cudaDeviceSynchronize());
    }
    std::vector<float> a(c.M * c.N), b(c.M * c.N);
    CK(cudaMemcpy(a.data(), y0, a.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), y1, b.size() * 4, cudaMemcpyDeviceToHost));
    printf("%-8s m=%-2d s%-2d xw%-2d tickets %6.2f us  coop %6.2f us  ratio %.3f  %s\n", c.name, c.M, c.slices,
           windowed ? c.xw : 0, us[0], us[1], us[1] / us[0],
           memcmp(a.data(), b.data(), a.size() * 4) == 0 ? "bit-identical" : (c.M < 4 ? "differ (m < 4: another order)" : "DIFFER"));
  }
  return 0;
}
