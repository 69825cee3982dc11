package kernels

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrNoSparseLt is wrapped by the error of [Device.OpenSparseLt] when
// cuSPARSELt cannot be found, loaded or used on this machine.
var ErrNoSparseLt = errors.New("kernels: cuSPARSELt unavailable")

// cuSPARSELt constants (cusparseLt.h 0.8, shared/docs/formats.md §5).
const (
	spOpN           = 0 // CUSPARSE_OPERATION_NON_TRANSPOSE
	spOpT           = 1 // CUSPARSE_OPERATION_TRANSPOSE
	spOrderCol      = 1 // CUSPARSE_ORDER_COL
	spOrderRow      = 2 // CUSPARSE_ORDER_ROW
	spCompute32F    = 2 // CUSPARSE_COMPUTE_32F
	spSparsity50    = 0 // CUSPARSELT_SPARSITY_50_PERCENT
	spAlgDefault    = 0 // CUSPARSELT_MATMUL_ALG_DEFAULT
	spAlignment     = 16
	spStatusNotSupp = 10 // CUSPARSE_STATUS_NOT_SUPPORTED
	spStatusInvalid = 3  // CUSPARSE_STATUS_INVALID_VALUE

	// spObjectBytes is what each opaque object gets: the 0.7 and 0.8
	// headers declare 512 bytes (aligned 16), NVIDIA's own bindings
	// allocate 1024, and older headers show up to 11024.
	spObjectBytes = 16 << 10
	// spMinVersion is the oldest cuSPARSELt whose ABI this file follows
	// (cusparseLtMatmulPlanInit without a workspace argument, the *2
	// compression calls): 0.6.0.
	spMinVersion = 600
)

// SparseLt is NVIDIA's cuSPARSELt loaded on a [Device]: a library handle,
// compression of 2:4 weights into its own layout, and matmul plans cached
// per shape. Its methods are serialised with the Device's; Close releases
// it (the Device's Close frees its buffers but not the library).
type SparseLt struct {
	d       *Device
	path    string
	version int
	host    []byte  // pinned-in-place host memory: handle, scalars, stream
	handle  uintptr // &host[0]
	ws      *Buffer // workspace, grown to the largest plan's need
	plans   map[ltKey]*SparseLtPlan
	closed  bool
	fn      spFuncs
}

// spFuncs are the library's entry points. Opaque objects and host
// scalars are passed as addresses in memory from mmap (never the Go heap);
// device pointers as uint64.
type spFuncs struct {
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

// Offsets in SparseLt.host after the handle: alpha, beta (float32) and
// the stream array of one cudaStream_t that cusparseLtMatmul reads.
const (
	spHostAlpha  = spObjectBytes
	spHostBeta   = spObjectBytes + 16
	spHostStream = spObjectBytes + 32
	spHostBytes  = spObjectBytes + 4096
)

// cusparseLtCandidates lists the files to try: env alone if set, else the
// soname, then the pip wheels (nvidia/cusparselt/lib, nvidia/cu13/lib)
// under common Python prefixes, then CUDA toolkits.
func cusparseLtCandidates(env, home, venv string) []string {
	if env != "" {
		return []string{env}
	}
	return libraryCandidates([]string{"libcusparseLt.so.0", "libcusparseLt.so"},
		[]string{"nvidia/cusparselt/lib", "nvidia/cu13/lib"}, "libcusparseLt.so*", home, venv)
}

// OpenSparseLt finds and initialises cuSPARSELt for d (the environment
// variable SFSURGERY_CUSPARSELT may name the library file). An error that
// means the library is missing, unusable or too old wraps
// [ErrNoSparseLt]; callers go on without it.
func (d *Device) OpenSparseLt() (*SparseLt, error) {
	env := os.Getenv("SFSURGERY_CUSPARSELT")
	home, _ := os.UserHomeDir()
	var errs []error
	for _, path := range cusparseLtCandidates(env, home, os.Getenv("VIRTUAL_ENV")) {
		s, err := d.openSparseLt(path)
		if err == nil {
			return s, nil
		}
		if errors.Is(err, ErrClosed) {
			return nil, err
		}
		errs = append(errs, err)
	}
	if env != "" {
		return nil, fmt.Errorf("%w: SFSURGERY_CUSPARSELT=%s: %w", ErrNoSparseLt, env, errors.Join(errs...))
	}
	return nil, fmt.Errorf("%w (tried the soname, python wheels, /usr/local/cuda; set SFSURGERY_CUSPARSELT): %w",
		ErrNoSparseLt, errs[len(errs)-1])
}

func (d *Device) openSparseLt(path string) (*SparseLt, error) {
	h, err := dlopen(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := &SparseLt{d: d, path: path, plans: make(map[ltKey]*SparseLtPlan)}
	f := &s.fn
	syms := []symbol{
		sym(&f.init, "cusparseLtInit"),
		sym(&f.destroy, "cusparseLtDestroy"),
		sym(&f.getVersion, "cusparseLtGetVersion"),
		sym(&f.denseInit, "cusparseLtDenseDescriptorInit"),
		sym(&f.structInit, "cusparseLtStructuredDescriptorInit"),
		sym(&f.matDestroy, "cusparseLtMatDescriptorDestroy"),
		sym(&f.matmulInit, "cusparseLtMatmulDescriptorInit"),
		sym(&f.algInit, "cusparseLtMatmulAlgSelectionInit"),
		sym(&f.planInit, "cusparseLtMatmulPlanInit"),
		sym(&f.planDestroy, "cusparseLtMatmulPlanDestroy"),
		sym(&f.workspace, "cusparseLtMatmulGetWorkspace"),
		sym(&f.compSize2, "cusparseLtSpMMACompressedSize2"),
		sym(&f.compress2, "cusparseLtSpMMACompress2"),
		sym(&f.matmul, "cusparseLtMatmul"),
		sym(&f.search, "cusparseLtMatmulSearch"),
	}
	if err := bindAll(h, path, syms); err != nil {
		return nil, err
	}
	// Optional: names for errors, and the destructor of 0.7 and newer.
	_ = bind(h, path, sym(&f.errorName, "cusparseLtGetErrorName"))
	_ = bind(h, path, sym(&f.algDestroy, "cusparseLtMatmulAlgSelectionDestroy"))

	host, err := mapHost(spHostBytes)
	if err != nil {
		return nil, err
	}
	s.host = host
	s.handle = addr(host, 0)
	err = d.do(func() error {
		if err := s.check("cusparseLtInit", f.init(s.handle)); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		var v int32
		if err := s.check("cusparseLtGetVersion", f.getVersion(s.handle, &v)); err != nil {
			return errors.Join(fmt.Errorf("%s: %w", path, err), s.check("cusparseLtDestroy", f.destroy(s.handle)))
		}
		if v < spMinVersion {
			return errors.Join(fmt.Errorf("%s: version %s is older than %s", path, sparseLtVersionString(int(v)),
				sparseLtVersionString(spMinVersion)), s.check("cusparseLtDestroy", f.destroy(s.handle)))
		}
		s.version = int(v)
		*(*float32)(unsafe.Pointer(&host[spHostAlpha])) = 1
		*(*float32)(unsafe.Pointer(&host[spHostBeta])) = 0
		*(*uintptr)(unsafe.Pointer(&host[spHostStream])) = d.stream
		return nil
	})
	if err != nil {
		return nil, errors.Join(err, unix.Munmap(host))
	}
	return s, nil
}

// sparseLtVersionString formats cusparseLtGetVersion's number: 800 → "0.8.0".
func sparseLtVersionString(v int) string {
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
func (s *SparseLt) Version() int { return s.version }

// Path returns the file the library was loaded from.
func (s *SparseLt) Path() string { return s.path }

// String says which cuSPARSELt is in use, e.g. "cuSPARSELt 0.8.0 (/path)".
func (s *SparseLt) String() string {
	return fmt.Sprintf("cuSPARSELt %s (%s)", sparseLtVersionString(s.version), s.path)
}

// check turns a cusparseStatus_t into nil or a *CUDAError.
func (s *SparseLt) check(op string, status int32) error {
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
	return &CUDAError{Op: op, Code: int(status), Name: name}
}

// do runs fn on the device's thread with the mutex held, after checking
// that s is open.
func (s *SparseLt) do(fn func() error) error {
	if s == nil {
		return fmt.Errorf("%w: nil SparseLt", ErrClosed)
	}
	return s.d.do(func() error {
		if s.closed {
			return fmt.Errorf("%w: cuSPARSELt was closed", ErrClosed)
		}
		return fn()
	})
}

// Close destroys the cached plans and the library handle and frees the
// workspace. Calling it again does nothing.
func (s *SparseLt) Close() error {
	if s == nil {
		return nil
	}
	err := s.d.do(func() error {
		if s.closed {
			return nil
		}
		s.closed = true
		var errs []error
		for key, p := range s.plans {
			errs = append(errs, p.destroy())
			delete(s.plans, key)
		}
		if s.ws != nil && s.ws.ptr != 0 {
			errs = append(errs, s.d.free(s.ws))
		}
		errs = append(errs, s.check("cusparseLtDestroy", s.fn.destroy(s.handle)))
		return errors.Join(errs...)
	})
	if errors.Is(err, ErrClosed) {
		// The Device was closed first: its context and buffers are gone.
		err = nil
	}
	if s.host != nil {
		err = errors.Join(err, unix.Munmap(s.host))
		s.host = nil
	}
	return err
}

// weightDescriptor initialises, in mat, the structured descriptor of a
// 2:4 weight W [n][k] row-major of type dt, as every plan and the
// compression see it.
func (s *SparseLt) weightDescriptor(mat uintptr, dt DType, n, k int) error {
	return s.check("cusparseLtStructuredDescriptorInit", s.fn.structInit(s.handle, mat, int64(n), int64(k), int64(k),
		spAlignment, dt.cudaDataType(), spOrderRow, spSparsity50))
}

// CompressedSize returns the bytes of the compressed form of a 2:4
// weight n×k of type dt, the size of the destination of
// [SparseLt.Compress].
func (s *SparseLt) CompressedSize(dt DType, n, k int) (int64, error) {
	size, _, err := s.compressedSize(dt, n, k)
	return size, err
}

func (s *SparseLt) compressedSize(dt DType, n, k int) (size, scratch int64, err error) {
	if err := checkDims("SparseLt.CompressedSize", dt, 1, n, k); err != nil {
		return 0, 0, err
	}
	err = s.do(func() error {
		return s.withWeightDescriptor(dt, n, k, func(mat uintptr) error {
			var c, b uint64
			if err := s.check("cusparseLtSpMMACompressedSize2", s.fn.compSize2(s.handle, mat, &c, &b)); err != nil {
				return err
			}
			size, scratch = int64(c), int64(b)
			return nil
		})
	})
	return size, scratch, err
}

// withWeightDescriptor runs fn with a temporary weight descriptor.
func (s *SparseLt) withWeightDescriptor(dt DType, n, k int, fn func(mat uintptr) error) error {
	host, err := mapHost(spObjectBytes)
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

// Compress writes into dst the library's compressed form of the weight w
// [n][k] (row-major, type dt), which must already be 2:4 along k (as
// sfsurgery prunes it). dst holds at least CompressedSize bytes. The
// compression runs on the GPU, on the device's stream.
func (s *SparseLt) Compress(dst, w *Buffer, dt DType, n, k int) error {
	const op = "SparseLt.Compress"
	if err := checkDims(op, dt, 1, n, k); err != nil {
		return err
	}
	wBytes, err := size(n, k, 2)
	if err != nil {
		return err
	}
	cBytes, scratchBytes, err := s.compressedSize(dt, n, k)
	if err != nil {
		return err
	}
	return s.do(func() error {
		if err := s.d.operands(op, operand{dst, "dst", cBytes}, operand{w, "w", wBytes}); err != nil {
			return err
		}
		var scratch *Buffer
		if scratchBytes > 0 {
			if scratch, err = s.d.alloc(scratchBytes); err != nil {
				return err
			}
		}
		err := s.withWeightDescriptor(dt, n, k, func(mat uintptr) error {
			var sp uint64
			if scratch != nil {
				sp = scratch.ptr
			}
			return s.check("cusparseLtSpMMACompress2",
				s.fn.compress2(s.handle, mat, 1, spOpN, w.ptr, dst.ptr, sp, s.d.stream))
		})
		if scratch != nil {
			// The stream must finish with the scratch before it is freed.
			err = errors.Join(err, s.d.drv.check("cuCtxSynchronize", s.d.drv.cuCtxSynchronize()), s.d.free(scratch))
		}
		return err
	})
}

// workspace returns a workspace of at least n bytes (nil for 0). It runs
// with the mutex held.
func (s *SparseLt) workspace(n int64) (*Buffer, error) {
	if n == 0 {
		return nil, nil
	}
	if s.ws != nil && s.ws.ptr != 0 && s.ws.n >= n {
		return s.ws, nil
	}
	if s.ws != nil && s.ws.ptr != 0 {
		if err := s.d.drv.check("cuCtxSynchronize", s.d.drv.cuCtxSynchronize()); err != nil {
			return nil, err
		}
		if err := s.d.free(s.ws); err != nil {
			return nil, err
		}
	}
	ws, err := s.d.alloc(n)
	if err != nil {
		return nil, fmt.Errorf("cuSPARSELt workspace: %w", err)
	}
	s.ws = ws
	return ws, nil
}
