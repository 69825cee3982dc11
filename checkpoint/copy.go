package checkpoint

import (
	"context"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// copyChunk bounds one copy_file_range call, so that a copy notices a
// cancelled context, reports progress and starts writeback at least this
// often.
const copyChunk = 16 << 20

// writebackChunk is how many written bytes accumulate before their
// writeback to disk is started.
const writebackChunk = 8 << 20

// copyBufSize is the buffer of the pread/pwrite fallback and of
// FileRange.WriteTo.
const copyBufSize = 1 << 20

// Specs returns one [TensorSpec] per tensor of f, in f's offset order,
// each with a [FileRange] source that copies the tensor unchanged.
func (f *File) Specs() []TensorSpec {
	specs := make([]TensorSpec, len(f.Tensors))
	for i, t := range f.Tensors {
		specs[i] = TensorSpec{Name: t.Name, DType: t.DType, Shape: slices.Clone(t.Shape), Src: FileRange{File: f, Tensor: t}}
	}
	return specs
}

// WriteTo writes the bytes of r.Tensor, read from r.File with pread (not
// through the mapping, so a file truncated meanwhile is an error, not a
// fault), to w. It implements [io.WriterTo]. The writers of this package
// do not call it: they copy a FileRange file to file with
// copy_file_range.
func (r FileRange) WriteTo(w io.Writer) (int64, error) {
	src, off, err := r.source()
	if err != nil {
		return 0, err
	}
	size := r.Tensor.Size()
	buf := make([]byte, min(size, copyBufSize))
	n, err := io.CopyBuffer(w, io.NewSectionReader(src, off, size), buf)
	if err == nil && n < size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return n, &Error{File: r.File.path, Tensor: r.Tensor.Name, Off: off + n, Err: err, Detail: "copying the tensor"}
	}
	return n, nil
}

// source checks r and returns the open file and the absolute offset of
// the tensor's first byte.
func (r FileRange) source() (*os.File, int64, error) {
	if r.File == nil {
		return nil, 0, &Error{Tensor: r.Tensor.Name, Off: -1, Err: fs.ErrInvalid, Detail: "FileRange without a File"}
	}
	src := r.File.osFile()
	if src == nil {
		return nil, 0, &Error{File: r.File.path, Tensor: r.Tensor.Name, Off: -1, Err: fs.ErrClosed}
	}
	t := r.Tensor
	if t.Begin < 0 || t.End < t.Begin || t.End > r.File.size-r.File.DataOffset {
		return nil, 0, &Error{File: r.File.path, Tensor: t.Name, Off: -1, Err: ErrInvalidOffset,
			Detail: fmt.Sprintf("range [%d, %d] is not inside the %d-byte data section", t.Begin, t.End, r.File.size-r.File.DataOffset)}
	}
	return src, r.File.DataOffset + t.Begin, nil
}

// copyRange copies the FileRange source r of spec s into j's file at off.
func (j *fileJob) copyRange(ctx context.Context, s *TensorSpec, r FileRange, off, size int64, progress func(int64)) error {
	src, srcOff, err := r.source()
	if err != nil {
		return err
	}
	if r.Tensor.Size() != size {
		return &Error{File: j.path, Tensor: s.Name, Off: off, Err: ErrSourceSize,
			Detail: fmt.Sprintf("source tensor %q of %s is %d bytes, want %d", r.Tensor.Name, r.File.path, r.Tensor.Size(), size)}
	}
	n, err := copyFileRange(ctx, j.f, off, src, srcOff, size, progress)
	if err != nil {
		return &Error{File: j.path, Tensor: s.Name, Off: off + n, Err: err,
			Detail: fmt.Sprintf("copying from %s at byte %d", r.File.path, srcOff+n)}
	}
	return nil
}

// copyFileRange copies n bytes of src at srcOff to dst at dstOff with
// copy_file_range, passing both offsets explicitly so that neither file's
// position is used and copies may run in parallel. Where the kernel cannot
// copy between the two files (EXDEV, ENOSYS, EINVAL, EOPNOTSUPP) it goes
// on with pread/pwrite. It returns the bytes copied.
func copyFileRange(ctx context.Context, dst *os.File, dstOff int64, src *os.File, srcOff int64, n int64, progress func(int64)) (int64, error) {
	var done int64
	fallback := false
	err := withFds(src, dst, func(sfd, dfd int) error {
		for done < n {
			if err := ctx.Err(); err != nil {
				return err
			}
			so, do := srcOff+done, dstOff+done
			m, err := unix.CopyFileRange(sfd, &so, dfd, &do, int(min(n-done, copyChunk)), 0)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EXDEV || err == unix.ENOSYS || err == unix.EINVAL || err == unix.EOPNOTSUPP:
				fallback = true
				return nil
			case err != nil:
				return os.NewSyscallError("copy_file_range", err)
			case m == 0:
				return io.ErrUnexpectedEOF
			}
			// Start writing the chunk to disk now, so that the final fsync
			// finds most of the file already on its way (advice only).
			_ = unix.SyncFileRange(dfd, do-int64(m), int64(m), unix.SYNC_FILE_RANGE_WRITE)
			done += int64(m)
			if progress != nil {
				progress(int64(m))
			}
		}
		return nil
	})
	if err != nil || !fallback {
		return done, err
	}
	m, err := copyPread(ctx, dst, dstOff+done, src, srcOff+done, n-done, progress)
	return done + m, err
}

// withFds calls fn with the descriptors of a and b, which stay valid
// while it runs.
func withFds(a, b *os.File, fn func(afd, bfd int) error) error {
	ac, err := a.SyscallConn()
	if err != nil {
		return err
	}
	bc, err := b.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := ac.Control(func(afd uintptr) {
		if err := bc.Control(func(bfd uintptr) { ferr = fn(int(afd), int(bfd)) }); err != nil {
			ferr = err
		}
	}); err != nil {
		return err
	}
	return ferr
}

// copyPread copies n bytes of src at srcOff to dst at dstOff through a
// buffer, with pread and pwrite. It returns the bytes copied.
func copyPread(ctx context.Context, dst *os.File, dstOff int64, src *os.File, srcOff int64, n int64, progress func(int64)) (int64, error) {
	buf := make([]byte, min(n, copyBufSize))
	wb := writeback{f: dst, from: dstOff}
	defer wb.flush(dstOff + n)
	var done int64
	for done < n {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		b := buf[:min(n-done, int64(len(buf)))]
		r, err := src.ReadAt(b, srcOff+done)
		if r < len(b) {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return done, err
		}
		if _, err := dst.WriteAt(b, dstOff+done); err != nil {
			return done, err
		}
		done += int64(len(b))
		wb.wrote(dstOff + done)
		if progress != nil {
			progress(int64(len(b)))
		}
	}
	return done, nil
}

// writeback starts the kernel's writeback of a file region as it is
// written, writebackChunk bytes at a time (sync_file_range with
// SYNC_FILE_RANGE_WRITE, which does not wait), so that the final fsync
// finds most of the data already written. It is advice: errors are
// ignored, and the fsync still decides durability.
type writeback struct {
	f    *os.File
	from int64 // first written byte whose writeback has not been started
}

// wrote notes that the region is written up to end, and starts the
// writeback once writebackChunk bytes have accumulated.
func (w *writeback) wrote(end int64) {
	if end-w.from >= writebackChunk {
		w.flush(end)
	}
}

// flush starts the writeback of everything written up to end.
func (w *writeback) flush(end int64) {
	if end <= w.from {
		return
	}
	if rc, err := w.f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			_ = unix.SyncFileRange(int(fd), w.from, end-w.from, unix.SYNC_FILE_RANGE_WRITE)
		})
	}
	w.from = end
}

// tensorWriter is the io.Writer a tensor's source writes to: it fails
// once ctx is cancelled, refuses bytes past the tensor's size, and reports
// progress. Its first failure is kept in err, so that a source that
// swallows it still fails the write.
type tensorWriter struct {
	ctx      context.Context
	w        io.Writer // an io.OffsetWriter at the tensor's offset
	end      int64     // file offset of the tensor's end
	left     int64     // bytes still expected
	wb       writeback
	progress func(int64)
	hash     hash.Hash // nil unless digests are asked for
	err      error
}

// Write writes p at the next position of the tensor.
func (w *tensorWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if err := w.ctx.Err(); err != nil {
		w.err = err
		return 0, err
	}
	if int64(len(p)) > w.left {
		w.err = fmt.Errorf("%w: source wrote %d bytes past the tensor's end", ErrSourceSize, int64(len(p))-w.left)
		return 0, w.err
	}
	n, err := w.w.Write(p)
	if w.hash != nil {
		w.hash.Write(p[:n])
	}
	w.left -= int64(n)
	w.wb.wrote(w.end - w.left)
	if n > 0 && w.progress != nil {
		w.progress(int64(n))
	}
	if err != nil {
		w.err = err
	}
	return n, err
}
