package cublaslt

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/sfsurgery/sfsurgery/cuda"
)

// Shape identifies a product: the inputs' element type, y's, and the
// sizes of y[M][N] = x[M][K] · w[N][K]ᵀ.
type Shape struct {
	Type cuda.DataType // of x and w (cuda.R16BF or cuda.R16F)
	// Out is y's element type: cuda.R32F (the zero value) or Type, each
	// value then the float32 result rounded.
	Out     cuda.DataType
	M, N, K int
}

// check refuses an output type other than float32 or the inputs'.
func (s Shape) check() error {
	if s.Out != cuda.R32F && s.Out != s.Type {
		return fmt.Errorf("cuBLASLt: y of %v for inputs of %v: float32 or the inputs' type", s.Out, s.Type)
	}
	return nil
}

// plan is what one shape needs from cuBLASLt, computed once: the matmul
// descriptor, the three layouts and the heuristic's usable algorithms,
// best first.
type plan struct {
	desc, la, lb, lc uintptr
	algos            []heuristicResult
}

// Algorithms returns how many algorithms the heuristic offers for s
// (usable within the workspace, at most 8, best guess first), making and
// caching the shape's plan on first use.
func (lt *Library) Algorithms(s Shape) (int, error) {
	p, err := lt.plan(s)
	if err != nil {
		return 0, err
	}
	return len(p.algos), nil
}

// plan returns the cached plan of s, creating it on first use.
//
// y[m][n] = x[m][k] · w[n][k]ᵀ, row-major, through the column-major
// library: y viewed column-major is yᵀ [n][m] = w · xᵀ, so A = w (stored
// k×n column-major, op T), B = x (k×m, op N), C = D = y (n×m, ld n).
func (lt *Library) plan(s Shape) (*plan, error) {
	if p, ok := lt.plans[s]; ok {
		return p, nil
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	if len(lt.plans) >= maxPlans {
		if err := lt.dropPlans(); err != nil {
			return nil, err
		}
	}
	p := new(plan)
	if err := lt.build(p, s); err != nil {
		return nil, errors.Join(err, lt.destroyPlan(p))
	}
	lt.plans[s] = p
	return p, nil
}

// build fills p for s; on error the caller destroys what was created.
func (lt *Library) build(p *plan, s Shape) error {
	m, n, k := uint64(s.M), uint64(s.N), uint64(s.K)
	if err := lt.check("cublasLtMatmulDescCreate", lt.descCreate(&p.desc, compute32F, int32(cuda.R32F))); err != nil {
		return err
	}
	opTrans, opNone := int32(opT), int32(opN)
	if err := lt.check("cublasLtMatmulDescSetAttribute(TRANSA)",
		lt.descSetAttr(p.desc, descTransA, unsafe.Pointer(&opTrans), 4)); err != nil {
		return err
	}
	if err := lt.check("cublasLtMatmulDescSetAttribute(TRANSB)",
		lt.descSetAttr(p.desc, descTransB, unsafe.Pointer(&opNone), 4)); err != nil {
		return err
	}
	t := int32(s.Type)
	if err := lt.check("cublasLtMatrixLayoutCreate(A)", lt.layoutCreate(&p.la, t, k, n, int64(k))); err != nil {
		return err
	}
	if err := lt.check("cublasLtMatrixLayoutCreate(B)", lt.layoutCreate(&p.lb, t, k, m, int64(k))); err != nil {
		return err
	}
	if err := lt.check("cublasLtMatrixLayoutCreate(C)", lt.layoutCreate(&p.lc, int32(s.Out), n, m, int64(n))); err != nil {
		return err
	}
	algos, err := lt.heuristics(p)
	if err != nil {
		return err
	}
	if len(algos) == 0 {
		return fmt.Errorf("cuBLASLt has no algorithm for %v (y %v) m=%d n=%d k=%d", s.Type, s.Out, m, n, k)
	}
	p.algos = algos
	return nil
}

// heuristics asks cuBLASLt for up to requestedAlgorithms algorithms of p
// and keeps those that succeed within the workspace, in its order.
func (lt *Library) heuristics(p *plan) (out []heuristicResult, err error) {
	var pref uintptr
	if err := lt.check("cublasLtMatmulPreferenceCreate", lt.prefCreate(&pref)); err != nil {
		return nil, err
	}
	defer func() {
		err = errors.Join(err, lt.check("cublasLtMatmulPreferenceDestroy", lt.prefDestroy(pref)))
	}()
	wsMax := uint64(lt.wsBytes)
	if err := lt.check("cublasLtMatmulPreferenceSetAttribute",
		lt.prefSetAttr(pref, prefMaxWorkspace, unsafe.Pointer(&wsMax), 8)); err != nil {
		return nil, err
	}
	var res [requestedAlgorithms]heuristicResult
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
func (lt *Library) destroyPlan(p *plan) error {
	var errs []error
	for _, l := range []uintptr{p.la, p.lb, p.lc} {
		if l != 0 {
			errs = append(errs, lt.check("cublasLtMatrixLayoutDestroy", lt.layoutDestroy(l)))
		}
	}
	if p.desc != 0 {
		errs = append(errs, lt.check("cublasLtMatmulDescDestroy", lt.descDestroy(p.desc)))
	}
	*p = plan{}
	return errors.Join(errs...)
}

// dropPlans destroys every cached plan.
func (lt *Library) dropPlans() error {
	var errs []error
	for key, p := range lt.plans {
		errs = append(errs, lt.destroyPlan(p))
		delete(lt.plans, key)
	}
	return errors.Join(errs...)
}

// Matmul queues y = x · wᵀ of shape s on stream with the heuristic's
// algorithm algo (0 ≤ algo < [Library.Algorithms]; 0 is its best guess).
// The caller has checked that the buffers hold the shape.
func (lt *Library) Matmul(y, x, w cuda.DevicePtr, s Shape, algo int, stream cuda.Stream) error {
	p, err := lt.plan(s)
	if err != nil {
		return err
	}
	if algo < 0 || algo >= len(p.algos) {
		return fmt.Errorf("cuBLASLt: algorithm %d of %d", algo, len(p.algos))
	}
	alpha, beta := float32(1), float32(0)
	return lt.check("cublasLtMatmul", lt.matmul(lt.handle, p.desc, &alpha, uint64(w), p.la, uint64(x), p.lb, &beta,
		uint64(y), p.lc, uint64(y), p.lc, &p.algos[algo].algo, uint64(lt.ws), uintptr(lt.wsBytes), uintptr(stream)))
}
