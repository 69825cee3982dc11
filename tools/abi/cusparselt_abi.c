/* cusparselt_abi.c: prints the cuSPARSELt ABI facts that
 * cusparselt/ hard-codes, to be compared by eye
 * (tools/gpu/gpu_sweep.sh check compiles it with nvcc). */
#include <stdio.h>
#include <cusparseLt.h>

int main(void) {
	printf("spabi: CUSPARSELT_VERSION=%d sizeof handle=%zu matdesc=%zu matmuldesc=%zu algsel=%zu plan=%zu "
	       "(Go allocates 16384 each)\n",
	       (int)CUSPARSELT_VERSION, sizeof(cusparseLtHandle_t), sizeof(cusparseLtMatDescriptor_t),
	       sizeof(cusparseLtMatmulDescriptor_t), sizeof(cusparseLtMatmulAlgSelection_t),
	       sizeof(cusparseLtMatmulPlan_t));
	printf("spabi: OP_N=%d OP_T=%d ORDER_COL=%d ORDER_ROW=%d COMPUTE_32F=%d SPARSITY_50=%d ALG_DEFAULT=%d "
	       "NOT_SUPPORTED=%d INVALID_VALUE=%d R_32F=%d R_16F=%d R_16BF=%d (Go 0 1 1 2 2 0 0 10 3 0 2 14)\n",
	       (int)CUSPARSE_OPERATION_NON_TRANSPOSE, (int)CUSPARSE_OPERATION_TRANSPOSE, (int)CUSPARSE_ORDER_COL,
	       (int)CUSPARSE_ORDER_ROW, (int)CUSPARSE_COMPUTE_32F, (int)CUSPARSELT_SPARSITY_50_PERCENT,
	       (int)CUSPARSELT_MATMUL_ALG_DEFAULT, (int)CUSPARSE_STATUS_NOT_SUPPORTED, (int)CUSPARSE_STATUS_INVALID_VALUE,
	       (int)CUDA_R_32F, (int)CUDA_R_16F, (int)CUDA_R_16BF);
	return 0;
}
