// floor_probe.cu: the floor under any kernel of a decode-size sparse
// product, on the GPU machine without Go:
//
//   nvcc -gencode=arch=compute_90,code=sm_90 -O3 -std=c++17 -o /tmp/floor tools/probes/floor_probe.cu && /tmp/floor
//
// For each Llama-3 projection and token count it times, with the weights
// rotated so that L2 holds none of them (µs per call, median of 7 batches
// of 20 behind a large copy, as probe_time.cuh times every probe):
//
//   empty    an empty kernel of one CTA per SM: the launch and drain alone;
//   read     the fastest of several grids of a kernel that only reads the
//            product's input bytes (packed values, metadata, activations)
//            with 16-byte loads, 4 in flight per thread, and writes its
//            output bytes (4·m·n): what a product costs with no arithmetic,
//            no staging and no split-K sum;
//   memcpy   cudaMemcpyAsync of half the product's bytes (read) into the
//            other half (written), BenchmarkGPUDecode's "memcpy" variant;
//   graph    read's fastest grid, its 20 calls of a batch replayed as one
//            CUDA graph (as an engine replays a decode step);
//
// and, in the first lines, the copy rate of a 1 GiB copy (bytes read and
// written per second) and the empty kernel with 200 KB of dynamic shared
// memory and as a cooperative launch. Each line ends with the product's
// bytes over read's time as a percentage of the copy rate: the most of
// #6's "85% of the copy rate" any kernel reaches on that shape in this
// harness. Not part of the product or its tests.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_time.cuh"  // CK, Busy, timeit

__global__ void empty_kernel(int* sink) {
  if (sink && threadIdx.x == 0 && blockIdx.x == 0x7fffffff) *sink = 1;
}

// read_kernel reads na 16-byte words of a, nb of b and nc of c (grid
// stride, four loads in flight per thread, not kept in L1), and writes ny
// words of y with what it read folded together, so that no load is dead.
__global__ void read_kernel(const uint4* __restrict__ a, size_t na, const uint4* __restrict__ b, size_t nb,
                            const uint4* __restrict__ c, size_t nc, uint4* __restrict__ y, size_t ny) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t t = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint4 acc = make_uint4(0, 0, 0, 0);
  auto fold = [&](const uint4& v) {
    acc.x ^= v.x;
    acc.y ^= v.y;
    acc.z ^= v.z;
    acc.w ^= v.w;
  };
  auto stream = [&](const uint4* p, size_t n) {
    size_t i = t;
    for (; i + 3 * stride < n; i += 4 * stride) {
      uint4 v0 = __ldcs(p + i), v1 = __ldcs(p + i + stride), v2 = __ldcs(p + i + 2 * stride),
            v3 = __ldcs(p + i + 3 * stride);
      fold(v0);
      fold(v1);
      fold(v2);
      fold(v3);
    }
    for (; i < n; i += stride) fold(__ldcs(p + i));
  };
  stream(a, na);
  stream(b, nb);
  stream(c, nc);
  for (size_t i = t; i < ny; i += stride) y[i] = acc;
}

// timeit_graph is timeit with the 20 calls of a batch captured once into
// a CUDA graph and launched as one (the calls' arguments are those of the
// capture: launch(0 … 19)): what a call costs in a decode step that an
// engine replays as a graph.
template <typename F>
float timeit_graph(const Busy& busy, F launch) {
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int j = 0; j < 20; ++j) launch(j, st);
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, st));
  const float us = batch_median(busy, st, 20, [&] { CK(cudaGraphLaunch(ge, st)); });
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaStreamDestroy(st));
  return us;
}

int main() {
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);

  // One pool the weights are taken from at rotating offsets: far over L2.
  const size_t pool = size_t(1536) << 20;
  char* w;
  CK(cudaMalloc(&w, pool));
  CK(cudaMemset(w, 0x35, pool));
  char *x, *y, *sink;
  CK(cudaMalloc(&x, 2 * 64 * 28672));
  CK(cudaMemset(x, 0x11, 2 * 64 * 28672));
  CK(cudaMalloc(&y, 4 * 64 * 28672));
  CK(cudaMalloc(&sink, size_t(512) << 20));
  const Busy busy = make_busy(size_t(256) << 20);

  {
    const size_t big = size_t(1) << 30;
    char *s, *d;
    CK(cudaMalloc(&s, big));
    CK(cudaMalloc(&d, big));
    float us = timeit(busy, [&](int) { CK(cudaMemcpyAsync(d, s, big, cudaMemcpyDeviceToDevice)); });
    printf("copy rate %.0f GB/s (1 GiB copy, read + written)\n", 2 * big / us / 1e3);
    const double copyBW = 2 * big / us / 1e3;  // bytes per µs / 1e3 = GB/s
    CK(cudaFree(s));
    CK(cudaFree(d));

    CK(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    float e0 = timeit(busy, [&](int) { empty_kernel<<<sms, 128>>>(nullptr); });
    float e1 = timeit(busy, [&](int) { empty_kernel<<<sms, 160, 200 * 1024>>>(nullptr); });
    float e2 = timeit(busy, [&](int) {
      int* p = nullptr;
      void* args[] = {&p};
      CK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(empty_kernel), dim3(sms), dim3(160), args,
                                     200 * 1024, 0));
    });
    float eg = timeit_graph(busy, [&](int, cudaStream_t st) { empty_kernel<<<sms, 128, 0, st>>>(nullptr); });
    printf("empty kernel, %d CTAs: %.2f us; with 200 KB shared: %.2f us; cooperative: %.2f us; in a graph: %.2f us\n\n",
           sms, e0, e1, e2, eg);

    struct Shape { const char* name; int n, k; };
    const Shape shapes[] = {
        {"8B q_o", 4096, 4096},       {"8B k_v", 1024, 4096},     {"8B gate_up", 14336, 4096},
        {"8B down", 4096, 14336},     {"70B q_o", 8192, 8192},    {"70B k_v", 1024, 8192},
        {"70B gate_up", 28672, 8192}, {"70B down", 8192, 28672},
    };
    printf("%-12s %-3s %9s %7s %7s %-14s %7s %7s %9s %7s %7s\n", "shape", "m", "bytes", "empty", "read", "(grid)",
           "memcpy", "read%", "85%:us", "graph", "graph%");
    for (const Shape& s : shapes) {
      for (int m : {1, 16, 64}) {
        const size_t pack = size_t(s.n) * s.k, meta = pack / 8, xb = size_t(2) * m * s.k, yb = size_t(4) * m * s.n;
        const size_t bytes = pack + meta + xb + yb;
        const size_t slot = (pack + meta + 4095) / 4096 * 4096;
        const int rot = int(pool / slot);
        float best = 1e9;
        int bestCTAs = 0, bestThreads = 0;
        for (int per : {1, 2, 4, 8}) {
          for (int threads : {256, 512, 1024}) {
            if (per * threads > 2048) continue;
            const int ctas = per * sms;
            float us = timeit(busy, [&](int i) {
              const char* base = w + size_t(i % rot) * slot;
              read_kernel<<<ctas, threads>>>(reinterpret_cast<const uint4*>(base), pack / 16,
                                             reinterpret_cast<const uint4*>(base + pack), meta / 16,
                                             reinterpret_cast<const uint4*>(x), xb / 16,
                                             reinterpret_cast<uint4*>(y), yb / 16);
            });
            if (us < best) best = us, bestCTAs = ctas, bestThreads = threads;
          }
        }
        const size_t half = bytes / 2, hslot = (half + 4095) / 4096 * 4096;
        const int hrot = int(pool / hslot);
        float mc = timeit(busy, [&](int i) {
          CK(cudaMemcpyAsync(sink, w + size_t(i % hrot) * hslot, half, cudaMemcpyDeviceToDevice));
        });
        float gr = timeit_graph(busy, [&](int i, cudaStream_t st) {
          const char* base = w + size_t(i % rot) * slot;
          read_kernel<<<bestCTAs, bestThreads, 0, st>>>(reinterpret_cast<const uint4*>(base), pack / 16,
                                                        reinterpret_cast<const uint4*>(base + pack), meta / 16,
                                                        reinterpret_cast<const uint4*>(x), xb / 16,
                                                        reinterpret_cast<uint4*>(y), yb / 16);
        });
        char grid[32];
        snprintf(grid, sizeof grid, "(%dx%d)", bestCTAs, bestThreads);
        printf("%-12s %-3d %9zu %7.2f %7.2f %-14s %7.2f %6.0f%% %9.2f %7.2f %6.0f%%\n", s.name, m, bytes, e0, best, grid,
               mc, 100 * bytes / best / 1e3 / copyBW, bytes / (0.85 * copyBW * 1e3), gr,
               100 * bytes / gr / 1e3 / copyBW);
      }
    }
  }
  return 0;
}
