package kernels

import (
	"runtime"
	"unsafe"
)

// maxKernelArgs bounds the parameters of the package's kernels.
const maxKernelArgs = 10

// kernelParams is the argument block of one launch: each value sits in an
// 8-byte slot (a 4-byte int in the low half) and ptrs points at the slots,
// as cuLaunchKernel's kernelParams wants.
type kernelParams struct {
	vals [maxKernelArgs]uint64
	ptrs [maxKernelArgs]unsafe.Pointer
}

// dim3 is a grid or block size.
type dim3 [3]uint32

// launch queues kernel fn on the device's stream. args are device pointers
// or int32 values widened with i32. It runs with the context current and
// the mutex held.
func (d *Device) launch(name string, fn uintptr, grid, block dim3, args ...uint64) error {
	return d.launchShared(name, fn, grid, block, 0, args...)
}

// launchShared is launch with smem bytes of dynamic shared memory.
func (d *Device) launchShared(name string, fn uintptr, grid, block dim3, smem int, args ...uint64) error {
	return d.launchWith(false, name, fn, grid, block, smem, args...)
}

// launchWith is launchShared, as a cooperative launch (cuLaunchCooperativeKernel:
// every CTA of the grid resident at once, or an error) when coop is set.
func (d *Device) launchWith(coop bool, name string, fn uintptr, grid, block dim3, smem int, args ...uint64) error {
	if len(args) > maxKernelArgs {
		return argError("launch %s: %d arguments, at most %d", name, len(args), maxKernelArgs)
	}
	p := new(kernelParams)
	var pin runtime.Pinner
	pin.Pin(p)
	defer pin.Unpin()
	for i, v := range args {
		p.vals[i] = v
		p.ptrs[i] = unsafe.Pointer(&p.vals[i])
	}
	if coop {
		r := d.drv.cuLaunchCoop(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], uint32(smem), d.stream,
			unsafe.Pointer(&p.ptrs[0]))
		runtime.KeepAlive(p)
		return d.drv.check("cuLaunchCooperativeKernel("+name+")", r)
	}
	r := d.drv.cuLaunch(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], uint32(smem), d.stream,
		unsafe.Pointer(&p.ptrs[0]), nil)
	runtime.KeepAlive(p)
	return d.drv.check("cuLaunchKernel("+name+")", r)
}

// i32 widens an int kernel argument; the kernel reads the low 4 bytes.
func i32(v int) uint64 { return uint64(uint32(int32(v))) }
