// Package kernels runs sfsurgery's compressed 2:4 weights on an NVIDIA GPU,
// without cgo.
//
// It holds the CUDA sources (cuda/), the PTX built from them (ptx/, embedded
// in the binary) and Go bindings to the CUDA driver API that load
// libcuda.so.1 at run time through github.com/ebitengine/purego, so a binary
// built with CGO_ENABLED=0 runs on machines with and without a GPU.
//
// The kernels read the weights exactly as sfsurgery writes them: PyTorch's
// CUTLASS layout, a packed tensor [out][in/2] and an int16 meta tensor in
// the reordered layout (docs/formats.md §1). [Device.SparseMatmul]
// feeds them to the sparse tensor cores (mma.sp, sm_80 and newer),
// [Device.DecodeAmpere] expands them back to the dense pruned weight, and
// [Device.DenseMatmul] multiplies a dense weight through cuBLASLt when the
// library can be found, else through a kernel of this package.
//
// # Requirements
//
// A GPU of compute capability 8.0 or newer (A100, A10, L4, RTX 30xx/40xx,
// H100, H200) and a driver that accepts the embedded PTX: it is built by
// nvcc 13.0 and declares PTX ISA 9.0, which needs a CUDA 13.0 driver (r580
// or newer). Every condition that keeps this machine from running GPU checks
// at all (no libcuda.so.1, no device, an older GPU, an older driver) is
// reported as an error wrapping [ErrUnavailable], so callers can fall back
// to the CPU and say why.
//
// # Threads and contexts
//
// A [Device] uses the device's primary context. CUDA makes a context current
// per OS thread, so every method locks its goroutine to its OS thread, makes
// the primary context current, does its work and unlocks; a mutex in the
// Device serialises the methods. A Device is therefore safe for concurrent
// use, and its work runs in call order on one stream.
//
// Kernel launches are asynchronous: a launch error is returned at once, an
// error while the kernel runs shows at the next [Device.Synchronize] or
// [Buffer.Download].
package kernels
