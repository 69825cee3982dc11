/* ltabi.c: prints the cuBLASLt ABI facts that cublaslt/
 * hard-codes, to be compared by eye (gpu_run.sh compiles it with nvcc). */
#include <stddef.h>
#include <stdio.h>
#include <cublasLt.h>

int main(void) {
	printf("ltabi: sizeof(cublasLtMatmulHeuristicResult_t)=%zu (Go 96) offsets workspaceSize=%zu state=%zu "
	       "wavesCount=%zu (Go 64 72 76)\n",
	       sizeof(cublasLtMatmulHeuristicResult_t), offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize),
	       offsetof(cublasLtMatmulHeuristicResult_t, state), offsetof(cublasLtMatmulHeuristicResult_t, wavesCount));
	printf("ltabi: COMPUTE_32F=%d R_32F=%d R_16F=%d R_16BF=%d (Go 68 0 2 14)\n", (int)CUBLAS_COMPUTE_32F,
	       (int)CUDA_R_32F, (int)CUDA_R_16F, (int)CUDA_R_16BF);
	printf("ltabi: DESC_TRANSA=%d DESC_TRANSB=%d PREF_MAX_WORKSPACE_BYTES=%d OP_N=%d OP_T=%d (Go 3 4 1 0 1)\n",
	       (int)CUBLASLT_MATMUL_DESC_TRANSA, (int)CUBLASLT_MATMUL_DESC_TRANSB,
	       (int)CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, (int)CUBLAS_OP_N, (int)CUBLAS_OP_T);
	return 0;
}
