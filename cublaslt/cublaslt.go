package kernels

import (
	"errors"
	"fmt"
	"os"
	"unsafe"
)

// cuBLASLt constants (cublasLt.h, cublas_api.h, library_types.h).
const (
	cublasCompute32F      = 68 // CUBLAS_COMPUTE_32F
	cudaR32F              = 0  // CUDA_R_32F
	cublasOpN             = 0  // CUBLAS_OP_N
	cublasOpT             = 1  // CUBLAS_OP_T
	ltDescTransA          = 3  // CUBLASLT_MATMUL_DESC_TRANSA
	ltDescTransB          = 4  // CUBLASLT_MATMUL_DESC_TRANSB
	ltPrefMaxWorkspace    = 1  // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
	ltWorkspaceBytes      = 32 << 20
	ltRequestedAlgorithms = 8
	ltMaxPlans            = 1024 // cached shapes; the cache is emptied when full
)

// ltHeuristic is cublasLtMatmulHeuristicResult_t: the algorithm
// (uint64 data[8]), size_t workspaceSize, cublasStatus_t state, float
// wavesCount, int reserved[4]: 96 bytes.
type ltHeuristic struct {
	algo          [8]uint64
	workspaceSize uint64
	state         int32
	wavesCount    float32
	reserved      [4]int32
}

// cublasLt is a loaded cuBLASLt with a handle and a workspace.
type cublasLt struct {
	path    string
	version uint64
	handle  uintptr
	ws      *Buffer
	plans   map[ltKey]*ltPlan // descriptors and algorithms per shape

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
	heuristic     func(h, desc, a, b, c, d, pref uintptr, req int32, res *ltHeuristic, n *int32) int32
	ltMatmul      func(h, desc uintptr, alpha *float32, a uint64, adesc uintptr, b uint64, bdesc uintptr,
		beta *float32, c uint64, cdesc uintptr, d uint64, ddesc uintptr, algo *[8]uint64,
		ws uint64, wsSize uintptr, stream uintptr) int32
}

// cublasLtNames returns the library names dlopen tries first
// (LD_LIBRARY_PATH, the ld.so cache).
func cublasLtNames() []string {
	return []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}
}

// cublasLtCandidates lists the files to try: env alone if set, else the
// sonames, then the pip wheels (nvidia/cu13/lib, nvidia/cublas/lib) under
// common Python prefixes, then CUDA toolkits.
func cublasLtCandidates(env, home, venv string) []string {
	if env != "" {
		return []string{env}
	}
	return libraryCandidates(cublasLtNames(), []string{"nvidia/cu13/lib", "nvidia/cublas/lib"},
		"libcublasLt.so*", home, venv)
}

// loadCublasLt finds and initialises cuBLASLt. It runs with the context
// current and the mutex held. The error says what was tried.
func loadCublasLt(d *Device, env string) (*cublasLt, error) {
	home, _ := os.UserHomeDir()
	var errs []error
	for _, path := range cublasLtCandidates(env, home, os.Getenv("VIRTUAL_ENV")) {
		lt, err := openCublasLt(d, path)
		if err == nil {
			return lt, nil
		}
		errs = append(errs, err)
	}
	if env != "" {
		return nil, fmt.Errorf("no cuBLASLt: SFSURGERY_CUBLASLT=%s: %w", env, errors.Join(errs...))
	}
	return nil, fmt.Errorf("no cuBLASLt (tried %d candidates: sonames, python wheels, /usr/local/cuda; "+
		"set SFSURGERY_CUBLASLT): %w", len(errs), errs[len(errs)-1])
}

func openCublasLt(d *Device, path string) (*cublasLt, error) {
	h, err := dlopen(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	lt := &cublasLt{path: path, plans: make(map[ltKey]*ltPlan)}
	syms := []symbol{
		sym(&lt.create, "cublasLtCreate"),
		sym(&lt.destroy, "cublasLtDestroy"),
		sym(&lt.getVersion, "cublasLtGetVersion"),
		sym(&lt.statusName, "cublasLtGetStatusName"),
		sym(&lt.descCreate, "cublasLtMatmulDescCreate"),
		sym(&lt.descDestroy, "cublasLtMatmulDescDestroy"),
		sym(&lt.descSetAttr, "cublasLtMatmulDescSetAttribute"),
		sym(&lt.layoutCreate, "cublasLtMatrixLayoutCreate"),
		sym(&lt.layoutDestroy, "cublasLtMatrixLayoutDestroy"),
		sym(&lt.prefCreate, "cublasLtMatmulPreferenceCreate"),
		sym(&lt.prefDestroy, "cublasLtMatmulPreferenceDestroy"),
		sym(&lt.prefSetAttr, "cublasLtMatmulPreferenceSetAttribute"),
		sym(&lt.heuristic, "cublasLtMatmulAlgoGetHeuristic"),
		sym(&lt.ltMatmul, "cublasLtMatmul"),
	}
	if err := bindAll(h, path, syms); err != nil {
		return nil, err
	}
	lt.version = uint64(lt.getVersion())
	if err := lt.check("cublasLtCreate", lt.create(&lt.handle)); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ws, err := d.alloc(ltWorkspaceBytes)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("cuBLASLt workspace: %w", err), lt.check("cublasLtDestroy", lt.destroy(lt.handle)))
	}
	lt.ws = ws
	return lt, nil
}

// describe says which cuBLASLt is in use.
func (lt *cublasLt) describe() string {
	return fmt.Sprintf("cuBLASLt %d (%s)", lt.version, lt.path)
}

// check turns a cublasStatus_t into nil or a *CUDAError.
func (lt *cublasLt) check(op string, status int32) error {
	if status == 0 {
		return nil
	}
	name := lt.statusName(status)
	if name == "" {
		name = fmt.Sprintf("CUBLAS_STATUS_%d", status)
	}
	return &CUDAError{Op: op, Code: int(status), Name: name}
}

// close destroys the cached plans and the handle; the workspace is freed
// with the device's buffers. It runs with the context current and the
// mutex held.
func (lt *cublasLt) close() error {
	err := lt.dropPlans()
	return errors.Join(err, lt.check("cublasLtDestroy", lt.destroy(lt.handle)))
}
