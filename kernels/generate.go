package kernels

// The PTX is built on a machine with the CUDA toolkit (nvcc 13.0) and
// committed; Go builds embed it and need no toolkit. scripts/check_ptx.sh
// re-runs this exact command and diffs the result against ptx/.
//
//go:generate nvcc -arch=compute_80 -ptx -O3 -std=c++17 -o ptx/sfsurgery.ptx cuda/sfsurgery.cu
