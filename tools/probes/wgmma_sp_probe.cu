// wgmma_sp_probe.cu: does Hopper's warpgroup sparse product
// (wgmma.mma_async.sp, sm_90a) take the decode kernel's operands as they
// are, and how fast does it run? One warpgroup multiplies A fragments and
// metadata exactly as the decode kernel loads them for mma.sp m16n8k32
// (random bf16 values, random valid metadata) with a B tile of N tokens
// staged in shared memory as 8×16-byte core matrices, and the result is
// compared with the same product by mma.sp (B fragments by ldmatrix from
// the natural [token][k] layout, as in gemv.cuh). Two descriptor
// variants (the strides swapped) and both sparsity selectors are tried.
// Then the issue rate of wgmma.sp m64nNk32 with A from registers. Build
// and run on the GPU machine:
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -o /tmp/wg tools/probes/wgmma_sp_probe.cu && /tmp/wg
//
// Not part of the product or its tests.
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>
#include <cuda_runtime.h>

#include "probe_check.cuh"  // CK

constexpr int kN = 64;  // tokens of the test product

__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <int SEL>
__device__ __forceinline__ void mma_sp(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[4], uint32_t e) {
  asm volatile(
      "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, %13;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e), "n"(SEL));
}

// desc returns a shared-memory matrix descriptor without swizzle: start
// address, leading and stride byte offsets (each >> 4).
__device__ __forceinline__ uint64_t desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}

template <int SEL>
__device__ __forceinline__ void wgmma_sp64(float (&d)[32], const uint32_t (&a)[4], uint64_t db, uint32_t e, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
      "wgmma.mma_async.sp.sync.aligned.m64n64k32.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
      "{%32,%33,%34,%35}, %36, %37, %39, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(e), "r"(acc), "n"(SEL));
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// check: A[w][lane][4], E[w][lane]: per warp; X: [kN][32] bf16 (natural).
// out_ref / out_wg: [variant][128 threads][32] floats, thread-held.
template <int SEL>
__global__ void check(const uint32_t* A, const uint32_t* E, const uint16_t* X, float* out_ref, float* out_wg, int variant) {
  __shared__ __align__(128) uint16_t xn[kN * 40];   // natural, rows padded to 80 bytes (conflict-free ldmatrix)
  __shared__ __align__(128) uint16_t xc[kN * 32];   // core matrices: ((u * kN/8 + n/8) * 8 + n%8) * 8 values
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < kN * 32; i += 128) {
    const int n = i / 32, k = i % 32, u = k / 8;
    xn[n * 40 + k] = X[i];
    xc[((u * (kN / 8) + n / 8) * 8 + n % 8) * 8 + k % 8] = X[i];
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  uint32_t a[4];
  for (int j = 0; j < 4; ++j) a[j] = A[(warp * 32 + lane) * 4 + j];
  const uint32_t e = E[warp * 32 + lane];
  // Reference: 8 n-tiles of mma.sp.
  float ref[32];
  for (int j = 0; j < 32; ++j) ref[j] = 0.f;
  const uint32_t xnb = static_cast<uint32_t>(__cvta_generic_to_shared(xn));
#pragma unroll
  for (int t = 0; t < kN / 8; ++t) {
    uint32_t b[4];
    ldsm4(b, xnb + ((8 * t + (lane & 7)) * 40 + 8 * (lane >> 3)) * 2);
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    mma_sp<SEL>(d, a, b, e);
    for (int j = 0; j < 4; ++j) ref[4 * t + j] = d[j];
  }
  for (int j = 0; j < 32; ++j) out_ref[tid * 32 + j] = ref[j];
  const uint32_t xcb = static_cast<uint32_t>(__cvta_generic_to_shared(xc));
  for (int v = variant; v == variant; ++v) {
    const uint32_t kstep = (kN / 8) * 128, nstep = 128;  // bytes between core matrices along K, along N
    const uint64_t db = v == 0 ? desc(xcb, kstep, nstep) : desc(xcb, nstep, kstep);
    float d[32];
    for (int j = 0; j < 32; ++j) d[j] = 0.f;
    wg_fence();
    wgmma_sp64<SEL>(d, a, db, e, 0);
    wg_commit();
    wg_wait<0>();
    for (int j = 0; j < 32; ++j) out_wg[(v * 128 + tid) * 32 + j] = d[j];
  }
}

// rate: each CTA (one warpgroup) issues iters × 8 chained wgmma.sp (8
// accumulator sets would need 256 registers; 2 sets of 32 alternate).
__global__ void rate(const uint32_t* A, const uint32_t* E, float* sink, int iters, unsigned long long* cyc) {
  __shared__ __align__(128) uint16_t xc[kN * 32];
  const int tid = threadIdx.x;
  for (int i = tid; i < kN * 32; i += blockDim.x) xc[i] = 0x3c00;
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  uint32_t a[4];
  for (int j = 0; j < 4; ++j) a[j] = A[(tid & 127) * 4 + j];
  const uint32_t e = E[tid & 127];
  const uint32_t xcb = static_cast<uint32_t>(__cvta_generic_to_shared(xc));
  const uint64_t db = desc(xcb, (kN / 8) * 128, 128);
  float d0[32], d1[32];
  for (int j = 0; j < 32; ++j) d0[j] = d1[j] = 0.f;
  __syncthreads();
  const unsigned long long t0 = clock64();
  wg_fence();
  for (int i = 0; i < iters; ++i) {
    wgmma_sp64<0>(d0, a, db, e, 1);
    wgmma_sp64<1>(d1, a, db, e, 1);
    wgmma_sp64<0>(d0, a, db, e, 1);
    wgmma_sp64<1>(d1, a, db, e, 1);
    wg_commit();
    wg_wait<1>();
  }
  wg_wait<0>();
  const unsigned long long t1 = clock64();
  float s = 0.f;
  for (int j = 0; j < 32; ++j) s += d0[j] + d1[j];
  if (s == 1.2345f) sink[0] = s;
  if (tid == 0) atomicMax(cyc, t1 - t0);
}

static uint16_t bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

// main: "wg V S" checks descriptor variant V with selector S (a bad
// variant can fault, which ends the process); "wg rate" times.
int main(int argc, char** argv) {
  srand(7);
  std::vector<uint32_t> A(128 * 4), E(128);
  std::vector<uint16_t> X(kN * 32);
  auto rnd = [] { return (rand() / (float)RAND_MAX) * 2.f - 1.f; };
  for (auto& v : A) v = bf16(rnd()) | (uint32_t)bf16(rnd()) << 16;
  const uint32_t codes[6] = {0x4, 0x8, 0xC, 0x9, 0xD, 0xE};
  for (auto& v : E) {
    v = 0;
    for (int j = 0; j < 8; ++j) v |= codes[rand() % 6] << (4 * j);
  }
  for (auto& v : X) v = bf16(rnd());
  uint32_t *dA, *dE;
  uint16_t* dX;
  float *dR, *dW;
  CK(cudaMalloc(&dA, A.size() * 4));
  CK(cudaMalloc(&dE, E.size() * 4));
  CK(cudaMalloc(&dX, X.size() * 2));
  CK(cudaMalloc(&dR, 128 * 32 * 4));
  CK(cudaMalloc(&dW, 2 * 128 * 32 * 4));
  CK(cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dE, E.data(), E.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dX, X.data(), X.size() * 2, cudaMemcpyHostToDevice));
  const bool timing = argc > 1 && strcmp(argv[1], "rate") == 0;
  for (int sel = 0; sel < 2 && !timing; ++sel) {
    const int variant = argc > 1 ? atoi(argv[1]) : 0;
    if (argc > 2 && atoi(argv[2]) != sel) continue;
    if (sel == 0) check<0><<<1, 128>>>(dA, dE, dX, dR, dW, variant);
    else check<1><<<1, 128>>>(dA, dE, dX, dR, dW, variant);
    CK(cudaDeviceSynchronize());
    std::vector<float> R(128 * 32), W(2 * 128 * 32);
    CK(cudaMemcpy(R.data(), dR, R.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(W.data(), dW, W.size() * 4, cudaMemcpyDeviceToHost));
    double ref2 = 0;
    for (float r : R) ref2 += r * r;
    for (int v = variant; v == variant; ++v) {
      int exact = 0;
      double worst = 0;
      for (int i = 0; i < 128 * 32; ++i) {
        const float w = W[v * 128 * 32 + i];
        exact += w == R[i];
        worst = fmax(worst, fabs(w - R[i]));
      }
      printf("selector %d, descriptor variant %d: %d of %d elements equal, largest difference %.3g (rms of the product %.3g)\n",
             sel, v, exact, 128 * 32, worst, sqrt(ref2 / R.size()));
    }
  }
  if (!timing) return 0;
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  unsigned long long* cyc;
  CK(cudaMalloc(&cyc, 8));
  for (int ctas : {1, sms, 2 * sms}) {
    CK(cudaMemset(cyc, 0, 8));
    const int iters = 4096;
    rate<<<ctas, 128>>>(dA, dE, dW, iters, cyc);
    CK(cudaDeviceSynchronize());
    unsigned long long c;
    CK(cudaMemcpy(&c, cyc, 8, cudaMemcpyDeviceToHost));
    printf("wgmma.sp m64n64k32 RS, %d CTAs of one warpgroup: %.2f cycles per instruction per warpgroup "
           "(mma.sp m16n8k32 equivalent: %.2f cycles per sub-partition)\n",
           ctas, c / (4.0 * iters), c / (4.0 * iters) / 8);
  }
  return 0;
}
