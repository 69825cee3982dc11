package speed

import (
	"errors"
	"fmt"

	"github.com/sfsurgery/sfsurgery/kernels"
)

// arena owns device buffers and frees them together.
type arena struct {
	dev  *kernels.Device
	bufs []*kernels.Buffer
}

// alloc allocates n bytes.
func (a *arena) alloc(n int64) (*kernels.Buffer, error) {
	b, err := a.dev.Alloc(n)
	if err != nil {
		return nil, err
	}
	a.bufs = append(a.bufs, b)
	return b, nil
}

// copies uploads src (not empty) and copies it on the device into
// count-1 more buffers: count buffers holding src.
func (a *arena) copies(src []byte, count int) ([]*kernels.Buffer, error) {
	first, err := a.dev.Upload(src)
	if err != nil {
		return nil, fmt.Errorf("uploading %d bytes: %w", len(src), err)
	}
	a.bufs = append(a.bufs, first)
	out := []*kernels.Buffer{first}
	for len(out) < count {
		b, err := a.alloc(int64(len(src)))
		if err != nil {
			return nil, fmt.Errorf("copy %d of %d (%d bytes): %w", len(out)+1, count, len(src), err)
		}
		if err := b.CopyFrom(first); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// free releases every buffer (after the queued work is done).
func (a *arena) free() error {
	errs := []error{a.dev.Synchronize()}
	for _, b := range a.bufs {
		errs = append(errs, b.Free())
	}
	a.bufs = nil
	return errors.Join(errs...)
}
