// gemv_probe.cu: a standalone probe of the decode kernel (kernels/cuda/gemv.cuh) on
// the GPU machine, without Go: event-timed launches of chosen plans beside
// plain read kernels that stream the same bytes, and a timeline of one
// launch (the time each CTA reaches the kernel's SFS_GEMV_TRACE points).
// It answers "where does the time of a small product go" faster than a
// sweep through the Go benchmarks. Build and run from the repository root:
//
//   nvcc -arch=sm_90 -O3 -std=c++17 -o /tmp/probe tools/probes/gemv_probe.cu && /tmp/probe
//
// Output: one line per plan or read kernel (µs per call, median of 7
// batches of 20, weights rotated through 8 copies so that L2 holds none),
// then per traced plan the spread over CTAs of each trace point (µs after
// the first CTA's entry). Not part of the product or its tests.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <string>
#include <cuda_runtime.h>

#include "probe_trace.cuh"  // SFS_GEMV_TRACE, print_trace

// GEMV_CUH: the kernel source to probe (another version of it, to compare).
#ifndef GEMV_CUH
#define GEMV_CUH "../../kernels/cuda/gemv.cuh"
#endif
#include GEMV_CUH

#include "probe_time.cuh"  // CK, Busy, timeit

#define PROBE(name, NT, SC)                                                                           \
  __global__ void __launch_bounds__(256) name(float* Y, const uint16_t* X, const uint16_t* P, const uint32_t* U, \
                                              float* W, int M, int N, int K, int xwin, int kw) {      \
    sfs::gemv::kernel<sfs::BF16, NT, SC>(Y, X, P, U, W, M, N, K, xwin, kw);                           \
  }
PROBE(probe_t1_s2, 1, 2)
PROBE(probe_t1_s4, 1, 4)
PROBE(probe_t2_s2, 2, 2)
PROBE(probe_t2_s4, 2, 4)
PROBE(probe_t4_s2, 4, 2)
PROBE(probe_t4_s4, 4, 4)
PROBE(probe_t8_s2, 8, 2)
PROBE(probe_t8_s4, 8, 4)

// empty: the fixed cost of a launch of the same size and nothing else.
__global__ void empty(int* sink) {
  if (threadIdx.x == 999) sink[0] = 1;
}

// read_static: CTA b reads bytes [b·per, (b+1)·per) of src with 16-byte
// loads, 8 in flight per thread, the way the decode kernel splits a weight
// (one contiguous piece per CTA).
__global__ void read_static(const uint4* __restrict__ src, size_t per, uint4* sink) {
  const size_t n = per / 16;
  const uint4* p = src + blockIdx.x * n;
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (size_t i = threadIdx.x; i < n; i += 8 * blockDim.x) {
    uint4 v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const size_t k = i + j * blockDim.x;
      v[j] = k < n ? __ldcs(p + k) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) acc.x ^= v[j].x, acc.y ^= v[j].y, acc.z ^= v[j].z, acc.w ^= v[j].w;
  }
  if (acc.x == 0x12345678u) sink[0] = acc;
}

// read_stride: a grid-stride read, 4 loads in flight per thread.
__global__ void read_stride(const uint4* __restrict__ src, size_t n, uint4* sink) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += 4 * step) {
    uint4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = i + j * step < n ? __ldcs(src + i + j * step) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < 4; ++j) acc.x ^= v[j].x, acc.y ^= v[j].y, acc.z ^= v[j].z, acc.w ^= v[j].w;
  }
  if (acc.x == 0x12345678u) sink[0] = acc;
}

// read_rows reads a row block's 32 rows the way the decode kernel does:
// in 256-byte pieces of all 32 rows at a time, the CTA's 8 warps taking
// pieces in turn, one piece (8 KB) in flight per warp; rot > 0 starts CTA
// b at piece b·rot instead of 0 (and wraps), so that the CTAs running at
// once read at different offsets of their rows.
__global__ void read_rows(const uint4* __restrict__ src, int rowU4, int rot, uint4* sink) {
  const int pieces = rowU4 / 16;
  const uint4* base = src + static_cast<size_t>(blockIdx.x) * 32 * rowU4;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int start = (blockIdx.x * rot) % pieces;
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (int c = warp; c < pieces; c += 8) {
    const int cc = (c + start) % pieces;
    uint4 v[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = __ldcs(base + static_cast<size_t>(2 * j + lane / 16) * rowU4 + cc * 16 + lane % 16);
#pragma unroll
    for (int j = 0; j < 16; ++j) acc.x ^= v[j].x, acc.y ^= v[j].y, acc.z ^= v[j].z, acc.w ^= v[j].w;
  }
  if (acc.x == 0x12345678u) sink[0] = acc;
}

struct Plan {
  const char* name;
  int n, k, m, sc, warps, kw, splits, xwin;  // xwin 0: whole
  bool trace;
};

static int depth(int sc) { return sc == 2 ? 4 : 3; }
static int stage_bytes(int sc) { return 32 * sc * 64 + 2 * sc * 128; }

struct Bufs {
  std::vector<uint16_t*> pack;
  std::vector<uint32_t*> meta;
  uint16_t* x;
  float* y;
  float* work;  // after counters
  Busy busy;
};

static const int kRot = 8;

// main: "probe" times read kernels, then plans; "probe plans" only plans.
int main(int argc, char** argv) {
  const bool reads = !(argc > 1 && std::string(argv[1]) == "plans");
  Bufs b;
  const size_t maxN = 14336, maxK = 14336;
  const size_t packBytes = maxN * 4096;  // largest n·k/2·2 of the shapes below: 14336×4096
  b.busy = make_busy(256 << 20);
  for (int r = 0; r < kRot; ++r) {
    uint16_t* p;
    uint32_t* m;
    CK(cudaMalloc(&p, packBytes));
    CK(cudaMalloc(&m, packBytes / 8));
    CK(cudaMemset(p, 0x3c, packBytes));
    CK(cudaMemset(m, 0x44, packBytes / 8));  // every group keeps its first two values
    b.pack.push_back(p);
    b.meta.push_back(m);
  }
  CK(cudaMalloc(&b.x, 64 * maxK * 2));
  CK(cudaMemset(b.x, 0x3c, 64 * maxK * 2));
  CK(cudaMalloc(&b.y, 64 * maxN * 4));
  char* w;
  const size_t counters = 4096;
  CK(cudaMalloc(&w, counters * 4 + 64 * 64 * maxN * 4));
  CK(cudaMemset(w, 0, counters * 4));
  b.work = reinterpret_cast<float*>(w + counters * 4);
  uint4* sink;
  CK(cudaMalloc(&sink, 64));
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));

  for (int ctas : {128, 528}) {
    if (!reads) break;
    float us = timeit(b.busy, [&](int) { empty<<<ctas, 256>>>(reinterpret_cast<int*>(sink)); });
    printf("empty %4d CTAs x 256: %7.2f us\n", ctas, us);
  }
  // Plain reads of the weight bytes (packed + meta) of q_o, k_v, gate_up.
  struct { const char* name; size_t bytes; } reads_[] = {
      {"q_o", 4096ull * 4096 * 9 / 8}, {"k_v", 1024ull * 4096 * 9 / 8}, {"gate_up", 14336ull * 4096 * 9 / 8}};
  for (auto& r : reads_) {
    if (!reads) break;
    for (int ctas : {128, 132, 264, 528}) {
      const size_t per = (r.bytes / ctas + 15) / 16 * 16;
      float us = timeit(b.busy, [&](int i) {
        read_static<<<ctas, 256>>>(reinterpret_cast<const uint4*>(b.pack[i % kRot]), per, sink);
      });
      printf("read_static %-8s %6.2f MB %4d CTAs x 256: %7.2f us  %.0f GB/s\n", r.name, r.bytes / 1e6, ctas, us,
             r.bytes / us / 1e3);
    }
    for (int ctas : {132 * 4, 132 * 16}) {
      float us = timeit(b.busy, [&](int i) {
        read_stride<<<ctas, 256>>>(reinterpret_cast<const uint4*>(b.pack[i % kRot]), r.bytes / 16, sink);
      });
      printf("read_stride %-8s %6.2f MB %4d CTAs x 256: %7.2f us  %.0f GB/s\n", r.name, r.bytes / 1e6, ctas, us,
             r.bytes / us / 1e3);
    }
  }

  // The decode kernel's read order without its arithmetic: packed rows of
  // K bytes (K/2 bf16), 32 rows per CTA.
  struct { const char* name; int n, k; } rr[] = {{"q_o", 4096, 4096}, {"down", 4096, 14336}, {"gate_up", 14336, 4096}};
  for (auto& r : rr) {
    if (!reads) break;
    for (int rot : {0, 1, 5, 7}) {
      float us = timeit(b.busy, [&](int i) {
        read_rows<<<r.n / 32, 256>>>(reinterpret_cast<const uint4*>(b.pack[i % kRot]), r.k / 16, rot, sink);
      });
      const double bytes = double(r.n) * r.k;
      printf("read_rows %-8s %6.2f MB rot %d: %7.2f us  %.0f GB/s\n", r.name, bytes / 1e6, rot, us, bytes / us / 1e3);
    }
  }
  std::vector<Plan> plans = {
      {"q_o m1 sc4 w4 kw1 s4 win8", 4096, 4096, 1, 4, 4, 1, 4, 8, false},
      {"k_v m1 sc4 w8 kw4 s8 whole", 1024, 4096, 1, 4, 8, 4, 8, 0, false},
      {"gate_up m1 sc4 w4 kw1 s1 win8", 14336, 4096, 1, 4, 4, 1, 1, 8, false},
      {"gate_up m16 sc4 w4 kw1 s1 win8", 14336, 4096, 16, 4, 4, 1, 1, 8, false},
      {"gate_up m32 sc4 w4 kw1 s1 win8", 14336, 4096, 32, 4, 4, 1, 1, 8, false},
      {"down m32 sc4 w4 kw1 s4 win8", 4096, 14336, 32, 4, 4, 1, 4, 8, false},
      {"q_o m32 sc2 w4 kw1 s4 win6", 4096, 4096, 32, 2, 4, 1, 4, 6, false},
      {"k_v m32 sc4 w4 kw2 s4 whole", 1024, 4096, 32, 4, 4, 2, 4, 0, false},
      {"gate_up m64 sc2 w4 kw1 s1 win6", 14336, 4096, 64, 2, 4, 1, 1, 6, true},
      {"gate_up m64 sc2 w7 kw1 s2 win6", 14336, 4096, 64, 2, 7, 1, 2, 6, false},
      {"down m64 sc2 w4 kw1 s4 win6", 4096, 14336, 64, 2, 4, 1, 4, 6, false},
      {"q_o m64 sc2 w4 kw1 s4 whole", 4096, 4096, 64, 2, 4, 1, 4, 0, false},
      {"k_v m64 sc2 w4 kw2 s4 whole", 1024, 4096, 64, 2, 4, 2, 4, 0, false},
  };
  for (const Plan& p : plans) {
    const int chunks = p.k / 64;
    const int cps = (chunks + p.splits - 1) / p.splits;
    const int tiles = p.m <= 8 ? 1 : p.m <= 16 ? 2 : p.m <= 32 ? 4 : 8;
    const int rows = std::min(p.m, 8 * tiles);
    int smem = p.warps * depth(p.sc) * stage_bytes(p.sc);
    smem += p.xwin ? 2 * 4 * (rows + 1) * (p.xwin * 32 + 4) : 4 * (rows + 1) * (cps * 32 + 4);
    void (*fn)(float*, const uint16_t*, const uint16_t*, const uint32_t*, float*, int, int, int, int, int);
    switch (tiles) {
      case 1: fn = p.sc == 2 ? probe_t1_s2 : probe_t1_s4; break;
      case 2: fn = p.sc == 2 ? probe_t2_s2 : probe_t2_s4; break;
      case 4: fn = p.sc == 2 ? probe_t4_s2 : probe_t4_s4; break;
      default: fn = p.sc == 2 ? probe_t8_s2 : probe_t8_s4;
    }
    CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    dim3 grid((p.n / 32 + p.warps / p.kw - 1) / (p.warps / p.kw), p.splits);
    auto launch = [&](int i) {
      fn<<<grid, 32 * p.warps, smem>>>(b.y, b.x, b.pack[i % kRot], b.meta[i % kRot], b.work, p.m, p.n, p.k, p.xwin,
                                      p.kw);
    };
    float us = timeit(b.busy, launch);
    const double bytes = p.n * double(p.k) * 9 / 8;
    printf("%-34s grid %3dx%-2d smem %6d: %7.2f us  %.0f GB/s\n", p.name, grid.x, grid.y, smem, us,
           bytes / us / 1e3);
    if (!p.trace) continue;
    // Timeline of one launch after a warm one, behind a large copy.
    queue_busy(b.busy);
    launch(3);
    queue_busy(b.busy, 8 << 20);
    launch(4);
    CK(cudaDeviceSynchronize());
    printf("  trace (us after the first entry; min / median / max over %d CTAs):", grid.x * grid.y);
    print_trace(grid.x * grid.y);
  }
  return 0;
}
