/* cuabi.c: checks the CUDA driver ABI facts that cuda/launch.go,
 * cuda/enums.go and cuda/tensormap.go hard-code for cuLaunchKernelEx (the
 * layouts of CUlaunchConfig and CUlaunchAttribute, the attribute ids, the
 * result codes a cluster launch can fail with) and cuTensorMapEncodeTiled
 * (CUtensorMap's size and alignment, the enum values) against cuda.h;
 * exits 1 on a mismatch.
 * gpu_run.sh compiles it with nvcc. */
#include <stddef.h>
#include <stdio.h>
#include <cuda.h>

static int bad;

static void want(const char *what, long got, long go) {
	printf("cuabi: %s = %ld (Go %ld)%s\n", what, got, go, got == go ? "" : "  MISMATCH");
	if (got != go) bad = 1;
}

int main(void) {
	want("sizeof(CUlaunchConfig)", sizeof(CUlaunchConfig), 56);
	want("offsetof(CUlaunchConfig, sharedMemBytes)", offsetof(CUlaunchConfig, sharedMemBytes), 24);
	want("offsetof(CUlaunchConfig, hStream)", offsetof(CUlaunchConfig, hStream), 32);
	want("offsetof(CUlaunchConfig, attrs)", offsetof(CUlaunchConfig, attrs), 40);
	want("offsetof(CUlaunchConfig, numAttrs)", offsetof(CUlaunchConfig, numAttrs), 48);
	want("sizeof(CUlaunchAttribute)", sizeof(CUlaunchAttribute), 72);
	want("offsetof(CUlaunchAttribute, value)", offsetof(CUlaunchAttribute, value), 8);
	want("CU_LAUNCH_ATTRIBUTE_COOPERATIVE", CU_LAUNCH_ATTRIBUTE_COOPERATIVE, 2);
	want("CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION", CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, 4);
	want("CUDA_ERROR_INVALID_CLUSTER_SIZE", CUDA_ERROR_INVALID_CLUSTER_SIZE, 912);
	want("CUDA_ERROR_NOT_SUPPORTED", CUDA_ERROR_NOT_SUPPORTED, 801);
	want("CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, 720);
	want("sizeof(CUtensorMap)", sizeof(CUtensorMap), 128);
	want("alignof(CUtensorMap)", alignof(CUtensorMap), 64);
	want("CU_TENSOR_MAP_DATA_TYPE_UINT16", CU_TENSOR_MAP_DATA_TYPE_UINT16, 1);
	want("CU_TENSOR_MAP_DATA_TYPE_UINT32", CU_TENSOR_MAP_DATA_TYPE_UINT32, 2);
	want("CU_TENSOR_MAP_INTERLEAVE_NONE", CU_TENSOR_MAP_INTERLEAVE_NONE, 0);
	want("CU_TENSOR_MAP_SWIZZLE_NONE", CU_TENSOR_MAP_SWIZZLE_NONE, 0);
	want("CU_TENSOR_MAP_SWIZZLE_64B", CU_TENSOR_MAP_SWIZZLE_64B, 2);
	want("CU_TENSOR_MAP_SWIZZLE_128B", CU_TENSOR_MAP_SWIZZLE_128B, 3);
	want("CU_TENSOR_MAP_L2_PROMOTION_L2_256B", CU_TENSOR_MAP_L2_PROMOTION_L2_256B, 3);
	want("CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE", CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE, 0);
	return bad;
}
