package cuda

import "fmt"

// Result is a CUresult: the status every driver call returns.
type Result int32

// The results the binding and its callers tell apart (cuda.h).
const (
	Success                        Result = 0   // CUDA_SUCCESS
	ErrorNoBinaryForGPU            Result = 209 // CUDA_ERROR_NO_BINARY_FOR_GPU
	ErrorInvalidPTX                Result = 218 // CUDA_ERROR_INVALID_PTX
	ErrorJITCompilerNotFound       Result = 221 // CUDA_ERROR_JIT_COMPILER_NOT_FOUND
	ErrorUnsupportedPTXVersion     Result = 222 // CUDA_ERROR_UNSUPPORTED_PTX_VERSION
	ErrorCooperativeLaunchTooLarge Result = 720 // CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
	ErrorNotSupported              Result = 801 // CUDA_ERROR_NOT_SUPPORTED
	ErrorInvalidClusterSize        Result = 912 // CUDA_ERROR_INVALID_CLUSTER_SIZE
)

// DeviceAttribute is a CUdevice_attribute.
type DeviceAttribute int32

// The device attributes the binding's callers read.
const (
	AttrMultiprocessorCount          DeviceAttribute = 16 // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	AttrL2CacheSize                  DeviceAttribute = 38 // CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
	AttrComputeCapabilityMajor       DeviceAttribute = 75 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	AttrComputeCapabilityMinor       DeviceAttribute = 76 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	AttrMaxSharedMemoryPerSM         DeviceAttribute = 81 // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
	AttrMaxSharedMemoryPerBlockOptin DeviceAttribute = 97 // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
)

// FunctionAttribute is a CUfunction_attribute.
type FunctionAttribute int32

// The function attributes the binding's callers set.
const (
	FuncAttrMaxDynamicSharedSize    FunctionAttribute = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
	FuncAttrPreferredSharedCarveout FunctionAttribute = 9 // CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
)

// jitOption is a CUjit_option of cuModuleLoadDataEx.
type jitOption int32

// The JIT options ModuleLoadData passes: the logs it returns.
const (
	jitInfoLogBuffer      jitOption = 3 // CU_JIT_INFO_LOG_BUFFER
	jitInfoLogBufferSize  jitOption = 4 // CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES
	jitErrorLogBuffer     jitOption = 5 // CU_JIT_ERROR_LOG_BUFFER
	jitErrorLogBufferSize jitOption = 6 // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
)

// launchAttributeID is a CUlaunchAttributeID of cuLaunchKernelEx.
type launchAttributeID uint32

// The launch attributes Launch sets.
const (
	launchAttrCooperative      launchAttributeID = 2 // CU_LAUNCH_ATTRIBUTE_COOPERATIVE
	launchAttrClusterDimension launchAttributeID = 4 // CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
)

// CaptureMode is a CUstreamCaptureMode.
type CaptureMode int32

// CaptureRelaxed is CU_STREAM_CAPTURE_MODE_RELAXED: the capture does not
// forbid other threads' calls.
const CaptureRelaxed CaptureMode = 2

// DataType is a cudaDataType_t (library_types.h): the element type of the
// libraries' matrices (cuBLASLt, cuSPARSELt).
type DataType int32

// The element types the binding's callers pass.
const (
	R32F  DataType = 0  // CUDA_R_32F
	R16F  DataType = 2  // CUDA_R_16F
	R16BF DataType = 14 // CUDA_R_16BF
)

// String returns the safetensors name of the type ("F32", "F16",
// "BF16"), or "DataType(N)" for another value.
func (t DataType) String() string {
	switch t {
	case R32F:
		return "F32"
	case R16F:
		return "F16"
	case R16BF:
		return "BF16"
	}
	return fmt.Sprintf("DataType(%d)", int32(t))
}
