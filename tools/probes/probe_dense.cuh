// probe_dense.cuh: Dense, the dense cuBLASLt product the standalone probes
// time ours against (pdl_probe.cu, spmm_wg_probe.cu, splitk_probe.cu), set up as
// kernels/cublaslt.go sets it up: y (n×m, of type out) = W (stored n×k,
// transposed) · x (k×m), both of type in, f32 compute, the heuristic's
// first algorithm; Lt, a handle and workspace for it (make_lt); and LT, the
// probes' check of a cuBLASLt status.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cublasLt.h>

#include "probe_check.cuh"  // CK

#define LT(call)                                                                  \
  do {                                                                            \
    cublasStatus_t s_ = (call);                                                   \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                            \
      fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #call, (int)s_); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

// Lt is a cuBLASLt handle and the workspace the probes give Dense.
struct Lt {
  cublasLtHandle_t h;
  void* ws;
  size_t bytes;
};

// make_lt creates a handle and a workspace of bytes bytes.
inline Lt make_lt(size_t bytes = 32 << 20) {
  Lt l{nullptr, nullptr, bytes};
  LT(cublasLtCreate(&l.h));
  CK(cudaMalloc(&l.ws, bytes));
  return l;
}

struct Dense {
  cublasLtHandle_t h;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
  void* ws;
  size_t wsBytes;
  Dense(cublasLtHandle_t h_, void* ws_, size_t wsb, cudaDataType_t in, cudaDataType_t out, int m, int n, int k)
      : h(h_), ws(ws_), wsBytes(wsb) {
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn));
    LT(cublasLtMatrixLayoutCreate(&la, in, k, n, k));
    LT(cublasLtMatrixLayoutCreate(&lb, in, k, m, k));
    LT(cublasLtMatrixLayoutCreate(&lc, out, n, m, n));
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsBytes, sizeof wsBytes));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    LT(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &res, &found));
    if (found < 1) {
      fprintf(stderr, "no cuBLASLt algorithm\n");
      exit(1);
    }
    algo = res.algo;
    LT(cublasLtMatmulPreferenceDestroy(pref));
  }
  Dense(const Lt& l, cudaDataType_t in, cudaDataType_t out, int m, int n, int k)
      : Dense(l.h, l.ws, l.bytes, in, out, m, n, k) {}
  // run queues y = W·x on stream st.
  void run(void* y, const void* x, const void* w, cudaStream_t st = 0) {
    const float one = 1, zero = 0;
    LT(cublasLtMatmul(h, desc, &one, w, la, x, lb, &zero, y, lc, y, lc, &algo, ws, wsBytes, st));
  }
};
