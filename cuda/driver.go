package kernels

import (
	"fmt"
	"strconv"
	"unsafe"
)

// driverLibrary is the CUDA driver library opened at run time.
const driverLibrary = "libcuda.so.1"

// driver holds the CUDA driver API entry points, bound at run time.
// CUresult is returned as int32; handles (CUcontext, CUmodule, CUfunction,
// CUstream, CUevent) as uintptr; CUdevice as int32; CUdeviceptr as uint64.
type driver struct {
	cuInit               func(flags uint32) int32
	cuDriverGetVersion   func(v *int32) int32
	cuDeviceGetCount     func(n *int32) int32
	cuDeviceGet          func(dev *int32, ordinal int32) int32
	cuDeviceGetName      func(name []byte, n int32, dev int32) int32
	cuDeviceGetAttribute func(v *int32, attr int32, dev int32) int32
	cuDeviceTotalMem     func(bytes *uint64, dev int32) int32

	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) int32
	cuDevicePrimaryCtxRelease func(dev int32) int32
	cuCtxSetCurrent           func(ctx uintptr) int32
	cuCtxSynchronize          func() int32

	cuMemAlloc    func(p *uint64, n uint64) int32
	cuMemFree     func(p uint64) int32
	cuMemcpyHtoD  func(dst uint64, src []byte, n uint64) int32
	cuMemcpyDtoH  func(dst []byte, src uint64, n uint64) int32
	cuMemsetD8    func(dst uint64, v uint8, n uint64) int32
	cuMemcpyDtoDA func(dst, src uint64, n uint64, stream uintptr) int32
	cuMemsetD32A  func(dst uint64, v uint32, n uint64, stream uintptr) int32
	cuModuleLoad  func(mod *uintptr, image []byte, nopt uint32, opts []int32, vals []uintptr) int32
	cuModuleUnld  func(mod uintptr) int32
	cuModuleGetFn func(fn *uintptr, mod uintptr, name string) int32
	cuFuncSetAttr func(fn uintptr, attr int32, v int32) int32
	cuLaunch      func(fn uintptr, gx, gy, gz, bx, by, bz, shmem uint32, stream uintptr,
		params unsafe.Pointer, extra unsafe.Pointer) int32
	cuLaunchCoop func(fn uintptr, gx, gy, gz, bx, by, bz, shmem uint32, stream uintptr,
		params unsafe.Pointer) int32
	cuLaunchEx func(cfg *launchConfig, fn uintptr, params unsafe.Pointer, extra unsafe.Pointer) int32

	cuStreamCreate  func(s *uintptr, flags uint32) int32
	cuStreamDestroy func(s uintptr) int32
	cuEventCreate   func(e *uintptr, flags uint32) int32
	cuEventRecord   func(e uintptr, s uintptr) int32
	cuEventSync     func(e uintptr) int32
	cuEventElapsed  func(ms *float32, start, end uintptr) int32
	cuEventDestroy  func(e uintptr) int32

	cuStreamBeginCapture func(s uintptr, mode int32) int32
	cuStreamEndCapture   func(s uintptr, g *uintptr) int32
	cuGraphInstantiate   func(exec *uintptr, g uintptr, flags uint64) int32
	cuGraphLaunch        func(exec uintptr, s uintptr) int32
	cuGraphExecDestroy   func(exec uintptr) int32
	cuGraphDestroy       func(g uintptr) int32

	cuGetErrorName   func(code int32, s **byte) int32
	cuGetErrorString func(code int32, s **byte) int32
}

// loadDriver opens lib (normally libcuda.so.1) and binds every entry point.
// Any failure wraps ErrUnavailable: without the library, or with one too old
// to have these symbols, this machine cannot run the GPU checks.
func loadDriver(lib string) (*driver, error) {
	h, err := dlopen(lib)
	if err != nil {
		return nil, unavailable(fmt.Sprintf("no CUDA driver (%s not found)", lib), nil)
	}
	d := new(driver)
	syms := []symbol{
		sym(&d.cuInit, "cuInit"),
		sym(&d.cuDriverGetVersion, "cuDriverGetVersion"),
		sym(&d.cuDeviceGetCount, "cuDeviceGetCount"),
		sym(&d.cuDeviceGet, "cuDeviceGet"),
		sym(&d.cuDeviceGetName, "cuDeviceGetName"),
		sym(&d.cuDeviceGetAttribute, "cuDeviceGetAttribute"),
		sym(&d.cuDeviceTotalMem, "cuDeviceTotalMem_v2"),
		sym(&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
		sym(&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
		sym(&d.cuCtxSetCurrent, "cuCtxSetCurrent"),
		sym(&d.cuCtxSynchronize, "cuCtxSynchronize"),
		sym(&d.cuMemAlloc, "cuMemAlloc_v2"),
		sym(&d.cuMemFree, "cuMemFree_v2"),
		sym(&d.cuMemcpyHtoD, "cuMemcpyHtoD_v2"),
		sym(&d.cuMemcpyDtoH, "cuMemcpyDtoH_v2"),
		sym(&d.cuMemsetD8, "cuMemsetD8_v2"),
		sym(&d.cuMemcpyDtoDA, "cuMemcpyDtoDAsync_v2"),
		sym(&d.cuMemsetD32A, "cuMemsetD32Async"),
		sym(&d.cuModuleLoad, "cuModuleLoadDataEx"),
		sym(&d.cuModuleUnld, "cuModuleUnload"),
		sym(&d.cuModuleGetFn, "cuModuleGetFunction"),
		sym(&d.cuFuncSetAttr, "cuFuncSetAttribute"),
		sym(&d.cuLaunch, "cuLaunchKernel"),
		sym(&d.cuLaunchCoop, "cuLaunchCooperativeKernel"),
		sym(&d.cuLaunchEx, "cuLaunchKernelEx"),
		sym(&d.cuStreamCreate, "cuStreamCreate"),
		sym(&d.cuStreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy"),
		sym(&d.cuEventCreate, "cuEventCreate"),
		sym(&d.cuEventRecord, "cuEventRecord"),
		sym(&d.cuEventSync, "cuEventSynchronize"),
		sym(&d.cuEventElapsed, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
		sym(&d.cuEventDestroy, "cuEventDestroy_v2", "cuEventDestroy"),
		sym(&d.cuStreamBeginCapture, "cuStreamBeginCapture_v2"),
		sym(&d.cuStreamEndCapture, "cuStreamEndCapture"),
		sym(&d.cuGraphInstantiate, "cuGraphInstantiateWithFlags"),
		sym(&d.cuGraphLaunch, "cuGraphLaunch"),
		sym(&d.cuGraphExecDestroy, "cuGraphExecDestroy"),
		sym(&d.cuGraphDestroy, "cuGraphDestroy"),
		sym(&d.cuGetErrorName, "cuGetErrorName"),
		sym(&d.cuGetErrorString, "cuGetErrorString"),
	}
	if err := bindAll(h, lib, syms); err != nil {
		return nil, unavailable("CUDA driver too old", err)
	}
	return d, nil
}

// check turns a CUresult into nil or a *CUDAError for op.
func (d *driver) check(op string, r int32) error {
	if r == cudaSuccess {
		return nil
	}
	return &CUDAError{Op: op, Code: int(r), Name: d.errorName(r)}
}

// errorName returns the CUDA name of a result code, e.g.
// "CUDA_ERROR_OUT_OF_MEMORY".
func (d *driver) errorName(r int32) string {
	var p *byte
	if d.cuGetErrorName(r, &p) == cudaSuccess && p != nil {
		if s := cString(p, 128); s != "" {
			return s
		}
	}
	return "CUDA_ERROR_" + strconv.Itoa(int(r))
}
