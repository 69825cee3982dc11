// decode.cuh: PyTorch CUTLASS layout (packed + meta) back to the dense,
// pruned weight W[N][K], on the GPU. Works on raw 16-bit values, so one kernel
// serves BF16 and F16. Pruned slots become +0.0 (bits 0x0000).
//
// Thread i decodes logical meta word M[r][j] (16 dense columns, 4 groups):
// it finds that int16 in the stored layout with the closed form of
// docs/formats.md §1.5, reads the 4 packed pairs and writes 32 bytes.
// Requirements (checked by the Go caller): N % 32 == 0, K % 64 == 0.
#pragma once

#include "common.cuh"

namespace sfs {
namespace decode {

constexpr int kThreads = 256;

// meta_index returns the int16 index of logical meta word M[r][j] in the
// stored (reordered) meta of a weight with N rows.
__device__ __forceinline__ size_t meta_index(int r, int j, int N) {
  const int b = r >> 5;
  const int rr = r & 31;
  const int upper = rr >> 4;  // rows 16..31 of the block: t = 2, 3
  const int jj = rr & 7;
  const int half = (rr >> 3) & 1;  // rows 8..15 (or 24..31) sit in the high 16 bits
  const int t = upper * 2 + (j & 1);
  const size_t word = static_cast<size_t>(j >> 1) * N + b * 32 + jj * 4 + t;
  return word * 2 + half;
}

// slot picks the value a dense slot gets from one packed pair: i1 wins over
// i0 (a later scatter), anything else is +0.0.
__device__ __forceinline__ uint32_t slot(int s, uint32_t nib, uint32_t pair) {
  const uint32_t i0 = nib & 3u;
  const uint32_t i1 = nib >> 2;
  if (static_cast<uint32_t>(s) == i1) return pair >> 16;
  if (static_cast<uint32_t>(s) == i0) return pair & 0xffffu;
  return 0u;
}

}  // namespace decode
}  // namespace sfs

// decode_ampere16: grid ceil(N·K/16 / 256), block 256. W is [N][K] 16-bit,
// P is [N][K/2] 16-bit, Ms is the stored int16 meta (N·K/16 values).
extern "C" __global__ void __launch_bounds__(sfs::decode::kThreads)
    decode_ampere16(uint16_t* __restrict__ W, const uint16_t* __restrict__ P, const uint16_t* __restrict__ Ms,
                    int N, int K) {
  const int words = K / 16;
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<long long>(N) * words) return;
  const int r = static_cast<int>(idx / words);
  const int j = static_cast<int>(idx % words);
  const uint32_t m = Ms[sfs::decode::meta_index(r, j, N)];
  const uint4 pairs = *reinterpret_cast<const uint4*>(P + static_cast<size_t>(r) * (K / 2) + j * 8);
  const uint32_t pr[4] = {pairs.x, pairs.y, pairs.z, pairs.w};
  uint32_t out[8];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t nib = (m >> (4 * q)) & 0xfu;
    const uint32_t v0 = sfs::decode::slot(0, nib, pr[q]);
    const uint32_t v1 = sfs::decode::slot(1, nib, pr[q]);
    const uint32_t v2 = sfs::decode::slot(2, nib, pr[q]);
    const uint32_t v3 = sfs::decode::slot(3, nib, pr[q]);
    out[2 * q] = v0 | (v1 << 16);
    out[2 * q + 1] = v2 | (v3 << 16);
  }
  uint4* dst = reinterpret_cast<uint4*>(W + static_cast<size_t>(r) * K + j * 16);
  dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
  dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
}
