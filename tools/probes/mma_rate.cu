// mma_rate.cu: how fast one SM sub-partition issues the decode kernel's
// tensor-core instruction (mma.sp m16n8k32, bf16, f32 accumulators) out of
// registers, with 1, 2 or 4 warps per sub-partition and 4, 8 or 16
// independent accumulators per warp; beside it the dense m16n8k16 for
// scale. It answers whether the decode kernel at m = 64 (16 mma.sp per
// k-tile and warp) is bound by the issue of its products. Build and run on
// the GPU machine:
//
//   nvcc -arch=sm_90 -O3 -o /tmp/mma_rate tools/probes/mma_rate.cu && /tmp/mma_rate
//
// Not part of the product or its tests.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

template <int ACC, bool SPARSE>
__global__ void rate(float* out, int iters, unsigned long long* cycles) {
  float d[ACC][4];
#pragma unroll
  for (int j = 0; j < ACC; ++j) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.f;
  uint32_t a0 = threadIdx.x, a1 = a0 * 3, a2 = a0 * 5, a3 = a0 * 7, b0 = a0 ^ 1, b1 = a0 ^ 2, b2 = a0 ^ 3, b3 = a0 ^ 4;
  uint32_t e = 0x44444444u;
  const unsigned long long t0 = clock64();
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int j = 0; j < ACC; ++j) {
      if (SPARSE) {
        asm volatile(
            "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0;\n"
            : "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(b2), "r"(b3), "r"(e));
      } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
      }
    }
  }
  const unsigned long long t1 = clock64();
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < ACC; ++j) s += d[j][0] + d[j][1] + d[j][2] + d[j][3];
  if (s == 12345.f) out[0] = s;
  if ((threadIdx.x & 31) == 0) atomicMax(cycles, t1 - t0);
}

template <int ACC, bool SPARSE>
static void run(int warpsPerSMSP, int sms) {
  float* out;
  unsigned long long* cyc;
  cudaMalloc(&out, 4);
  cudaMalloc(&cyc, 8);
  const int iters = 4096;
  const int threads = 128 * warpsPerSMSP;  // 4 sub-partitions per SM
  rate<ACC, SPARSE><<<sms, threads>>>(out, 16, cyc);  // warm
  cudaMemset(cyc, 0, 8);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  rate<ACC, SPARSE><<<sms, threads>>>(out, iters, cyc);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms;
  cudaEventElapsedTime(&ms, e0, e1);
  unsigned long long c;
  cudaMemcpy(&c, cyc, 8, cudaMemcpyDeviceToHost);
  const double perSMSP = double(iters) * ACC * warpsPerSMSP;  // instructions per sub-partition
  printf("%-6s acc %2d warps/SMSP %d: %6.2f cycles per instruction per SMSP, %6.2f per warp; %.3f ms, %s\n",
         SPARSE ? "mma.sp" : "mma", ACC, warpsPerSMSP, c / perSMSP, c / (double(iters) * ACC), ms,
         cudaGetErrorString(cudaGetLastError()));
  cudaFree(out);
  cudaFree(cyc);
}

int main() {
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  for (int w : {1, 2, 4}) {
    run<4, true>(w, sms);
    run<8, true>(w, sms);
    run<16, true>(w, sms);
    run<8, false>(w, sms);
  }
  return 0;
}
