// Package cusparselt binds NVIDIA's cuSPARSELt for 2:4 sparse matrix
// products on the GPU, without cgo: [Load] loads the library at run time
// through github.com/ebitengine/purego. It is built on package cuda:
// operands are [cuda.DevicePtr]s, work is queued on one [cuda.Stream], and
// the caller makes the CUDA context current and serialises the calls, as
// package cuda says; it also owns the device memory (workspaces and
// compression scratch), whose sizes the library reports.
//
// The library keeps pointers into its opaque objects, so they live in
// host memory from mmap, which the Go runtime never moves.
package cusparselt

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sfsurgery/sfsurgery/cuda"
	"github.com/sfsurgery/sfsurgery/internal/dynlib"
)

// cuSPARSELt constants (cusparseLt.h 0.8, docs/formats.md §5;
// tools/abi/cusparselt_abi.c prints them from the header).
const (
	opN                = 0 // CUSPARSE_OPERATION_NON_TRANSPOSE
	opT                = 1 // CUSPARSE_OPERATION_TRANSPOSE
	orderCol           = 1 // CUSPARSE_ORDER_COL
	orderRow           = 2 // CUSPARSE_ORDER_ROW
	compute32F         = 2 // CUSPARSE_COMPUTE_32F
	sparsity50         = 0 // CUSPARSELT_SPARSITY_50_PERCENT
	algDefault         = 0 // CUSPARSELT_MATMUL_ALG_DEFAULT
	alignment          = 16
	statusNotSupported = 10 // CUSPARSE_STATUS_NOT_SUPPORTED
	statusInvalidValue = 3  // CUSPARSE_STATUS_INVALID_VALUE

	// objectBytes is what each opaque object gets: the 0.7 and 0.8
	// headers declare 512 bytes (aligned 16), NVIDIA's own bindings
	// allocate 1024, and older headers show up to 11024.
	objectBytes = 16 << 10
	// MinVersion is the oldest cuSPARSELt whose ABI this package follows
	// (cusparseLtMatmulPlanInit without a workspace argument, the *2
	// compression calls): 0.6.0.
	MinVersion = 600
)

// Offsets in Library.host after the handle: alpha, beta (float32) and the
// stream array of one cudaStream_t that cusparseLtMatmul reads.
const (
	hostAlpha  = objectBytes
	hostBeta   = objectBytes + 16
	hostStream = objectBytes + 32
	hostBytes  = objectBytes + 4096
)

// Library is a loaded cuSPARSELt: its entry points, a handle and the
// plans made so far. It is not safe for concurrent use.
type Library struct {
	path    string
	version int
	host    []byte  // mmap'd host memory: handle, scalars, stream
	handle  uintptr // &host[0]
	inited  bool    // the handle is initialised
	plans   map[key]*Plan
	fn      funcs
}

// funcs are the library's entry points. Opaque objects and host scalars
// are passed as addresses in memory from mmap (never the Go heap); device
// pointers as uint64.
type funcs struct {
	init        func(h uintptr) int32
	destroy     func(h uintptr) int32
	getVersion  func(h uintptr, v *int32) int32
	errorName   func(status int32) string
	denseInit   func(h, mat uintptr, rows, cols, ld int64, align uint32, typ, order int32) int32
	structInit  func(h, mat uintptr, rows, cols, ld int64, align uint32, typ, order, sparsity int32) int32
	matDestroy  func(mat uintptr) int32
	matmulInit  func(h, mm uintptr, opA, opB int32, a, b, c, d uintptr, compute int32) int32
	algInit     func(h, alg, mm uintptr, id int32) int32
	algDestroy  func(alg uintptr) int32
	planInit    func(h, plan, mm, alg uintptr) int32
	planDestroy func(plan uintptr) int32
	workspace   func(h, plan uintptr, size *uint64) int32
	compSize2   func(h, mat uintptr, size, buf *uint64) int32
	compress2   func(h, mat uintptr, sparseA, op int32, dense, out, buf uint64, stream uintptr) int32
	matmul      func(h, plan, alpha uintptr, a, b uint64, beta uintptr, c, d, ws uint64, streams uintptr, n int32) int32
	search      func(h, plan, alpha uintptr, a, b uint64, beta uintptr, c, d, ws uint64, streams uintptr, n int32) int32
}

// Error is a failed cuSPARSELt call.
type Error struct {
	Op     string // the function called, e.g. "cusparseLtMatmul"
	Status int    // its cusparseStatus_t
	Name   string // the status's name, e.g. "CUSPARSE_STATUS_NOT_SUPPORTED"
}

// Error returns "OP: NAME (STATUS)".
func (e *Error) Error() string { return fmt.Sprintf("%s: %s (%d)", e.Op, e.Name, e.Status) }

// Candidates lists the files to [Load] in turn until one loads: env alone
// if set, else the soname, then the pip wheels (nvidia/cusparselt/lib,
// nvidia/cu13/lib) under common Python prefixes (venv, home/.local and
// others), then CUDA toolkits.
func Candidates(env, home, venv string) []string {
	if env != "" {
		return []string{env}
	}
	return dynlib.Candidates([]string{"libcusparseLt.so.0", "libcusparseLt.so"},
		[]string{"nvidia/cusparselt/lib", "nvidia/cu13/lib"}, "libcusparseLt.so*", home, venv)
}

// Load opens cuSPARSELt from path, binds its entry points and maps the
// host memory of its handle. [Library.Init] initialises it; Release
// unmaps the memory.
func Load(path string) (*Library, error) {
	h, err := dynlib.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := &Library{path: path, plans: make(map[key]*Plan)}
	f := &s.fn
	syms := []dynlib.Symbol{
		dynlib.Sym(&f.init, "cusparseLtInit"),
		dynlib.Sym(&f.destroy, "cusparseLtDestroy"),
		dynlib.Sym(&f.getVersion, "cusparseLtGetVersion"),
		dynlib.Sym(&f.denseInit, "cusparseLtDenseDescriptorInit"),
		dynlib.Sym(&f.structInit, "cusparseLtStructuredDescriptorInit"),
		dynlib.Sym(&f.matDestroy, "cusparseLtMatDescriptorDestroy"),
		dynlib.Sym(&f.matmulInit, "cusparseLtMatmulDescriptorInit"),
		dynlib.Sym(&f.algInit, "cusparseLtMatmulAlgSelectionInit"),
		dynlib.Sym(&f.planInit, "cusparseLtMatmulPlanInit"),
		dynlib.Sym(&f.planDestroy, "cusparseLtMatmulPlanDestroy"),
		dynlib.Sym(&f.workspace, "cusparseLtMatmulGetWorkspace"),
		dynlib.Sym(&f.compSize2, "cusparseLtSpMMACompressedSize2"),
		dynlib.Sym(&f.compress2, "cusparseLtSpMMACompress2"),
		dynlib.Sym(&f.matmul, "cusparseLtMatmul"),
		dynlib.Sym(&f.search, "cusparseLtMatmulSearch"),
	}
	if err := dynlib.BindAll(h, path, syms); err != nil {
		return nil, err
	}
	// Optional: names for errors, and the destructor of 0.7 and newer.
	if err := dynlib.BindOptional(func(s dynlib.Symbol) error { return dynlib.Bind(h, path, s) },
		dynlib.Sym(&f.errorName, "cusparseLtGetErrorName"),
		dynlib.Sym(&f.algDestroy, "cusparseLtMatmulAlgSelectionDestroy")); err != nil {
		return nil, fmt.Errorf("cusparselt: %w", err)
	}

	host, err := mapHost(hostBytes)
	if err != nil {
		return nil, err
	}
	s.host = host
	s.handle = addr(host, 0)
	return s, nil
}

// Init initialises the library's handle for work on stream, in the
// current context, and checks its version (at least [MinVersion]). On
// failure the handle is destroyed again; Release the library.
func (s *Library) Init(stream cuda.Stream) error {
	f, path := &s.fn, s.path
	if err := s.check("cusparseLtInit", f.init(s.handle)); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var v int32
	if err := s.check("cusparseLtGetVersion", f.getVersion(s.handle, &v)); err != nil {
		return errors.Join(fmt.Errorf("%s: %w", path, err), s.check("cusparseLtDestroy", f.destroy(s.handle)))
	}
	if v < MinVersion {
		return errors.Join(fmt.Errorf("%s: version %s is older than %s", path, VersionString(int(v)),
			VersionString(MinVersion)), s.check("cusparseLtDestroy", f.destroy(s.handle)))
	}
	s.version = int(v)
	s.inited = true
	*(*float32)(unsafe.Pointer(&s.host[hostAlpha])) = 1
	*(*float32)(unsafe.Pointer(&s.host[hostBeta])) = 0
	*(*uintptr)(unsafe.Pointer(&s.host[hostStream])) = uintptr(stream)
	return nil
}

// VersionString formats cusparseLtGetVersion's number: 800 → "0.8.0".
func VersionString(v int) string {
	return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
}

// mapHost returns n bytes of zeroed anonymous memory that the Go runtime
// never moves, for the objects the library keeps pointers into.
func mapHost(n int) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("mapping %d bytes of host memory for cuSPARSELt: %w", n, err)
	}
	return b, nil
}

// addr returns the address of b[off]; b is memory from mapHost.
func addr(b []byte, off int) uintptr { return uintptr(unsafe.Pointer(&b[off])) }

// Version returns the library's version number, e.g. 800 for 0.8.0.
func (s *Library) Version() int { return s.version }

// Path returns the file the library was loaded from.
func (s *Library) Path() string { return s.path }

// String says which cuSPARSELt is in use, e.g. "cuSPARSELt 0.8.0 (/path)".
func (s *Library) String() string {
	return fmt.Sprintf("cuSPARSELt %s (%s)", VersionString(s.version), s.path)
}

// check turns a cusparseStatus_t into nil or an *Error.
func (s *Library) check(op string, status int32) error {
	if status == 0 {
		return nil
	}
	name := ""
	if s.fn.errorName != nil {
		name = s.fn.errorName(status)
	}
	if name == "" {
		name = fmt.Sprintf("CUSPARSE_STATUS_%d", status)
	}
	return &Error{Op: op, Status: int(status), Name: name}
}

// Destroy destroys the plans and the handle, in the current context.
func (s *Library) Destroy() error {
	var errs []error
	for k, p := range s.plans {
		errs = append(errs, p.destroy())
		delete(s.plans, k)
	}
	if s.inited {
		s.inited = false
		errs = append(errs, s.check("cusparseLtDestroy", s.fn.destroy(s.handle)))
	}
	return errors.Join(errs...)
}

// Release unmaps the library's host memory; it needs no context and is
// the last call on s. Calling it again does nothing.
func (s *Library) Release() error {
	if s.host == nil {
		return nil
	}
	err := unix.Munmap(s.host)
	s.host = nil
	return err
}

// weightDescriptor initialises, in mat, the structured descriptor of a
// 2:4 weight W [n][k] row-major of type dt, as every plan and the
// compression see it.
func (s *Library) weightDescriptor(mat uintptr, dt cuda.DataType, n, k int) error {
	return s.check("cusparseLtStructuredDescriptorInit", s.fn.structInit(s.handle, mat, int64(n), int64(k), int64(k),
		alignment, int32(dt), orderRow, sparsity50))
}

// CompressedSize returns the bytes of the compressed form of a 2:4
// weight n×k of type dt (the size of [Library.Compress]'s destination)
// and of the device scratch the compression needs.
func (s *Library) CompressedSize(dt cuda.DataType, n, k int) (size, scratch int64, err error) {
	err = s.withWeightDescriptor(dt, n, k, func(mat uintptr) error {
		var c, b uint64
		if err := s.check("cusparseLtSpMMACompressedSize2", s.fn.compSize2(s.handle, mat, &c, &b)); err != nil {
			return err
		}
		size, scratch = int64(c), int64(b)
		return nil
	})
	return size, scratch, err
}

// withWeightDescriptor runs fn with a temporary weight descriptor.
func (s *Library) withWeightDescriptor(dt cuda.DataType, n, k int, fn func(mat uintptr) error) error {
	host, err := mapHost(objectBytes)
	if err != nil {
		return err
	}
	mat := addr(host, 0)
	if err := s.weightDescriptor(mat, dt, n, k); err != nil {
		return errors.Join(err, unix.Munmap(host))
	}
	err = fn(mat)
	return errors.Join(err, s.check("cusparseLtMatDescriptorDestroy", s.fn.matDestroy(mat)), unix.Munmap(host))
}

// Compress queues on stream the compression of the weight w [n][k]
// (row-major, type dt, already 2:4 along k) into dst, which holds the
// first size of [Library.CompressedSize]; scratch holds its second (0
// when that is 0), and must outlive the compression.
func (s *Library) Compress(dst, w, scratch cuda.DevicePtr, dt cuda.DataType, n, k int, stream cuda.Stream) error {
	return s.withWeightDescriptor(dt, n, k, func(mat uintptr) error {
		return s.check("cusparseLtSpMMACompress2",
			s.fn.compress2(s.handle, mat, 1, opN, uint64(w), uint64(dst), uint64(scratch), uintptr(stream)))
	})
}
