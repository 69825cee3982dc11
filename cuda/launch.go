package cuda

import (
	"fmt"
	"runtime"
	"unsafe"
)

// MaxKernelParams bounds the parameters of a [Driver.Launch].
const MaxKernelParams = 16

// Dim3 is a grid, block or cluster size: x, y, z.
type Dim3 [3]uint32

// LaunchConfig is what a launch asks of the scheduler besides the kernel
// and its parameters.
type LaunchConfig struct {
	Grid, Block Dim3
	SharedBytes int    // dynamic shared memory per CTA
	Stream      Stream // the stream the launch is queued on
	// Cooperative asks for every CTA of the grid resident at once, or
	// CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE.
	Cooperative bool
	// Cluster is the CTAs per thread-block cluster along each grid
	// dimension (sm_90: a cluster's CTAs run at once on one GPC); zero:
	// none.
	Cluster Dim3
}

// MaxTensorArgs bounds the tensor maps among a launch's parameters.
const MaxTensorArgs = 4

// kernelParams is the argument block of one launch: each word sits in an
// 8-byte slot (a 4-byte int in the low half), each tensor map in a
// 64-byte aligned slot of maps, and ptrs points at the slots, as
// cuLaunchKernel's kernelParams wants.
type kernelParams struct {
	vals [MaxKernelParams]uint64
	ptrs [MaxKernelParams]unsafe.Pointer
	maps [(MaxTensorArgs + 1) * 16]uint64 // MaxTensorArgs maps from the first 64-byte boundary
}

// Arg is one parameter of [Driver.LaunchArgs]: a word ([Word]) or a
// tensor map passed by value ([TensorArg]).
type Arg struct {
	word  uint64
	tm    *TensorMap
	isMap bool // a TensorArg, even of a nil map (which fill refuses)
}

// Word is a word parameter: a device pointer, or an int widened with
// [Int32].
func Word(v uint64) Arg { return Arg{word: v} }

// TensorArg is a tensor map parameter, passed by value (the kernel's
// __grid_constant__ CUtensorMap).
func TensorArg(tm *TensorMap) Arg { return Arg{tm: tm, isMap: true} }

// launchConfig mirrors CUlaunchConfig (cuda.h, CUDA 12 and later) for
// cuLaunchKernelEx: grid, block, dynamic shared memory, stream and the
// attributes (tools/abi/cuabi.c checks the layout against cuda.h).
type launchConfig struct {
	grid, block Dim3
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
	id  launchAttributeID
	_   uint32
	val [16]uint32
}

// Launch queues kernel fn with parameters args: device pointers, or ints
// widened with [Int32]. name labels the kernel in errors
// ("cuLaunchKernel(NAME): ..."). A launch with clusters goes through
// cuLaunchKernelEx with its attributes, a cooperative one alone through
// cuLaunchCooperativeKernel, any other through cuLaunchKernel.
func (d *Driver) Launch(name string, fn Function, cfg LaunchConfig, args ...uint64) error {
	if len(args) > MaxKernelParams {
		return fmt.Errorf("launch %s: %d arguments, at most %d", name, len(args), MaxKernelParams)
	}
	p := new(kernelParams)
	for i, v := range args {
		p.vals[i] = v
		p.ptrs[i] = unsafe.Pointer(&p.vals[i])
	}
	return d.launch(name, fn, cfg, p)
}

// fill sets p's slots to args and reports an error for too many
// parameters or tensor maps, or a nil map (TestKernelParamsFill).
func (p *kernelParams) fill(name string, args []Arg) error {
	if len(args) > MaxKernelParams {
		return fmt.Errorf("launch %s: %d arguments, at most %d", name, len(args), MaxKernelParams)
	}
	// The first 64-byte boundary in maps (Go does not move heap objects;
	// launch pins p before the driver reads it).
	first := int((64 - uintptr(unsafe.Pointer(&p.maps[0]))%64) % 64 / 8)
	nm := 0
	for i, a := range args {
		if !a.isMap {
			p.vals[i] = a.word
			p.ptrs[i] = unsafe.Pointer(&p.vals[i])
			continue
		}
		if a.tm == nil {
			return fmt.Errorf("launch %s: parameter %d: a nil tensor map", name, i)
		}
		if nm == MaxTensorArgs {
			return fmt.Errorf("launch %s: more than %d tensor maps", name, MaxTensorArgs)
		}
		slot := p.maps[first+16*nm : first+16*nm+16]
		copy(slot, a.tm.words[:])
		p.ptrs[i] = unsafe.Pointer(&slot[0])
		nm++
	}
	return nil
}

// LaunchArgs is [Driver.Launch] with parameters that may include tensor
// maps passed by value.
func (d *Driver) LaunchArgs(name string, fn Function, cfg LaunchConfig, args ...Arg) error {
	p := new(kernelParams)
	if err := p.fill(name, args); err != nil {
		return err
	}
	return d.launch(name, fn, cfg, p)
}

// launch queues fn with the filled parameter block p.
func (d *Driver) launch(name string, fn Function, cfg LaunchConfig, p *kernelParams) error {
	var pin runtime.Pinner
	pin.Pin(p)
	defer pin.Unpin()
	params := unsafe.Pointer(&p.ptrs[0])
	grid, block, smem, stream := cfg.Grid, cfg.Block, uint32(cfg.SharedBytes), uintptr(cfg.Stream)
	if cfg.Cluster != (Dim3{}) {
		attrs := new([2]launchAttr)
		attrs[0].id = launchAttrClusterDimension
		copy(attrs[0].val[:], cfg.Cluster[:])
		n := uint32(1)
		if cfg.Cooperative {
			attrs[1].id, attrs[1].val[0] = launchAttrCooperative, 1
			n++
		}
		lc := &launchConfig{grid: grid, block: block, smem: smem, stream: stream, attrs: &attrs[0], nattrs: n}
		pin.Pin(attrs)
		pin.Pin(lc)
		r := d.cuLaunchEx(lc, uintptr(fn), params, nil)
		runtime.KeepAlive(p)
		return d.check("cuLaunchKernelEx("+name+")", r)
	}
	if cfg.Cooperative {
		r := d.cuLaunchCoop(uintptr(fn), grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, stream, params)
		runtime.KeepAlive(p)
		return d.check("cuLaunchCooperativeKernel("+name+")", r)
	}
	r := d.cuLaunch(uintptr(fn), grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, stream, params, nil)
	runtime.KeepAlive(p)
	return d.check("cuLaunchKernel("+name+")", r)
}

// Int32 widens an int kernel parameter; the kernel reads the low 4 bytes.
func Int32(v int) uint64 { return uint64(uint32(int32(v))) }
