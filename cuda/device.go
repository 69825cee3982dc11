package cuda

import "fmt"

// Device is a CUdevice: a GPU by its driver handle.
type Device int32

// Context is a CUcontext.
type Context uintptr

// Init initialises the driver (cuInit); it precedes every other call.
func (d *Driver) Init() error { return d.check("cuInit", d.cuInit(0)) }

// Version returns the driver's CUDA API version, e.g. 13000 for 13.0.
func (d *Driver) Version() (int, error) {
	var v int32
	if err := d.check("cuDriverGetVersion", d.cuDriverGetVersion(&v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceCount returns the number of CUDA devices.
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	if err := d.check("cuDeviceGetCount", d.cuDeviceGetCount(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// DeviceGet returns the device of an ordinal (0 for the first).
func (d *Driver) DeviceGet(ordinal int) (Device, error) {
	var dev int32
	if err := d.check("cuDeviceGet", d.cuDeviceGet(&dev, int32(ordinal))); err != nil {
		return 0, err
	}
	return Device(dev), nil
}

// DeviceName returns the device's name, e.g. "NVIDIA H100 80GB HBM3".
func (d *Driver) DeviceName(dev Device) (string, error) {
	name := make([]byte, 256)
	if err := d.check("cuDeviceGetName", d.cuDeviceGetName(name, int32(len(name)), int32(dev))); err != nil {
		return "", err
	}
	return cString(name), nil
}

// DeviceAttribute returns an attribute of the device.
func (d *Driver) DeviceAttribute(dev Device, attr DeviceAttribute) (int, error) {
	var v int32
	if err := d.check("cuDeviceGetAttribute", d.cuDeviceGetAttribute(&v, int32(attr), int32(dev))); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceTotalMem returns the device's memory in bytes.
func (d *Driver) DeviceTotalMem(dev Device) (int64, error) {
	var n uint64
	if err := d.check("cuDeviceTotalMem_v2", d.cuDeviceTotalMem(&n, int32(dev))); err != nil {
		return 0, err
	}
	return int64(n), nil
}

// PrimaryCtxRetain retains the device's primary context; release it with
// [Driver.PrimaryCtxRelease].
func (d *Driver) PrimaryCtxRetain(dev Device) (Context, error) {
	var ctx uintptr
	if err := d.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&ctx, int32(dev))); err != nil {
		return 0, err
	}
	return Context(ctx), nil
}

// PrimaryCtxRelease releases the device's primary context.
func (d *Driver) PrimaryCtxRelease(dev Device) error {
	return d.check("cuDevicePrimaryCtxRelease", d.cuDevicePrimaryCtxRelease(int32(dev)))
}

// CtxSetCurrent makes ctx the calling OS thread's current context.
func (d *Driver) CtxSetCurrent(ctx Context) error {
	return d.check("cuCtxSetCurrent", d.cuCtxSetCurrent(uintptr(ctx)))
}

// CtxSynchronize waits for all work of the current context and returns
// the first error a kernel raised.
func (d *Driver) CtxSynchronize() error {
	return d.check("cuCtxSynchronize", d.cuCtxSynchronize())
}

// VersionString formats a CUDA version number: 13000 → "13.0",
// 12080 → "12.8".
func VersionString(v int) string {
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// cString returns the text of a NUL-terminated C string in b.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
