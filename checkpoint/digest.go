package checkpoint

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"strconv"
)

// digest hands the SHA-256 of what w wrote for the tensor called name to
// fn; it does nothing when fn is nil or w did not hash.
func (w *tensorWriter) digest(name string, fn func(string, [sha256.Size]byte)) {
	if fn == nil || w.hash == nil {
		return
	}
	var sum [sha256.Size]byte
	w.hash.Sum(sum[:0])
	fn(name, sum)
}

// digestFromFile hands fn the SHA-256 of spec i's bytes as they now lie
// in j's file, read back (the kernel copied them without passing through
// this process). It does nothing when fn is nil.
func (j *fileJob) digestFromFile(ctx context.Context, i int, fn func(string, [sha256.Size]byte)) error {
	if fn == nil {
		return nil
	}
	s := &j.specs[i]
	off := j.plan.dataOff + j.plan.begin[i]
	sum, err := SHA256(ctx, j.f, off, j.plan.size[i])
	if err != nil {
		return &Error{File: j.path, Tensor: s.Name, Off: off, Err: err, Detail: "reading the tensor back for its digest"}
	}
	fn(s.Name, sum)
	return nil
}

// SHA256 returns the SHA-256 of the n bytes of r at off, reading a chunk
// at a time and stopping with ctx's error once it is cancelled.
func SHA256(ctx context.Context, r io.ReaderAt, off, n int64) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	h := sha256.New()
	buf := make([]byte, min(n, copyBufSize))
	for done := int64(0); done < n; {
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		b := buf[:min(n-done, int64(len(buf)))]
		if _, err := r.ReadAt(b, off+done); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return sum, err
		}
		h.Write(b)
		done += int64(len(b))
	}
	h.Sum(sum[:0])
	return sum, nil
}

// SourceError is how the writers return the failure of a tensor's
// source: the source's own words first (a source names what it read: an
// input file, tensor and row, say), then the output tensor it was
// writing. The output file, which never appears when a write fails, and
// the output offset are fields, not part of the message.
type SourceError struct {
	// Output is the output file, Tensor the output tensor, and Off the
	// output offset the write had reached.
	Output, Tensor string
	Off            int64
	Err            error
}

// Error returns the source's error and the output tensor.
func (e *SourceError) Error() string {
	return e.Err.Error() + " (writing tensor " + strconv.Quote(e.Tensor) + ")"
}

// Unwrap returns the source's error.
func (e *SourceError) Unwrap() error { return e.Err }

// sourceError wraps the failure err of the source of the output tensor
// called tensor of the file path, which had been written up to off.
func sourceError(path, tensor string, off int64, err error) error {
	return &SourceError{Output: path, Tensor: tensor, Off: off, Err: err}
}
