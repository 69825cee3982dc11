package cuda

// DevicePtr is a CUdeviceptr: an address in device memory.
type DevicePtr uint64

// MemAlloc allocates n bytes of device memory.
func (d *Driver) MemAlloc(n int64) (DevicePtr, error) {
	var p uint64
	if err := d.check("cuMemAlloc_v2", d.cuMemAlloc(&p, uint64(n))); err != nil {
		return 0, err
	}
	return DevicePtr(p), nil
}

// MemFree frees memory from [Driver.MemAlloc].
func (d *Driver) MemFree(p DevicePtr) error {
	return d.check("cuMemFree_v2", d.cuMemFree(uint64(p)))
}

// MemcpyHtoD copies src to dst, synchronously.
func (d *Driver) MemcpyHtoD(dst DevicePtr, src []byte) error {
	return d.check("cuMemcpyHtoD_v2", d.cuMemcpyHtoD(uint64(dst), src, uint64(len(src))))
}

// MemcpyDtoH copies len(dst) bytes from src to dst, after the work queued
// before it.
func (d *Driver) MemcpyDtoH(dst []byte, src DevicePtr) error {
	return d.check("cuMemcpyDtoH_v2", d.cuMemcpyDtoH(dst, uint64(src), uint64(len(dst))))
}

// MemsetD8 sets n bytes at dst to v.
func (d *Driver) MemsetD8(dst DevicePtr, v byte, n int64) error {
	return d.check("cuMemsetD8_v2", d.cuMemsetD8(uint64(dst), v, uint64(n)))
}

// MemcpyDtoDAsync queues a copy of n bytes from src to dst on stream.
func (d *Driver) MemcpyDtoDAsync(dst, src DevicePtr, n int64, stream Stream) error {
	return d.check("cuMemcpyDtoDAsync_v2", d.cuMemcpyDtoDA(uint64(dst), uint64(src), uint64(n), uintptr(stream)))
}

// MemsetD32Async queues setting n 32-bit words at dst to v on stream.
func (d *Driver) MemsetD32Async(dst DevicePtr, v uint32, n int, stream Stream) error {
	return d.check("cuMemsetD32Async", d.cuMemsetD32A(uint64(dst), v, uint64(n), uintptr(stream)))
}
