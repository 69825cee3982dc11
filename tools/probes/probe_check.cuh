// probe_check.cuh: CK, the error check of the standalone probes in
// tools/probes/ (wgmma_sp_probe.cu, and gemv_probe.cu and coop_probe.cu
// through probe_time.cuh): it prints the file, line, call and CUDA error
// and exits with status 1.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)
