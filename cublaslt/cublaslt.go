// Package cublaslt binds NVIDIA's cuBLASLt for dense matrix products on
// the GPU, without cgo: [Open] loads the library at run time through
// github.com/ebitengine/purego. It is built on package cuda: operands are
// [cuda.DevicePtr]s, work is queued on a [cuda.Stream], and the caller
// makes the CUDA context current and serialises the calls, as package
// cuda says.
//
// One product is y[m][n] = x[m][k] · w[n][k]ᵀ, all row-major, 16-bit
// inputs and float32 output accumulated in float32. Its descriptors and
// the heuristic's algorithms are made once per [Shape] and cached.
package cublaslt

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/sfsurgery/sfsurgery/cuda"
	"github.com/sfsurgery/sfsurgery/internal/dynlib"
)

// cuBLASLt constants (cublasLt.h, cublas_api.h; tools/abi/ltabi.c prints
// them from the headers).
const (
	compute32F          = 68 // CUBLAS_COMPUTE_32F
	opN                 = 0  // CUBLAS_OP_N
	opT                 = 1  // CUBLAS_OP_T
	descTransA          = 3  // CUBLASLT_MATMUL_DESC_TRANSA
	descTransB          = 4  // CUBLASLT_MATMUL_DESC_TRANSB
	prefMaxWorkspace    = 1  // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
	requestedAlgorithms = 8
	maxPlans            = 1024 // cached shapes; the cache is emptied when full
)

// WorkspaceBytes is the size of the workspace a [Library] wants: the
// heuristic only offers algorithms that fit in it.
const WorkspaceBytes = 32 << 20

// heuristicResult is cublasLtMatmulHeuristicResult_t: the algorithm
// (uint64 data[8]), size_t workspaceSize, cublasStatus_t state, float
// wavesCount, int reserved[4]: 96 bytes.
type heuristicResult struct {
	algo          [8]uint64
	workspaceSize uint64
	state         int32
	wavesCount    float32
	reserved      [4]int32
}

// Library is a loaded cuBLASLt with a handle, a workspace and the plans
// of the shapes it has multiplied. It is not safe for concurrent use.
type Library struct {
	path    string
	version uint64
	handle  uintptr
	ws      cuda.DevicePtr
	wsBytes int64
	plans   map[Shape]*plan // descriptors and algorithms per shape

	create        func(h *uintptr) int32
	destroy       func(h uintptr) int32
	getVersion    func() uintptr
	statusName    func(status int32) string
	descCreate    func(desc *uintptr, compute int32, scale int32) int32
	descDestroy   func(desc uintptr) int32
	descSetAttr   func(desc uintptr, attr int32, buf unsafe.Pointer, size uintptr) int32
	layoutCreate  func(l *uintptr, typ int32, rows, cols uint64, ld int64) int32
	layoutDestroy func(l uintptr) int32
	prefCreate    func(p *uintptr) int32
	prefDestroy   func(p uintptr) int32
	prefSetAttr   func(p uintptr, attr int32, buf unsafe.Pointer, size uintptr) int32
	heuristic     func(h, desc, a, b, c, d, pref uintptr, req int32, res *heuristicResult, n *int32) int32
	matmul        func(h, desc uintptr, alpha *float32, a uint64, adesc uintptr, b uint64, bdesc uintptr,
		beta *float32, c uint64, cdesc uintptr, d uint64, ddesc uintptr, algo *[8]uint64,
		ws uint64, wsSize uintptr, stream uintptr) int32
}

// Error is a failed cuBLASLt call.
type Error struct {
	Op     string // the function called, e.g. "cublasLtMatmul"
	Status int    // its cublasStatus_t
	Name   string // the status's name, e.g. "CUBLAS_STATUS_NOT_SUPPORTED"
}

// Error returns "OP: NAME (STATUS)".
func (e *Error) Error() string { return fmt.Sprintf("%s: %s (%d)", e.Op, e.Name, e.Status) }

// names returns the library names dlopen tries first (LD_LIBRARY_PATH,
// the ld.so cache).
func names() []string {
	return []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}
}

// Candidates lists the files to [Open] in turn until one loads: env alone if set, else the
// sonames, then the pip wheels (nvidia/cu13/lib, nvidia/cublas/lib) under
// common Python prefixes (venv, home/.local and others), then CUDA
// toolkits.
func Candidates(env, home, venv string) []string {
	if env != "" {
		return []string{env}
	}
	return dynlib.Candidates(names(), []string{"nvidia/cu13/lib", "nvidia/cublas/lib"},
		"libcublasLt.so*", home, venv)
}

// Open loads cuBLASLt from path and creates a handle. Give it a workspace
// with [Library.SetWorkspace] before the first product.
func Open(path string) (*Library, error) {
	h, err := dynlib.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	lt := &Library{path: path, plans: make(map[Shape]*plan)}
	syms := []dynlib.Symbol{
		dynlib.Sym(&lt.create, "cublasLtCreate"),
		dynlib.Sym(&lt.destroy, "cublasLtDestroy"),
		dynlib.Sym(&lt.getVersion, "cublasLtGetVersion"),
		dynlib.Sym(&lt.statusName, "cublasLtGetStatusName"),
		dynlib.Sym(&lt.descCreate, "cublasLtMatmulDescCreate"),
		dynlib.Sym(&lt.descDestroy, "cublasLtMatmulDescDestroy"),
		dynlib.Sym(&lt.descSetAttr, "cublasLtMatmulDescSetAttribute"),
		dynlib.Sym(&lt.layoutCreate, "cublasLtMatrixLayoutCreate"),
		dynlib.Sym(&lt.layoutDestroy, "cublasLtMatrixLayoutDestroy"),
		dynlib.Sym(&lt.prefCreate, "cublasLtMatmulPreferenceCreate"),
		dynlib.Sym(&lt.prefDestroy, "cublasLtMatmulPreferenceDestroy"),
		dynlib.Sym(&lt.prefSetAttr, "cublasLtMatmulPreferenceSetAttribute"),
		dynlib.Sym(&lt.heuristic, "cublasLtMatmulAlgoGetHeuristic"),
		dynlib.Sym(&lt.matmul, "cublasLtMatmul"),
	}
	if err := dynlib.BindAll(h, path, syms); err != nil {
		return nil, err
	}
	lt.version = uint64(lt.getVersion())
	if err := lt.check("cublasLtCreate", lt.create(&lt.handle)); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return lt, nil
}

// SetWorkspace gives the library n bytes of device memory at p for its
// algorithms' scratch (normally [WorkspaceBytes]); the caller owns and
// frees it, after Close.
func (lt *Library) SetWorkspace(p cuda.DevicePtr, n int64) { lt.ws, lt.wsBytes = p, n }

// Version returns the library's version number, e.g. 130100.
func (lt *Library) Version() int { return int(lt.version) }

// Path returns the file the library was loaded from.
func (lt *Library) Path() string { return lt.path }

// String says which cuBLASLt is in use: "cuBLASLt VERSION (PATH)".
func (lt *Library) String() string {
	return fmt.Sprintf("cuBLASLt %d (%s)", lt.version, lt.path)
}

// check turns a cublasStatus_t into nil or an *Error.
func (lt *Library) check(op string, status int32) error {
	if status == 0 {
		return nil
	}
	name := lt.statusName(status)
	if name == "" {
		name = fmt.Sprintf("CUBLAS_STATUS_%d", status)
	}
	return &Error{Op: op, Status: int(status), Name: name}
}

// Close destroys the cached plans and the handle; the workspace stays the
// caller's.
func (lt *Library) Close() error {
	err := lt.dropPlans()
	return errors.Join(err, lt.check("cublasLtDestroy", lt.destroy(lt.handle)))
}
