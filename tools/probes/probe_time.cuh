// probe_time.cuh: how the standalone probes in tools/probes/
// (gemv_probe.cu, coop_probe.cu, floor_probe.cu) time a launch: in 7
// batches of 20, each batch queued behind a large device-to-device copy so
// that the GPU never waits for the host, and the median µs per call
// (batch_median; timeit for launches on the default stream).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "probe_check.cuh"  // CK

// Busy is the copy queued before each batch: bytes from src to dst.
struct Busy {
  char* src;
  char* dst;
  size_t bytes;
};

// make_busy allocates the buffers of a Busy copy of bytes bytes.
inline Busy make_busy(size_t bytes) {
  Busy b{nullptr, nullptr, bytes};
  CK(cudaMalloc(&b.src, bytes));
  CK(cudaMalloc(&b.dst, bytes));
  CK(cudaMemset(b.src, 1, bytes));
  return b;
}

// queue_busy queues the copy of b (or its first bytes bytes) on stream
// st (the default stream when 0).
inline void queue_busy(const Busy& b, size_t bytes = 0, cudaStream_t st = 0) {
  CK(cudaMemcpyAsync(b.dst, b.src, bytes ? bytes : b.bytes, cudaMemcpyDeviceToDevice, st));
}

// batch_median times 7 batches, each queued by queue() on stream st behind
// the copy of busy, and returns the median µs per call of a batch of
// calls calls.
template <typename F>
float batch_median(const Busy& busy, cudaStream_t st, int calls, F queue) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> per;
  for (int rep = 0; rep < 7; ++rep) {
    queue_busy(busy, 0, st);
    CK(cudaEventRecord(e0, st));
    queue();
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    per.push_back(ms * 1000 / calls);
  }
  CK(cudaGetLastError());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(per.begin(), per.end());
  return per[per.size() / 2];
}

// timeit runs launch(i) (i counting from 0) once, then in 7 batches of 20
// behind the copy of busy, and returns the median µs per call.
template <typename F>
float timeit(const Busy& busy, F launch) {
  int i = 0;
  launch(i++);
  return batch_median(busy, 0, 20, [&] {
    for (int j = 0; j < 20; ++j) launch(i++);
  });
}
