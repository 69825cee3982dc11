// racecheck_pair.cu: does compute-sanitizer's racecheck follow the pair
// sum's protocol (kernels/cuda/gemv_wg.cuh, finish_pair)?
//
// Two CTAs of one cluster of (1, 2, 1), one warp each. Rank 1 pushes 32
// float4 into rank 0's shared memory with st.async ...
// mbarrier::complete_tx::bytes on rank 0's mbarrier (count 1); rank 0's
// lane 0 arrives on it with expect_tx of those 512 bytes, the warp waits
// for the phase and reads the floats. Under racecheck the decode tests
// hang in that wait ("Deadlock detected in Cuda::barrier
// wait" at finish_pair with --racecheck-deadlock-timeout), while every
// run without the tool passes. The modes differ only in when rank 0's
// expect_tx happens against rank 1's stores:
//
//   kernel  as finish_pair: rank 0 arrives with expect_tx just before its
//           wait, so the stores may complete before it (the mbarrier's
//           tx-count goes below zero, which the PTX ISA allows).
//   late    kernel with rank 0 spinning ~50 µs first: the stores always
//           complete before the expect_tx.
//   early   rank 0's thread 0 arrives with expect_tx right after the
//           mbarrier's init, before the cluster barrier (arrive.release)
//           that rank 1 waits on before its stores: the expect_tx always
//           comes first.
//   racy    early, but rank 0 reads the floats without waiting: a race,
//           which racecheck must report if it sees st.async at all.
//
// Run each natively and under `compute-sanitizer --tool racecheck
// --racecheck-deadlock-timeout 5000 ./rcp MODE`.
//
// Measured (H100, compute-sanitizer 2025.3.1, driver of CUDA
// 13): all four run right natively (racy gets its reads wrong, as it
// should); under racecheck kernel, late and early all report "Deadlock
// detected in Cuda::barrier wait" at rank 0's wait, and racy reports no
// hazard. So the tool neither completes an mbarrier phase on another
// CTA's st.async complete_tx, whatever the order, nor tracks those stores
// as shared-memory accesses: racecheck cannot run the pair kernels, and
// tools/gpu/decode_run.sh leaves them out of its racecheck runs
// (memcheck and synccheck still check them). Arming the mbarrier early
// (the early mode, tried in finish_pair) also cost 0.3-0.4 µs a call,
// from the release the cluster barrier then needs (docs/kernels.md).
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -o rcp tools/probes/racecheck_pair.cu
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <cuda_runtime.h>

__device__ __forceinline__ void wait_parity(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n\t.reg .pred done;\n"
      "RCP_WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra RCP_WAIT_%=;\n\t}\n" ::"r"(bar), "r"(parity)
      : "memory");
}

__device__ __forceinline__ void expect(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n\t}\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ uint32_t rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

__device__ __forceinline__ uint32_t map_rank(uint32_t addr, uint32_t r) {
  uint32_t m;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(m) : "r"(addr), "r"(r));
  return m;
}

// kMode: 0 kernel, 1 late, 2 early, 3 racy.
template <int kMode>
__global__ void __cluster_dims__(1, 2, 1) pair(float* out) {
  __shared__ alignas(16) float4 buf[32];
  __shared__ alignas(8) uint64_t bar;
  const int lane = threadIdx.x;
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  const uint32_t mine = static_cast<uint32_t>(__cvta_generic_to_shared(&buf[lane]));
  const bool early = kMode >= 2;
  if (lane == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(b) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    if (early && rank() == 0) expect(b, 32 * 16);
  }
  __syncwarp();
  if (early) {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  } else {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  }
  if (rank() == 1) {
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
    const float v = static_cast<float>(lane + 1);
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                     map_rank(mine, 0)),
                 "f"(v), "f"(v), "f"(v), "f"(v), "r"(map_rank(b, 0))
                 : "memory");
    return;
  }
  if (kMode == 1) {
    const long long t0 = clock64();
    while (clock64() - t0 < 100000) {
    }
  }
  if (!early && lane == 0) expect(b, 32 * 16);
  if (kMode != 3) wait_parity(b, 0);
  const float4 o = buf[(lane + 7) % 32];
  out[lane] = o.x + o.y + o.z + o.w;
}

int main(int argc, char** argv) {
  const char* names[] = {"kernel", "late", "early", "racy"};
  void (*fns[])(float*) = {pair<0>, pair<1>, pair<2>, pair<3>};
  int which = argc > 1 ? -1 : 0;
  for (int i = 0; i < 4 && argc > 1; ++i)
    if (!strcmp(argv[1], names[i])) which = i;
  if (which < 0) {
    fprintf(stderr, "usage: rcp kernel|late|early|racy\n");
    return 2;
  }
  float* out;
  if (cudaMalloc(&out, 32 * 4) != cudaSuccess) return 1;
  cudaMemset(out, 0, 32 * 4);
  fns[which]<<<dim3(1, 2, 1), 32>>>(out);
  const cudaError_t err = cudaDeviceSynchronize();
  float host[32];
  cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int l = 0; l < 32; ++l) bad += host[l] != 4.f * ((l + 7) % 32 + 1);
  printf("%s: %s, %d of 32 wrong\n", names[which], cudaGetErrorString(err), bad);
  return err == cudaSuccess && bad == 0 ? 0 : 1;
}
