package cusparselt

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/sfsurgery/sfsurgery/cuda"
)

// Objects of one plan, at these multiples of objectBytes in its host
// memory.
const (
	objA = iota
	objB
	objC
	objMatmul
	objAlg
	objPlan
	objects
)

// key identifies a cached plan: data type and sizes.
type key struct {
	dt      cuda.DataType
	m, n, k int
}

// Plan is a cuSPARSELt product y = x · Wᵀ of one data type and shape,
// planned once: y [m][n] of the input type (the library's combinations
// for 16-bit inputs have no float32 output: a float32 C is refused for
// BF16 and, on an H200 with 0.8.0, accepted for F16 but failed in the
// search with an illegal instruction), x [Rows][k] of type dt, W the
// compressed weight of [Library.Compress]. Plans are cached by
// [Library.Plan] and destroyed by [Library.Destroy].
type Plan struct {
	s        *Library
	dt       cuda.DataType
	m, n, k  int
	rows     int // m, or m rounded up when the library needs it
	outBytes int
	host     []byte
	inited   int // objects initialised, in the order above
	searched bool
	wsBytes  int64
}

// Rows returns the number of x and y rows the plan computes: m, or m
// rounded up to a multiple of 8 or 16 when the library does not take m
// itself (as PyTorch pads). x and y must hold that many rows; the extra
// rows of y are computed from the extra rows of x.
func (p *Plan) Rows() int { return p.rows }

// Shape returns the plan's n and k (W's rows and columns).
func (p *Plan) Shape() (n, k int) { return p.n, p.k }

// OutputBytes returns the size of an element of y: 2, the input type.
func (p *Plan) OutputBytes() int { return p.outBytes }

// Searched reports whether [Plan.Search] has chosen the plan's algorithm.
func (p *Plan) Searched() bool { return p.searched }

// Released reports whether the plan's objects were destroyed.
func (p *Plan) Released() bool { return p.host == nil }

// WorkspaceBytes returns the device workspace the plan's products need
// (0: none).
func (p *Plan) WorkspaceBytes() int64 { return p.wsBytes }

// Plan returns the plan of y[m][n] = x[m][k] · W[n][k]ᵀ for inputs of
// type dt, creating and caching it on first use. Seen on an H200 with
// cuSPARSELt 0.8.0: BF16 plans work (m padded to a multiple of 8); an
// F16 plan is made, but its Search fails with
// CUSPARSE_STATUS_INTERNAL_ERROR and leaves an illegal-instruction error
// that poisons the CUDA context, so callers should not search F16 plans
// on that library. W is row-major with its 2:4 groups along k; x and y
// are row-major. In the library's terms: A = W (structured, row-major
// n×k, not transposed), B = x seen as row-major m×k, transposed, and C =
// D = y seen as column-major n×m.
func (s *Library) Plan(dt cuda.DataType, m, n, k int) (*Plan, error) {
	key := key{dt, m, n, k}
	if cached, ok := s.plans[key]; ok {
		return cached, nil
	}
	var errs []error
	for _, rows := range planRows(m) {
		q, err := s.newPlan(dt, m, n, k, rows, 2)
		if err == nil {
			s.plans[key] = q
			return q, nil
		}
		errs = append(errs, err)
		if !retryable(err) {
			return nil, errors.Join(errs...)
		}
	}
	return nil, fmt.Errorf("cuSPARSELt has no plan for %v m=%d n=%d k=%d: %w", dt, m, n, k, errors.Join(errs...))
}

// planRows lists the row counts tried for m: m itself, then m rounded up
// to multiples of 8 and 16.
func planRows(m int) []int {
	out := []int{m}
	for _, a := range []int{8, 16} {
		if r := (m + a - 1) / a * a; r != out[len(out)-1] {
			out = append(out, r)
		}
	}
	return out
}

// retryable reports whether a plan's failure may go away with another
// row count: any refusal by the library (typically
// CUSPARSE_STATUS_NOT_SUPPORTED or INVALID_VALUE), not a failure of the
// host memory.
func retryable(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// newPlan initialises every object of a plan; on failure it releases
// what it made.
func (s *Library) newPlan(dt cuda.DataType, m, n, k, rows, outBytes int) (*Plan, error) {
	host, err := mapHost(objects * objectBytes)
	if err != nil {
		return nil, err
	}
	p := &Plan{s: s, dt: dt, m: m, n: n, k: k, rows: rows, outBytes: outBytes, host: host}
	if err := p.init(); err != nil {
		return nil, errors.Join(err, p.destroy())
	}
	return p, nil
}

// init initialises the plan's objects in order, counting them in
// p.inited, and reads its workspace size.
func (p *Plan) init() error {
	s, n, k, rows, outBytes := p.s, p.n, p.k, p.rows, p.outBytes
	f, h := &s.fn, s.handle
	t := int32(p.dt)
	outType := t
	if outBytes == 4 {
		outType = int32(cuda.R32F)
	}
	steps := []struct {
		op  string
		run func() int32
	}{
		{"cusparseLtStructuredDescriptorInit(A)", func() int32 {
			return f.structInit(h, p.obj(objA), int64(n), int64(k), int64(k), alignment, t, orderRow, sparsity50)
		}},
		{"cusparseLtDenseDescriptorInit(B)", func() int32 {
			return f.denseInit(h, p.obj(objB), int64(rows), int64(k), int64(k), alignment, t, orderRow)
		}},
		{"cusparseLtDenseDescriptorInit(C)", func() int32 {
			return f.denseInit(h, p.obj(objC), int64(n), int64(rows), int64(n), alignment, outType, orderCol)
		}},
		{"cusparseLtMatmulDescriptorInit", func() int32 {
			return f.matmulInit(h, p.obj(objMatmul), opN, opT, p.obj(objA), p.obj(objB), p.obj(objC),
				p.obj(objC), compute32F)
		}},
		{"cusparseLtMatmulAlgSelectionInit", func() int32 {
			return f.algInit(h, p.obj(objAlg), p.obj(objMatmul), algDefault)
		}},
		{"cusparseLtMatmulPlanInit", func() int32 {
			return f.planInit(h, p.obj(objPlan), p.obj(objMatmul), p.obj(objAlg))
		}},
	}
	for _, st := range steps {
		if err := s.check(st.op, st.run()); err != nil {
			return fmt.Errorf("rows %d, %d-byte output: %w", rows, outBytes, err)
		}
		p.inited++
	}
	return p.readWorkspace()
}

// obj returns the address of object i of the plan.
func (p *Plan) obj(i int) uintptr { return addr(p.host, i*objectBytes) }

// readWorkspace asks the library for the plan's workspace size.
func (p *Plan) readWorkspace() error {
	var ws uint64
	if err := p.s.check("cusparseLtMatmulGetWorkspace", p.s.fn.workspace(p.s.handle, p.obj(objPlan), &ws)); err != nil {
		return err
	}
	p.wsBytes = int64(ws)
	return nil
}

// destroy releases the plan's objects in reverse order and its memory.
func (p *Plan) destroy() error {
	if p.host == nil {
		return nil
	}
	f := &p.s.fn
	var errs []error
	if p.inited > objPlan {
		errs = append(errs, p.s.check("cusparseLtMatmulPlanDestroy", f.planDestroy(p.obj(objPlan))))
	}
	if p.inited > objAlg && f.algDestroy != nil {
		errs = append(errs, p.s.check("cusparseLtMatmulAlgSelectionDestroy", f.algDestroy(p.obj(objAlg))))
	}
	// The matmul descriptor has no destructor in the C API.
	for _, i := range []int{objC, objB, objA} {
		if p.inited > i {
			errs = append(errs, p.s.check("cusparseLtMatDescriptorDestroy", f.matDestroy(p.obj(i))))
		}
	}
	errs = append(errs, unix.Munmap(p.host))
	p.host = nil
	p.inited = 0
	return errors.Join(errs...)
}

// Search times the library's algorithms for this plan on the given
// operands (it runs the product several times, writing y) and keeps the
// fastest; ws holds WorkspaceBytes (0 when that is 0). The chosen
// algorithm may need another workspace size: read WorkspaceBytes again.
func (p *Plan) Search(y, x, w, ws cuda.DevicePtr) error {
	s := p.s
	if err := s.check("cusparseLtMatmulSearch", s.fn.search(s.handle, p.obj(objPlan), addr(s.host, hostAlpha),
		uint64(w), uint64(x), addr(s.host, hostBeta), uint64(y), uint64(y), uint64(ws), addr(s.host, hostStream), 1)); err != nil {
		return err
	}
	p.searched = true
	return p.readWorkspace()
}

// Matmul queues y = x · Wᵀ with the plan, on the library's stream; w is
// the weight compressed by [Library.Compress], ws holds WorkspaceBytes.
func (p *Plan) Matmul(y, x, w, ws cuda.DevicePtr) error {
	s := p.s
	return s.check("cusparseLtMatmul", s.fn.matmul(s.handle, p.obj(objPlan), addr(s.host, hostAlpha),
		uint64(w), uint64(x), addr(s.host, hostBeta), uint64(y), uint64(y), uint64(ws), addr(s.host, hostStream), 1))
}
