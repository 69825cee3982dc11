package kernels

// The PTX is built on a machine with the CUDA toolkit (nvcc 13.0) and
// committed; Go builds embed it and need no toolkit. tools/gpu/check_ptx.sh
// re-runs these exact commands and diffs the results against ptx/. The
// second is the decode kernel's warpgroup form, for the arch-specific
// sm_90a target (H100, H200).
//
//go:generate nvcc -arch=compute_80 -ptx -O3 -std=c++17 -o ptx/sfsurgery.ptx cuda/sfsurgery.cu
//go:generate nvcc -arch=compute_90a -ptx -O3 -std=c++17 -o ptx/sfsurgery_sm90a.ptx cuda/sfsurgery_sm90a.cu
