package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// OpenFile opens the safetensors file at path. The header is read with
// pread and validated by [ParseHeader], without touching the tensor data;
// the whole file is then memory-mapped read-only (MAP_SHARED), unless its
// data section is empty. Every error is an *[Error] whose File is path.
//
// The mapping shares the page cache with the file: if another process
// truncates or rewrites the file while it is open, reading a slice
// returned by [File.Data] may fault (SIGBUS, fatal unless the goroutine
// has called [runtime/debug.SetPanicOnFault]). [File.ReadAt] reads through
// the file descriptor instead and returns an error in that case.
func OpenFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, osError(path, err)
	}
	fl, err := newFile(path, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return fl, nil
}

// newFile reads the header of the open file f and maps it.
func newFile(path string, f *os.File) (*File, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, osError(path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, &Error{File: path, Off: -1, Err: ErrNotCheckpoint, Detail: "not a regular file (" + fi.Mode().Type().String() + ")"}
	}
	size := fi.Size()
	h, err := ReadHeader(f, size)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.File = path
		}
		return nil, err
	}
	fl := &File{Header: *h, path: path, f: f, size: size, byName: make(map[string]int, len(h.Tensors))}
	for i, t := range fl.Tensors {
		fl.byName[t.Name] = i
	}
	if size > h.DataOffset {
		if size > math.MaxInt {
			return nil, &Error{File: path, Off: -1, Err: ErrOverflow, Detail: fmt.Sprintf("%d bytes cannot be mapped", size)}
		}
		fl.mmap, err = mmapFile(f, int(size))
		if err != nil {
			return nil, &Error{File: path, Off: -1, Err: err, Detail: "mmap"}
		}
	}
	return fl, nil
}

// mmapFile maps the first size bytes of f read-only.
func mmapFile(f *os.File, size int) ([]byte, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var b []byte
	var merr error
	if err := rc.Control(func(fd uintptr) {
		b, merr = unix.Mmap(int(fd), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	}); err != nil {
		return nil, err
	}
	return b, merr
}

// osError turns an error of package os into an *Error naming path, without
// repeating the path that a *fs.PathError carries.
func osError(path string, err error) *Error {
	detail := ""
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		err, detail = pe.Err, pe.Op
	}
	return &Error{File: path, Off: -1, Err: err, Detail: detail}
}

// Path returns the path the file was opened with.
func (f *File) Path() string { return f.path }

// Size returns the size of the file in bytes.
func (f *File) Size() int64 { return f.size }

// Tensor returns the description of the tensor called name.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// Data returns the bytes of tensor t, a zero-copy slice of the file's
// mapping with its capacity limited to the tensor. It returns nil when
// t's range does not lie inside the data section or the file is closed.
// The slice is valid until [File.Close]; writing to it faults. See
// [OpenFile] about files that change while mapped.
func (f *File) Data(t TensorInfo) []byte {
	if t.Begin < 0 || t.End < t.Begin || t.End > f.size-f.DataOffset {
		return nil
	}
	if t.Begin == t.End && f.mmap == nil && f.f != nil {
		return []byte{}
	}
	if f.mmap == nil {
		return nil
	}
	b, e := f.DataOffset+t.Begin, f.DataOffset+t.End
	return f.mmap[b:e:e]
}

// Release tells the kernel that the mapped pages under b will not be
// needed soon (MADV_DONTNEED), so that a pass over a large file keeps a
// flat resident size. Only the pages lying wholly inside b are released;
// reading b again later faults them back in from the file. Release does
// nothing unless b lies inside this file's mapping.
func (f *File) Release(b []byte) {
	if len(b) == 0 || len(f.mmap) == 0 {
		return
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(f.mmap)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p-base > uintptr(len(f.mmap)) || uintptr(len(b)) > uintptr(len(f.mmap))-(p-base) {
		return
	}
	page := uintptr(os.Getpagesize())
	start := (p - base + page - 1) / page * page
	end := (p - base + uintptr(len(b))) / page * page
	if end <= start {
		return
	}
	_ = unix.Madvise(f.mmap[start:end], unix.MADV_DONTNEED) // advice only: a failure changes nothing
}

// ReadAt reads len(p) bytes of the file, counted from its first byte,
// at off through the file descriptor rather than the mapping, so a file
// truncated under it yields an error instead of a fault. It implements
// [io.ReaderAt].
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if f.f == nil {
		return 0, &Error{File: f.path, Off: off, Err: fs.ErrClosed, Detail: "read"}
	}
	return f.f.ReadAt(p, off)
}

// Close unmaps and closes the file. Slices returned by [File.Data] must
// not be used afterwards. Closing a closed File does nothing.
func (f *File) Close() error {
	var errs []error
	if f.mmap != nil {
		if err := unix.Munmap(f.mmap); err != nil {
			errs = append(errs, &Error{File: f.path, Off: -1, Err: err, Detail: "munmap"})
		}
		f.mmap = nil
	}
	if f.f != nil {
		if err := f.f.Close(); err != nil {
			errs = append(errs, osError(f.path, err))
		}
		f.f = nil
	}
	return errors.Join(errs...)
}
