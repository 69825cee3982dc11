// sfsurgery.cu: the one translation unit behind kernels/ptx/sfsurgery.ptx.
// Built to compute_80 PTX (see kernels/generate.go for the exact command).
//
// Entry points (extern "C"):
//   spmm_bf16, spmm_f16   2:4 sparse GEMM from packed + meta (spmm.cuh)
//   gemv_{bf16,f16}_t{1,2,4,8}
//                         the same product at decode sizes, M ≤ 64 (gemv.cuh)
//   decode_ampere16       packed + meta → dense pruned W (decode.cuh)
//   dense_bf16, dense_f16 plain dense GEMM, CUDA cores (dense.cuh)
#include "spmm.cuh"
#include "gemv.cuh"
#include "decode.cuh"
#include "dense.cuh"
