package kernels

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/sfsurgery/sfsurgery/cublaslt"
	"github.com/sfsurgery/sfsurgery/cuda"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// minMajor is the oldest compute capability the kernels run on (mma.sp and
// cp.async need sm_80).
const minMajor = 8

// Device is an opened GPU with the sfsurgery kernels loaded. Create it with
// [Open] and release it with [Device.Close]. It is safe for concurrent use.
type Device struct {
	mu      sync.Mutex // serialises every driver call and guards the fields below
	drv     *cuda.Driver
	dev     cuda.Device
	ctx     cuda.Context // primary context, retained
	stream  cuda.Stream
	mod     cuda.Module
	mod90a  cuda.Module // the warpgroup form's module (sm_90a), or 0
	fn      functions
	dec     decoder // the decode kernels' functions, plans and workspace
	info    Info
	lt      *cublaslt.Library // nil when cuBLASLt could not be loaded
	ltWork  *Buffer           // cuBLASLt's workspace
	backend string            // what DenseMatmul uses, for humans
	bufs    map[*Buffer]struct{}
	closed  bool
}

// openConfig holds what Open uses by default and tests may replace.
type openConfig struct {
	driverLib string // the CUDA driver library
	ptx       []byte // NUL-terminated PTX image
	ptx90a    []byte // NUL-terminated PTX of the warpgroup form (sm_90a); empty: none
	cublasLt  string // SFSURGERY_CUBLASLT, or empty
	noLt      bool   // skip cuBLASLt: DenseMatmul uses the own kernel
}

// Open opens GPU ordinal (0 for the first), loads the embedded kernels and,
// when it can be found, cuBLASLt (the environment variable SFSURGERY_CUBLASLT
// may name the library file). Errors that mean the machine cannot run GPU
// checks at all wrap [ErrUnavailable].
func Open(ordinal int) (*Device, error) {
	return open(ordinal, defaultConfig())
}

func open(ordinal int, cfg openConfig) (*Device, error) {
	if ordinal < 0 {
		return nil, argError("device ordinal %d is negative", ordinal)
	}
	drv, err := cuda.Load(cfg.driverLib)
	if errors.Is(err, cuda.ErrNoLibrary) {
		return nil, unavailable(fmt.Sprintf("no CUDA driver (%s not found)", cfg.driverLib), nil)
	}
	if err != nil {
		return nil, unavailable("CUDA driver too old", err)
	}
	if err := drv.Init(); err != nil {
		return nil, unavailable("cuInit failed", err)
	}
	d := &Device{drv: drv, bufs: make(map[*Buffer]struct{})}
	if err := d.readInfo(ordinal); err != nil {
		return nil, wrap(err)
	}
	if d.info.Major < minMajor {
		return nil, unavailable(fmt.Sprintf("device %d (%s) is sm_%d%d; the kernels need sm_80 or newer",
			ordinal, d.info.Name, d.info.Major, d.info.Minor), nil)
	}
	if err := d.start(cfg); err != nil {
		if cerr := d.Close(); cerr != nil {
			return nil, fmt.Errorf("%w (closing: %v)", wrap(err), cerr)
		}
		return nil, wrap(err)
	}
	return d, nil
}

// readInfo finds device ordinal and fills d.dev and d.info.
func (d *Device) readInfo(ordinal int) error {
	drv := d.drv
	v, err := drv.Version()
	if err != nil {
		return unavailable("cannot read the CUDA driver version", err)
	}
	d.info.Driver = v
	count, err := drv.DeviceCount()
	if err != nil {
		return unavailable("cannot count CUDA devices", err)
	}
	if count == 0 {
		return unavailable("no CUDA device", nil)
	}
	if ordinal >= count {
		return unavailable(fmt.Sprintf("no CUDA device %d (%d present)", ordinal, count), nil)
	}
	if d.dev, err = drv.DeviceGet(ordinal); err != nil {
		return unavailable(fmt.Sprintf("cannot get CUDA device %d", ordinal), err)
	}
	if d.info.Name, err = drv.DeviceName(d.dev); err != nil {
		return err
	}
	attrs := []struct {
		attr cuda.DeviceAttribute
		dst  *int
	}{
		{cuda.AttrComputeCapabilityMajor, &d.info.Major},
		{cuda.AttrComputeCapabilityMinor, &d.info.Minor},
		{cuda.AttrMultiprocessorCount, &d.info.SMs},
	}
	for _, a := range attrs {
		if *a.dst, err = drv.DeviceAttribute(d.dev, a.attr); err != nil {
			return err
		}
	}
	d.info.MemBytes, err = drv.DeviceTotalMem(d.dev)
	return err
}

// start retains the primary context, loads the module, creates the stream
// and looks for cuBLASLt. On error the caller closes d.
func (d *Device) start(cfg openConfig) error {
	ctx, err := d.drv.PrimaryCtxRetain(d.dev)
	if err != nil {
		return err
	}
	d.ctx = ctx
	return d.run(func() error {
		if err := d.loadModule(cfg.ptx, cfg.ptx90a); err != nil {
			return err
		}
		var err error
		if d.stream, err = d.drv.StreamCreate(); err != nil {
			return err
		}
		if cfg.noLt {
			d.backend = "own kernel (cuBLASLt disabled)"
			return nil
		}
		if err := d.loadCublasLt(cfg.cublasLt); err != nil {
			d.backend = "own kernel (" + err.Error() + ")"
			return nil
		}
		d.backend = d.lt.String()
		return nil
	})
}

// do runs fn with the device's context current on a locked OS thread and
// the device mutex held, and prefixes its error with the package name.
func (d *Device) do(fn func() error) error { return wrap(d.run(fn)) }

// run is do without the prefix, for callers that wrap themselves.
func (d *Device) run(fn func() error) error {
	if d == nil {
		return fmt.Errorf("%w: nil Device", ErrClosed)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.openLocked(); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.drv.CtxSetCurrent(d.ctx); err != nil {
		return err
	}
	return fn()
}

// usable returns an error wrapping ErrClosed for a nil or closed Device,
// for methods that answer without the GPU (TestNilAndClosed).
func (d *Device) usable() error {
	if d == nil {
		return fmt.Errorf("%w: nil Device", ErrClosed)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.openLocked()
}

// openLocked is usable's check for a caller that holds d.mu.
func (d *Device) openLocked() error {
	if d.closed || d.drv == nil {
		return fmt.Errorf("%w: device is closed", ErrClosed)
	}
	return nil
}

// Info describes the device.
func (d *Device) Info() Info {
	if d == nil {
		return Info{}
	}
	return d.info
}

// Limits returns the device properties the decode kernels are planned
// with (launchplan.Limits): what [Device.SparseMatmul] chooses its
// launches by, and what an engine executing launch records needs to plan
// for the same device.
func (d *Device) Limits() launchplan.Limits {
	if d == nil {
		return launchplan.Limits{}
	}
	return d.dec.lim
}

// DenseBackend says what [Device.DenseMatmul] runs: cuBLASLt with its
// version and path, or the package's own kernel and why.
func (d *Device) DenseBackend() string {
	if d == nil {
		return ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.backend
}

// SparseBackend says what [Device.SparseMatmul] runs: where the sm_90a
// module is loaded (H100, H200), the wgmma.sp prefill kernel above 64
// tokens and the decode kernels' mma.sp and wgmma.sp forms at 64 or
// fewer; elsewhere the mma.sp kernels (tiled above 64 tokens, decode-size
// at 64 or fewer) and why the sm_90a module is not loaded.
func (d *Device) SparseBackend() string {
	if d == nil {
		return ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dec.lim.Warpgroup {
		return "mma.sp and wgmma.sp kernels (sm_90a: the wgmma.sp prefill kernel above 64 tokens, the decode kernels' mma.sp and wgmma.sp forms at 64 or fewer)"
	}
	return "mma.sp kernels (tiled above 64 tokens, decode-size at 64 or fewer); no sm_90a module: " + d.dec.note
}

// Synchronize waits for all work queued on the device and returns the first
// error a kernel raised.
func (d *Device) Synchronize() error {
	return d.do(func() error { return d.drv.CtxSynchronize() })
}

// Close frees every Buffer still allocated, unloads the kernels, releases
// cuBLASLt and the primary context. Later calls return an error wrapping
// [ErrClosed]; Close itself may be called more than once.
func (d *Device) Close() error {
	if d == nil || d.drv == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	if d.ctx == 0 {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	drv := d.drv
	errs := []error{drv.CtxSetCurrent(d.ctx)}
	if d.lt != nil {
		errs = append(errs, d.lt.Close())
		d.lt = nil
	}
	for b := range d.bufs {
		errs = append(errs, drv.MemFree(b.ptr))
		b.ptr = 0
		delete(d.bufs, b)
	}
	if d.stream != 0 {
		errs = append(errs, drv.StreamDestroy(d.stream))
		d.stream = 0
	}
	for _, mod := range []*cuda.Module{&d.mod, &d.mod90a} {
		if *mod != 0 {
			errs = append(errs, drv.ModuleUnload(*mod))
			*mod = 0
		}
	}
	errs = append(errs, drv.PrimaryCtxRelease(d.dev))
	d.ctx = 0
	return wrap(errors.Join(errs...))
}
