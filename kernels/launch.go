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
	return d.launchWith(launchOpts{}, name, fn, grid, block, smem, args...)
}

// launchOpts are what a launch asks of the scheduler beyond its grid.
type launchOpts struct {
	// coop: a cooperative launch (every CTA of the grid resident at once,
	// or CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE).
	coop bool
	// cluster: CTAs per thread-block cluster along each grid dimension
	// (sm_90: a cluster's CTAs run at once on one GPC); zero: none.
	cluster dim3
}

// launchConfig mirrors CUlaunchConfig (cuda.h, CUDA 12 and later) for
// cuLaunchKernelEx: grid, block, dynamic shared memory, stream and the
// attributes (kernels/scripts/cuabi.c checks the layout against cuda.h).
type launchConfig struct {
	grid, block dim3
	smem        uint32
	_           uint32
	stream      uintptr
	attrs       *launchAttr
	nattrs      uint32
	_           uint32
}

// launchAttr mirrors CUlaunchAttribute: an id, padding, and a 64-byte
// value union whose first words hold the value (the cluster's x, y, z, or
// 1 for the cooperative flag).
type launchAttr struct {
	id  uint32
	_   uint32
	val [16]uint32
}

// CUlaunchAttributeID values (cuda.h).
const (
	launchAttrCoop    = 2 // CU_LAUNCH_ATTRIBUTE_COOPERATIVE
	launchAttrCluster = 4 // CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
)

// launchWith is launchShared with the options o: cuLaunchKernel for none,
// cuLaunchCooperativeKernel for a cooperative launch alone, and
// cuLaunchKernelEx with its attributes for clusters.
func (d *Device) launchWith(o launchOpts, name string, fn uintptr, grid, block dim3, smem int, args ...uint64) error {
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
	params := unsafe.Pointer(&p.ptrs[0])
	if o.cluster != (dim3{}) {
		attrs := new([2]launchAttr)
		attrs[0].id = launchAttrCluster
		copy(attrs[0].val[:], o.cluster[:])
		n := uint32(1)
		if o.coop {
			attrs[1].id, attrs[1].val[0] = launchAttrCoop, 1
			n++
		}
		cfg := &launchConfig{grid: grid, block: block, smem: uint32(smem), stream: d.stream, attrs: &attrs[0], nattrs: n}
		pin.Pin(attrs)
		pin.Pin(cfg)
		r := d.drv.cuLaunchEx(cfg, fn, params, nil)
		runtime.KeepAlive(p)
		return d.drv.check("cuLaunchKernelEx("+name+")", r)
	}
	if o.coop {
		r := d.drv.cuLaunchCoop(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], uint32(smem), d.stream, params)
		runtime.KeepAlive(p)
		return d.drv.check("cuLaunchCooperativeKernel("+name+")", r)
	}
	r := d.drv.cuLaunch(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], uint32(smem), d.stream, params, nil)
	runtime.KeepAlive(p)
	return d.drv.check("cuLaunchKernel("+name+")", r)
}

// i32 widens an int kernel argument; the kernel reads the low 4 bytes.
func i32(v int) uint64 { return uint64(uint32(int32(v))) }
