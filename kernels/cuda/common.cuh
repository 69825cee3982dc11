// common.cuh: small device helpers shared by the sfsurgery kernels.
//
// Everything here targets sm_80 (compute_80 PTX): cp.async and mma.sp need it.
#pragma once

#include <stdint.h>
#include <cuda_fp16.h>

namespace sfs {

// Element types of the 16-bit weights and activations.
struct BF16 {};
struct F16 {};

// to_f32 widens one 16-bit value, given as raw bits.
__device__ __forceinline__ float to_f32(BF16, uint16_t v) {
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}
__device__ __forceinline__ float to_f32(F16, uint16_t v) {
  return __half2float(__ushort_as_half(v));
}

// round16 rounds v to the element type, to nearest even, as raw bits: the
// cvt.rn that __float2bfloat16_rn and __float2half_rn compile to (written
// out here so that the units need no cuda_bf16.h).
__device__ __forceinline__ uint16_t round16(BF16, float v) {
  uint16_t r;
  asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(r) : "f"(v));
  return r;
}
__device__ __forceinline__ uint16_t round16(F16, float v) {
  uint16_t r;
  asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(r) : "f"(v));
  return r;
}

// round16x2 is round16 of lo and hi, packed: lo in the low 16 bits. (The
// x2 forms of cvt put their first operand in the high half.)
__device__ __forceinline__ uint32_t round16x2(BF16, float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ uint32_t round16x2(F16, float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// cp_async16 copies 16 bytes from global to shared memory without going
// through registers. When pred is false nothing is read (src-size 0) and the
// 16 destination bytes are zero-filled, so out-of-range rows become zeros.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool pred) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes)
               : "memory");
}

// cp_async_commit closes the current group of cp.async copies.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// cp_async_wait blocks until at most N groups of this thread are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace sfs
