// racecheck_mbarrier.cu: does compute-sanitizer's racecheck follow a
// cp.async completion signalled by cp.async.mbarrier.arrive.noinc?
//
// The warpgroup form of the decode kernel (kernels/cuda/gemv_wg.cuh) fills its
// ring with a producer warp's cp.async copies and tells the consumers a
// slot is full that way; racecheck reports hazards between those copies
// and the consumers' ldmatrix. This program runs the protocol alone, one
// slot, filled once, read once, in three kernels that are correct by the
// PTX memory model, and one that is not:
//
//   noinc   producer: cp.async; cp.async.mbarrier.arrive.noinc (the
//           kernel's protocol). consumer: mbarrier.try_wait.parity; ld.shared.
//   waited  producer: cp.async; cp.async.wait_all; mbarrier.arrive.
//   stored  producer: st.shared; mbarrier.arrive.
//   racy    producer: cp.async; mbarrier.arrive without waiting (a race).
//   reuse1  noinc, then the slot refilled once the consumer warp has read
//           it: the consumer's lanes meet at __syncwarp and lane 0 alone
//           arrives on an `empty` mbarrier (count 1), which the producer
//           waits on before the second fill.
//   reuse32 reuse1 with every consumer lane arriving (count 32).
//
// Run each under `compute-sanitizer --tool racecheck ./rc KERNEL`. If
// noinc reports hazards and waited and stored do not, the tool does not
// model the .noinc arrive; if reuse1 reports and reuse32 does not, it does
// not carry the other lanes' reads through __syncwarp to lane 0's
// arrive. racy must report, or the tool sees none of this.
//
//   nvcc -arch=sm_90 -O3 -o rc tools/probes/racecheck_mbarrier.cu
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <cuda_runtime.h>

__device__ __forceinline__ void wait_parity(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n\t.reg .pred done;\n"
      "RC_WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra RC_WAIT_%=;\n\t}\n" ::"r"(bar), "r"(parity)
      : "memory");
}

__device__ __forceinline__ void arrive(uint32_t bar) {
  asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared::cta.b64 st, [%0];\n\t}\n" ::"r"(bar) : "memory");
}

// reuse is modes 4 (reuse1) and 5 (reuse32).
template <int kMode>
__device__ void reuse(const uint4* src, uint32_t* out, uint32_t full, uint32_t empty, uint4* slot) {
  const int lane = threadIdx.x % 32;
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(&slot[lane]));
  if (threadIdx.x < 32) {  // producer warp: two fills
    for (int fill = 0; fill < 2; ++fill) {
      if (fill == 1) wait_parity(empty, 0);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src + 32 * fill + lane) : "memory");
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(full) : "memory");
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }
  uint32_t x = 0;  // consumer warp: two reads
  for (int fill = 0; fill < 2; ++fill) {
    wait_parity(full, fill);
    const uint4 v = slot[(lane + 7) % 32];
    x ^= v.x ^ v.y ^ v.z ^ v.w;
    if (fill == 0) {
      __syncwarp();
      if (kMode == 5 || lane == 0) arrive(empty);
    }
  }
  out[lane] = x;
}

template <int kMode>
__global__ void kernel(const uint4* src, uint32_t* out) {
  __shared__ alignas(16) uint4 slot[32];
  __shared__ alignas(8) uint64_t bar, empty;
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  const uint32_t e = static_cast<uint32_t>(__cvta_generic_to_shared(&empty));
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(&slot[threadIdx.x % 32]));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(b), "r"(32) : "memory");
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(e), "r"(kMode == 4 ? 1 : 32) : "memory");
  }
  __syncthreads();
  if (kMode >= 4) {
    reuse<kMode>(src, out, b, e, slot);
    return;
  }
  if (threadIdx.x < 32) {  // producer warp
    if (kMode == 2) {
      slot[threadIdx.x] = src[threadIdx.x];
    } else {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src + threadIdx.x) : "memory");
    }
    if (kMode == 0) {
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(b) : "memory");
    } else {
      if (kMode == 1) asm volatile("cp.async.wait_all;\n" ::: "memory");
      arrive(b);
    }
    if (kMode == 3) asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }
  wait_parity(b, 0);  // consumer warp
  const uint4 v = slot[(threadIdx.x + 7) % 32];
  out[threadIdx.x - 32] = v.x ^ v.y ^ v.z ^ v.w;
}

int main(int argc, char** argv) {
  const char* names[] = {"noinc", "waited", "stored", "racy", "reuse1", "reuse32"};
  void (*fns[])(const uint4*, uint32_t*) = {kernel<0>, kernel<1>, kernel<2>, kernel<3>, kernel<4>, kernel<5>};
  int which = argc > 1 ? -1 : 0;
  for (int i = 0; i < 6 && argc > 1; ++i)
    if (!strcmp(argv[1], names[i])) which = i;
  if (which < 0) {
    fprintf(stderr, "usage: rc noinc|waited|stored|racy|reuse1|reuse32\n");
    return 2;
  }
  uint4* src;
  uint32_t* out;
  if (cudaMalloc(&src, 64 * 16) != cudaSuccess || cudaMalloc(&out, 32 * 4) != cudaSuccess) return 1;
  cudaMemset(src, 0x5a, 64 * 16);
  fns[which]<<<1, 64>>>(src, out);
  const cudaError_t err = cudaDeviceSynchronize();
  uint32_t host[32];
  cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost);
  printf("%s: %s, out[0] = %#x (want 0)\n", names[which], cudaGetErrorString(err), host[0]);
  return err == cudaSuccess ? 0 : 1;
}
