package kernels

import (
	"errors"
	"fmt"
)

// ErrUnavailable is wrapped by every error that means this machine cannot
// run GPU checks at all: no CUDA driver, no device, a device older than
// sm_80, or a driver too old for the embedded PTX.
var ErrUnavailable = errors.New("kernels: GPU unavailable")

// ErrArgument is wrapped by errors about invalid arguments: sizes, shapes,
// data types, or buffers that do not fit the operation.
var ErrArgument = errors.New("kernels: invalid argument")

// ErrClosed is wrapped by errors from a closed Device or a freed Buffer.
var ErrClosed = errors.New("kernels: use of closed device or freed buffer")

// CUDAError is a failed call into the CUDA driver or cuBLASLt.
type CUDAError struct {
	Op   string // the function called, e.g. "cuMemAlloc_v2"
	Code int    // its result code (CUresult or cublasStatus_t)
	Name string // the code's name, e.g. "CUDA_ERROR_OUT_OF_MEMORY"
}

// Error returns "OP: NAME (CODE)", e.g.
// "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)".
func (e *CUDAError) Error() string {
	return fmt.Sprintf("%s: %s (%d)", e.Op, e.Name, e.Code)
}

// CUDA driver result codes that change what an error means.
const (
	cudaSuccess                 = 0
	cudaErrorUnsupportedPTX     = 222 // CUDA_ERROR_UNSUPPORTED_PTX_VERSION
	cudaErrorInvalidPTX         = 218 // CUDA_ERROR_INVALID_PTX
	cudaErrorNoBinaryForGPU     = 209 // CUDA_ERROR_NO_BINARY_FOR_GPU
	cudaErrorJITCompilerMissing = 221 // CUDA_ERROR_JIT_COMPILER_NOT_FOUND
	cudaErrorCoopTooLarge       = 720 // CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
	cudaErrorNotSupported       = 801 // CUDA_ERROR_NOT_SUPPORTED
	cudaErrorClusterSize        = 912 // CUDA_ERROR_INVALID_CLUSTER_SIZE
)

// unavailable returns an error wrapping ErrUnavailable (and cause, if any)
// with a one-line reason.
func unavailable(reason string, cause error) error {
	if cause == nil {
		return fmt.Errorf("%w: %s", ErrUnavailable, reason)
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, reason, cause)
}

// argError returns an error wrapping ErrArgument.
func argError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrArgument, fmt.Sprintf(format, args...))
}

// wrap prefixes err with the package name unless it already wraps one of
// the package's sentinels (whose messages carry the prefix).
func wrap(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrArgument) || errors.Is(err, ErrClosed) {
		return err
	}
	return fmt.Errorf("kernels: %w", err)
}
