package kernels

import (
	"fmt"

	"github.com/sfsurgery/sfsurgery/cuda"
)

// Buffer is a block of device memory owned by a [Device]. Free it with
// [Buffer.Free]; [Device.Close] frees the buffers still allocated.
type Buffer struct {
	d   *Device
	ptr cuda.DevicePtr // 0 once freed
	n   int64
}

// Len returns the size of the buffer in bytes.
func (b *Buffer) Len() int64 {
	if b == nil {
		return 0
	}
	return b.n
}

// Alloc allocates n bytes of device memory (n > 0). The contents are
// undefined.
func (d *Device) Alloc(n int64) (*Buffer, error) {
	if n <= 0 {
		return nil, argError("Alloc(%d): size must be positive", n)
	}
	var b *Buffer
	err := d.do(func() error {
		var err error
		b, err = d.alloc(n)
		return err
	})
	return b, err
}

// alloc allocates with the context current and the mutex held.
func (d *Device) alloc(n int64) (*Buffer, error) {
	p, err := d.drv.MemAlloc(n)
	if err != nil {
		return nil, fmt.Errorf("allocating %d bytes: %w", n, err)
	}
	b := &Buffer{d: d, ptr: p, n: n}
	d.bufs[b] = struct{}{}
	return b, nil
}

// Upload allocates a buffer of len(src) bytes and copies src into it.
func (d *Device) Upload(src []byte) (*Buffer, error) {
	if len(src) == 0 {
		return nil, argError("Upload: empty slice")
	}
	var b *Buffer
	err := d.do(func() error {
		var err error
		if b, err = d.alloc(int64(len(src))); err != nil {
			return err
		}
		if err = d.drv.MemcpyHtoD(b.ptr, src); err != nil {
			d.free(b)
			b = nil
			return fmt.Errorf("uploading %d bytes: %w", len(src), err)
		}
		return nil
	})
	return b, err
}

// Download copies the first len(dst) bytes of the buffer into dst, after
// all work queued before it has finished. len(dst) may not exceed Len.
func (b *Buffer) Download(dst []byte) error {
	if b == nil {
		return fmt.Errorf("%w: nil Buffer", ErrClosed)
	}
	if len(dst) == 0 || int64(len(dst)) > b.n {
		return argError("Download: %d bytes from a buffer of %d", len(dst), b.n)
	}
	return b.d.do(func() error {
		if b.ptr == 0 {
			return fmt.Errorf("%w: buffer was freed", ErrClosed)
		}
		if err := b.d.drv.MemcpyDtoH(dst, b.ptr); err != nil {
			return fmt.Errorf("downloading %d bytes: %w", len(dst), err)
		}
		return nil
	})
}

// Free releases the buffer. Freeing twice returns an error wrapping
// [ErrClosed].
func (b *Buffer) Free() error {
	if b == nil {
		return fmt.Errorf("%w: nil Buffer", ErrClosed)
	}
	return b.d.do(func() error {
		if b.ptr == 0 {
			return fmt.Errorf("%w: buffer was freed", ErrClosed)
		}
		return b.d.free(b)
	})
}

// free releases b with the context current and the mutex held.
func (d *Device) free(b *Buffer) error {
	err := d.drv.MemFree(b.ptr)
	b.ptr = 0
	delete(d.bufs, b)
	return err
}

// memset fills the buffer with byte v (tests poison outputs with it).
func (b *Buffer) memset(v byte) error {
	return b.d.do(func() error {
		if b.ptr == 0 {
			return fmt.Errorf("%w: buffer was freed", ErrClosed)
		}
		return b.d.drv.MemsetD8(b.ptr, v, b.n)
	})
}

// use checks that b can be used by d as an operand named name holding at
// least need bytes. It runs with the mutex held.
func (d *Device) use(b *Buffer, name string, need int64) error {
	switch {
	case b == nil:
		return argError("%s: nil Buffer", name)
	case b.d != d:
		return argError("%s: buffer belongs to another Device", name)
	case b.ptr == 0:
		return fmt.Errorf("%w: %s: buffer was freed", ErrClosed, name)
	case b.n < need:
		return argError("%s: buffer holds %d bytes, need %d", name, b.n, need)
	}
	return nil
}
