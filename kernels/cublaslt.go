package kernels

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	out := cublasLtNames()
	var prefixes []string
	if venv != "" {
		prefixes = append(prefixes, venv)
	}
	prefixes = append(prefixes, "/opt/*/.venv", "/opt/*", "/opt/conda", "/usr/local", "/usr")
	if home != "" {
		prefixes = append(prefixes, filepath.Join(home, ".local"))
	}
	var patterns []string
	for _, p := range prefixes {
		for _, site := range []string{"site-packages", "dist-packages"} {
			for _, sub := range []string{"nvidia/cu13/lib", "nvidia/cublas/lib"} {
				patterns = append(patterns, filepath.Join(p, "lib", "python3*", site, sub, "libcublasLt.so*"))
			}
		}
	}
	patterns = append(patterns, "/usr/local/cuda/lib64/libcublasLt.so*", "/usr/local/cuda-*/lib64/libcublasLt.so*")
	seen := map[string]bool{}
	for _, pat := range patterns {
		files, _ := filepath.Glob(pat)
		slices.Sort(files)
		slices.Reverse(files) // .so.13 before .so.12
		for _, f := range files {
			if !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	return out
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
	lt := &cublasLt{path: path}
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

// close destroys the handle; the workspace is freed with the device's
// buffers. It runs with the context current and the mutex held.
func (lt *cublasLt) close() error {
	return lt.check("cublasLtDestroy", lt.destroy(lt.handle))
}

// matmul computes y[m][n] = x[m][k] · w[n][k]ᵀ. Row-major through the
// column-major library: y viewed column-major is yᵀ [n][m] = w · xᵀ, so
// A = w (stored k×n column-major, op T), B = x (k×m, op N), C = D = y
// (n×m, ld n). It runs with the context current and the mutex held.
func (lt *cublasLt) matmul(d *Device, y, x, w *Buffer, dt DType, m, n, k int) (err error) {
	var desc, la, lb, lc, pref uintptr
	defer func() {
		for _, l := range []uintptr{la, lb, lc} {
			if l != 0 {
				err = errors.Join(err, lt.check("cublasLtMatrixLayoutDestroy", lt.layoutDestroy(l)))
			}
		}
		if desc != 0 {
			err = errors.Join(err, lt.check("cublasLtMatmulDescDestroy", lt.descDestroy(desc)))
		}
		if pref != 0 {
			err = errors.Join(err, lt.check("cublasLtMatmulPreferenceDestroy", lt.prefDestroy(pref)))
		}
	}()
	if err := lt.check("cublasLtMatmulDescCreate", lt.descCreate(&desc, cublasCompute32F, cudaR32F)); err != nil {
		return err
	}
	opT, opN := int32(cublasOpT), int32(cublasOpN)
	if err := lt.check("cublasLtMatmulDescSetAttribute(TRANSA)",
		lt.descSetAttr(desc, ltDescTransA, unsafe.Pointer(&opT), 4)); err != nil {
		return err
	}
	if err := lt.check("cublasLtMatmulDescSetAttribute(TRANSB)",
		lt.descSetAttr(desc, ltDescTransB, unsafe.Pointer(&opN), 4)); err != nil {
		return err
	}
	t := dt.cudaDataType()
	if err := lt.check("cublasLtMatrixLayoutCreate(A)",
		lt.layoutCreate(&la, t, uint64(k), uint64(n), int64(k))); err != nil {
		return err
	}
	if err := lt.check("cublasLtMatrixLayoutCreate(B)",
		lt.layoutCreate(&lb, t, uint64(k), uint64(m), int64(k))); err != nil {
		return err
	}
	if err := lt.check("cublasLtMatrixLayoutCreate(C)",
		lt.layoutCreate(&lc, cudaR32F, uint64(n), uint64(m), int64(n))); err != nil {
		return err
	}
	if err := lt.check("cublasLtMatmulPreferenceCreate", lt.prefCreate(&pref)); err != nil {
		return err
	}
	wsMax := uint64(lt.ws.n)
	if err := lt.check("cublasLtMatmulPreferenceSetAttribute",
		lt.prefSetAttr(pref, ltPrefMaxWorkspace, unsafe.Pointer(&wsMax), 8)); err != nil {
		return err
	}
	var res [ltRequestedAlgorithms]ltHeuristic
	var found int32
	if err := lt.check("cublasLtMatmulAlgoGetHeuristic",
		lt.heuristic(lt.handle, desc, la, lb, lc, lc, pref, int32(len(res)), &res[0], &found)); err != nil {
		return err
	}
	pick := -1
	for i := 0; i < int(found) && i < len(res); i++ {
		if res[i].state == 0 && res[i].workspaceSize <= wsMax {
			pick = i
			break
		}
	}
	if pick < 0 {
		return fmt.Errorf("cuBLASLt has no algorithm for %v m=%d n=%d k=%d", dt, m, n, k)
	}
	alpha, beta := float32(1), float32(0)
	return lt.check("cublasLtMatmul", lt.ltMatmul(lt.handle, desc, &alpha, w.ptr, la, x.ptr, lb, &beta,
		y.ptr, lc, y.ptr, lc, &res[pick].algo, lt.ws.ptr, uintptr(wsMax), d.stream))
}
