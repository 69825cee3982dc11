package kernels

import (
	"errors"
	"fmt"
	"unsafe"
)

// ltKey identifies a cached cuBLASLt product: data type and sizes.
type ltKey struct {
	dt      DType
	m, n, k int
}

// ltPlan is what one shape needs from cuBLASLt, computed once: the matmul
// descriptor, the three layouts and the heuristic's usable algorithms,
// best first.
type ltPlan struct {
	desc, la, lb, lc uintptr
	algos            []ltHeuristic
}

// plan returns the cached plan of key, creating it on first use. It runs
// with the context current and the mutex held.
//
// y[m][n] = x[m][k] · w[n][k]ᵀ, row-major, through the column-major
// library: y viewed column-major is yᵀ [n][m] = w · xᵀ, so A = w (stored
// k×n column-major, op T), B = x (k×m, op N), C = D = y (n×m, ld n).
func (lt *cublasLt) plan(key ltKey) (*ltPlan, error) {
	if p, ok := lt.plans[key]; ok {
		return p, nil
	}
	if len(lt.plans) >= ltMaxPlans {
		if err := lt.dropPlans(); err != nil {
			return nil, err
		}
	}
	p := new(ltPlan)
	if err := lt.build(p, key); err != nil {
		return nil, errors.Join(err, lt.destroyPlan(p))
	}
	lt.plans[key] = p
	return p, nil
}

// build fills p for key; on error the caller destroys what was created.
func (lt *cublasLt) build(p *ltPlan, key ltKey) error {
	m, n, k := uint64(key.m), uint64(key.n), uint64(key.k)
	if err := lt.check("cublasLtMatmulDescCreate", lt.descCreate(&p.desc, cublasCompute32F, cudaR32F)); err != nil {
		return err
	}
	opT, opN := int32(cublasOpT), int32(cublasOpN)
	if err := lt.check("cublasLtMatmulDescSetAttribute(TRANSA)",
		lt.descSetAttr(p.desc, ltDescTransA, unsafe.Pointer(&opT), 4)); err != nil {
		return err
	}
	if err := lt.check("cublasLtMatmulDescSetAttribute(TRANSB)",
		lt.descSetAttr(p.desc, ltDescTransB, unsafe.Pointer(&opN), 4)); err != nil {
		return err
	}
	t := key.dt.cudaDataType()
	if err := lt.check("cublasLtMatrixLayoutCreate(A)", lt.layoutCreate(&p.la, t, k, n, int64(k))); err != nil {
		return err
	}
	if err := lt.check("cublasLtMatrixLayoutCreate(B)", lt.layoutCreate(&p.lb, t, k, m, int64(k))); err != nil {
		return err
	}
	if err := lt.check("cublasLtMatrixLayoutCreate(C)", lt.layoutCreate(&p.lc, cudaR32F, n, m, int64(n))); err != nil {
		return err
	}
	algos, err := lt.heuristics(p)
	if err != nil {
		return err
	}
	if len(algos) == 0 {
		return fmt.Errorf("cuBLASLt has no algorithm for %v m=%d n=%d k=%d", key.dt, m, n, k)
	}
	p.algos = algos
	return nil
}

// heuristics asks cuBLASLt for up to ltRequestedAlgorithms algorithms of
// p and keeps those that succeed within the workspace, in its order.
func (lt *cublasLt) heuristics(p *ltPlan) (out []ltHeuristic, err error) {
	var pref uintptr
	if err := lt.check("cublasLtMatmulPreferenceCreate", lt.prefCreate(&pref)); err != nil {
		return nil, err
	}
	defer func() {
		err = errors.Join(err, lt.check("cublasLtMatmulPreferenceDestroy", lt.prefDestroy(pref)))
	}()
	wsMax := uint64(lt.ws.n)
	if err := lt.check("cublasLtMatmulPreferenceSetAttribute",
		lt.prefSetAttr(pref, ltPrefMaxWorkspace, unsafe.Pointer(&wsMax), 8)); err != nil {
		return nil, err
	}
	var res [ltRequestedAlgorithms]ltHeuristic
	var found int32
	if err := lt.check("cublasLtMatmulAlgoGetHeuristic",
		lt.heuristic(lt.handle, p.desc, p.la, p.lb, p.lc, p.lc, pref, int32(len(res)), &res[0], &found)); err != nil {
		return nil, err
	}
	for i := 0; i < int(found) && i < len(res); i++ {
		if res[i].state == 0 && res[i].workspaceSize <= wsMax {
			out = append(out, res[i])
		}
	}
	return out, nil
}

// destroyPlan releases whatever p holds.
func (lt *cublasLt) destroyPlan(p *ltPlan) error {
	var errs []error
	for _, l := range []uintptr{p.la, p.lb, p.lc} {
		if l != 0 {
			errs = append(errs, lt.check("cublasLtMatrixLayoutDestroy", lt.layoutDestroy(l)))
		}
	}
	if p.desc != 0 {
		errs = append(errs, lt.check("cublasLtMatmulDescDestroy", lt.descDestroy(p.desc)))
	}
	*p = ltPlan{}
	return errors.Join(errs...)
}

// dropPlans destroys every cached plan.
func (lt *cublasLt) dropPlans() error {
	var errs []error
	for key, p := range lt.plans {
		errs = append(errs, lt.destroyPlan(p))
		delete(lt.plans, key)
	}
	return errors.Join(errs...)
}

// matmul computes y[m][n] = x[m][k] · w[n][k]ᵀ with the heuristic's first
// algorithm. It runs with the context current and the mutex held.
func (lt *cublasLt) matmul(d *Device, y, x, w *Buffer, dt DType, m, n, k int) error {
	return lt.matmulWith(d, y, x, w, ltKey{dt, m, n, k}, 0)
}

// matmulWith is matmul with the heuristic's candidate i.
func (lt *cublasLt) matmulWith(d *Device, y, x, w *Buffer, key ltKey, i int) error {
	p, err := lt.plan(key)
	if err != nil {
		return err
	}
	if i < 0 || i >= len(p.algos) {
		return argError("DenseMatmulCandidate: candidate %d of %d", i, len(p.algos))
	}
	alpha, beta := float32(1), float32(0)
	return lt.check("cublasLtMatmul", lt.ltMatmul(lt.handle, p.desc, &alpha, w.ptr, p.la, x.ptr, p.lb, &beta,
		y.ptr, p.lc, y.ptr, p.lc, &p.algos[i].algo, lt.ws.ptr, uintptr(lt.ws.n), d.stream))
}
