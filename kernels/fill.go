package kernels

import "fmt"

// Fill sets every byte of the buffer to v, after the work queued before
// it. Benchmarks poison outputs with 0xFF (a float NaN) before a checked
// run, so that an element a kernel fails to write fails the check.
func (b *Buffer) Fill(v byte) error {
	if b == nil {
		return fmt.Errorf("%w: nil Buffer", ErrClosed)
	}
	return b.memset(v)
}
