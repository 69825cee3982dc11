/* cuabi.c: checks the CUDA driver ABI facts that cuda/launch.go and
 * cuda/enums.go hard-code for cuLaunchKernelEx (the layouts of
 * CUlaunchConfig and CUlaunchAttribute, the attribute ids, the result codes
 * a cluster launch can fail with) against cuda.h; exits 1 on a mismatch.
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
	return bad;
}
