#!/usr/bin/env bash
# clang_check.sh: compile-check kernels/cuda/ without the CUDA toolkit.
#
# Runs clang's CUDA front end (device side only) on sfsurgery.cu for
# sm_80, sm_90 and sm_90a, and on sfsurgery_sm90a.cu for sm_90a, with a
# minimal stand-in for the CUDA headers (nothing is linked or run), and
# reports the kernels each target defines.
# It catches C++ and inline-asm operand errors on the Go machine, before
# a device call; it is not the nvcc build (check_ptx.sh is). Needs clang
# 17 or newer (CLANG=... names another).
set -euo pipefail
kdir=$(cd "$(dirname "$0")/../../kernels" && pwd)
clang=${CLANG:-$(command -v clang++ || ls /usr/lib/llvm-*/bin/clang++ 2>/dev/null | sort -V | tail -1)}
if [[ -z $clang ]]; then
	echo "clang_check: no clang++ found (set CLANG)" >&2
	exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/cuda_fp16.h" <<'H'
#pragma once
#include "__clang_cuda_builtin_vars.h"
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))
typedef unsigned long size_t;
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
__device__ inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
__device__ inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
__device__ inline float fmaf(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
__device__ inline float __uint_as_float(unsigned v) { return __builtin_bit_cast(float, v); }
__device__ inline unsigned __float_as_uint(float v) { return __builtin_bit_cast(unsigned, v); }
__device__ inline void __syncwarp(unsigned m = 0xffffffffu) { __nvvm_bar_warp_sync(m); }
__device__ inline float __shfl_sync(unsigned m, float v, int l) { return __uint_as_float(__nvvm_shfl_sync_idx_i32(m, __float_as_uint(v), l, 31)); }
__device__ inline unsigned __shfl_sync(unsigned m, unsigned v, int l) { return __nvvm_shfl_sync_idx_i32(m, v, l, 31); }
__device__ inline int min(int a, int b) { return a < b ? a : b; }
__device__ inline int max(int a, int b) { return a > b ? a : b; }
__device__ inline size_t __cvta_generic_to_shared(const void* p) { return (size_t)p; }
struct __half { unsigned short x; };
__device__ inline __half __ushort_as_half(unsigned short v) { return {v}; }
__device__ inline float __half2float(__half) { return 0.f; }
H
cat >"$tmp/stdint.h" <<'H'
#pragma once
typedef unsigned short uint16_t; typedef unsigned int uint32_t; typedef unsigned long long uint64_t; typedef int int32_t;
H
status=0
# check UNIT ARCH: one translation unit for one target.
check() {
	local unit=$1 arch=$2
	if ! "$clang" -x cuda --cuda-gpu-arch=$arch --cuda-device-only -nocudainc -nocudalib \
		-Xclang -target-feature -Xclang +ptx80 -std=c++17 -O1 -Wno-pass-failed -Wno-unknown-cuda-version \
		-I"$tmp" -I"$kdir/cuda" -S -o "$tmp/$unit.$arch.s" "$kdir/cuda/$unit.cu" 2>"$tmp/$unit.$arch.log"; then
		status=1
	fi
	grep -E 'error|warning' -A3 "$tmp/$unit.$arch.log" | head -30 || true
	echo "clang_check: $unit.cu for $arch: $(grep -c '^\.visible \.entry\|^\.entry' "$tmp/$unit.$arch.s" 2>/dev/null || echo 0) kernels"
}
for arch in sm_80 sm_90 sm_90a; do
	check sfsurgery $arch
done
check sfsurgery_sm90a sm_90a
exit $status
