package kernels

import "fmt"

// CopyFrom copies all of src into the start of b on the device's stream,
// device to device (cuMemcpyDtoDAsync_v2). b must hold at least src.Len()
// bytes and both buffers must belong to the same Device; they may not be
// the same buffer. Like the matmuls, the copy is asynchronous: it is
// ordered with the work queued on the device and can be timed with
// [Device.Elapsed], which makes it the device-to-device bandwidth ceiling
// of the benchmarks (it reads and writes src.Len() bytes each).
func (b *Buffer) CopyFrom(src *Buffer) error {
	const op = "CopyFrom"
	if b == nil {
		return fmt.Errorf("%w: %s: nil destination Buffer", ErrClosed, op)
	}
	if src == nil {
		return argError("%s: nil source Buffer", op)
	}
	d := b.d
	return d.do(func() error {
		if err := d.operands(op, operand{b, "dst", src.n}, operand{src, "src", src.n}); err != nil {
			return err
		}
		if err := d.drv.MemcpyDtoDAsync(b.ptr, src.ptr, src.n, d.stream); err != nil {
			return fmt.Errorf("copying %d bytes device to device: %w", src.n, err)
		}
		return nil
	})
}
