package cuda

import (
	"fmt"
	"strconv"
	"unsafe"

	"github.com/sfsurgery/sfsurgery/internal/dynlib"
)

// Library is the file name of the CUDA driver library that [Load] opens
// by default.
const Library = "libcuda.so.1"

// Driver is the loaded CUDA driver API. Its entry points are bound at run
// time: CUresult is returned as int32; handles (CUcontext, CUmodule,
// CUfunction, CUstream, CUevent) as uintptr; CUdevice as int32;
// CUdeviceptr as uint64.
type Driver struct {
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

	// Optional (bindOptional): nil where the driver lacks them.
	cuTensorMapEncodeTiled func(tm *TensorMap, dt int32, rank uint32, addr uint64, dims, strides *uint64,
		box, elemStrides *uint32, interleave, swizzle, l2promo, oobFill int32) int32
}

// Load opens lib (normally [Library]) and binds every entry point. When
// the library cannot be opened the error wraps [ErrNoLibrary]; otherwise
// it says which entry point a driver too old lacks ("LIB lacks NAME"),
// or which one could not be bound. An optional entry point the driver
// lacks is no error here: its calls fail with [ErrNoSymbol].
func Load(lib string) (*Driver, error) {
	h, err := dynlib.Open(lib)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNoLibrary, lib, err)
	}
	d := new(Driver)
	syms := []dynlib.Symbol{
		dynlib.Sym(&d.cuInit, "cuInit"),
		dynlib.Sym(&d.cuDriverGetVersion, "cuDriverGetVersion"),
		dynlib.Sym(&d.cuDeviceGetCount, "cuDeviceGetCount"),
		dynlib.Sym(&d.cuDeviceGet, "cuDeviceGet"),
		dynlib.Sym(&d.cuDeviceGetName, "cuDeviceGetName"),
		dynlib.Sym(&d.cuDeviceGetAttribute, "cuDeviceGetAttribute"),
		dynlib.Sym(&d.cuDeviceTotalMem, "cuDeviceTotalMem_v2"),
		dynlib.Sym(&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
		dynlib.Sym(&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
		dynlib.Sym(&d.cuCtxSetCurrent, "cuCtxSetCurrent"),
		dynlib.Sym(&d.cuCtxSynchronize, "cuCtxSynchronize"),
		dynlib.Sym(&d.cuMemAlloc, "cuMemAlloc_v2"),
		dynlib.Sym(&d.cuMemFree, "cuMemFree_v2"),
		dynlib.Sym(&d.cuMemcpyHtoD, "cuMemcpyHtoD_v2"),
		dynlib.Sym(&d.cuMemcpyDtoH, "cuMemcpyDtoH_v2"),
		dynlib.Sym(&d.cuMemsetD8, "cuMemsetD8_v2"),
		dynlib.Sym(&d.cuMemcpyDtoDA, "cuMemcpyDtoDAsync_v2"),
		dynlib.Sym(&d.cuMemsetD32A, "cuMemsetD32Async"),
		dynlib.Sym(&d.cuModuleLoad, "cuModuleLoadDataEx"),
		dynlib.Sym(&d.cuModuleUnld, "cuModuleUnload"),
		dynlib.Sym(&d.cuModuleGetFn, "cuModuleGetFunction"),
		dynlib.Sym(&d.cuFuncSetAttr, "cuFuncSetAttribute"),
		dynlib.Sym(&d.cuLaunch, "cuLaunchKernel"),
		dynlib.Sym(&d.cuLaunchCoop, "cuLaunchCooperativeKernel"),
		dynlib.Sym(&d.cuLaunchEx, "cuLaunchKernelEx"),
		dynlib.Sym(&d.cuStreamCreate, "cuStreamCreate"),
		dynlib.Sym(&d.cuStreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy"),
		dynlib.Sym(&d.cuEventCreate, "cuEventCreate"),
		dynlib.Sym(&d.cuEventRecord, "cuEventRecord"),
		dynlib.Sym(&d.cuEventSync, "cuEventSynchronize"),
		dynlib.Sym(&d.cuEventElapsed, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
		dynlib.Sym(&d.cuEventDestroy, "cuEventDestroy_v2", "cuEventDestroy"),
		dynlib.Sym(&d.cuStreamBeginCapture, "cuStreamBeginCapture_v2"),
		dynlib.Sym(&d.cuStreamEndCapture, "cuStreamEndCapture"),
		dynlib.Sym(&d.cuGraphInstantiate, "cuGraphInstantiateWithFlags"),
		dynlib.Sym(&d.cuGraphLaunch, "cuGraphLaunch"),
		dynlib.Sym(&d.cuGraphExecDestroy, "cuGraphExecDestroy"),
		dynlib.Sym(&d.cuGraphDestroy, "cuGraphDestroy"),
		dynlib.Sym(&d.cuGetErrorName, "cuGetErrorName"),
		dynlib.Sym(&d.cuGetErrorString, "cuGetErrorString"),
	}
	if err := dynlib.BindAll(h, lib, syms); err != nil {
		return nil, err
	}
	if err := d.bindOptional(func(s dynlib.Symbol) error { return dynlib.Bind(h, lib, s) }); err != nil {
		return nil, err
	}
	return d, nil
}

// check turns a CUresult into nil or an *Error for op.
func (d *Driver) check(op string, r int32) error {
	if Result(r) == Success {
		return nil
	}
	return &Error{Op: op, Code: Result(r), Name: d.errorName(r)}
}

// errorName returns the CUDA name of a result code, e.g.
// "CUDA_ERROR_OUT_OF_MEMORY".
func (d *Driver) errorName(r int32) string {
	var p *byte
	if Result(d.cuGetErrorName(r, &p)) == Success && p != nil {
		if s := dynlib.CString(p, 128); s != "" {
			return s
		}
	}
	return "CUDA_ERROR_" + strconv.Itoa(int(r))
}
