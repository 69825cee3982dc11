package kernels

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Objects of one plan, at these multiples of spObjectBytes in its host
// memory.
const (
	spObjA = iota
	spObjB
	spObjC
	spObjMatmul
	spObjAlg
	spObjPlan
	spObjects
)

// SparseLtPlan is a cuSPARSELt product y = x · Wᵀ of one data type and
// shape, planned once: y [m][n] of the input type (the library's
// combinations for 16-bit inputs have no float32 output: a float32 C is
// refused for BF16 and, on an H200 with 0.8.0, accepted for F16 but
// failed in the search with an illegal instruction), x [Rows][k] of type dt,
// W the compressed weight of [SparseLt.Compress]. Plans are cached by
// [SparseLt.Plan] and released by [SparseLt.Close].
type SparseLtPlan struct {
	s        *SparseLt
	dt       DType
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
func (p *SparseLtPlan) Rows() int { return p.rows }

// OutputBytes returns the size of an element of y: 2, the input type.
func (p *SparseLtPlan) OutputBytes() int { return p.outBytes }

// Searched reports whether [SparseLtPlan.Search] has chosen the plan's
// algorithm.
func (p *SparseLtPlan) Searched() bool { return p.searched }

// Plan returns the plan of y[m][n] = x[m][k] · W[n][k]ᵀ for inputs of
// type dt, creating and caching it on first use. Seen on an H200 with
// cuSPARSELt 0.8.0: BF16 plans work (m padded to a multiple of 8); an
// F16 plan is made, but its Search fails with
// CUSPARSE_STATUS_INTERNAL_ERROR and leaves an illegal-instruction error
// that poisons the CUDA context, so callers should not search F16 plans
// on that library until that is understood. W is row-major with its
// 2:4 groups along k; x and y are row-major. In the library's terms: A =
// W (structured, row-major n×k, not transposed), B = x seen as row-major
// m×k, transposed, and C = D = y seen as column-major n×m.
func (s *SparseLt) Plan(dt DType, m, n, k int) (*SparseLtPlan, error) {
	if err := checkDims("SparseLt.Plan", dt, m, n, k); err != nil {
		return nil, err
	}
	var p *SparseLtPlan
	err := s.do(func() error {
		key := ltKey{dt, m, n, k}
		if cached, ok := s.plans[key]; ok {
			p = cached
			return nil
		}
		var errs []error
		for _, rows := range planRows(m) {
			q, err := s.newPlan(dt, m, n, k, rows, 2)
			if err == nil {
				s.plans[key] = q
				p = q
				return nil
			}
			errs = append(errs, err)
			if !retryable(err) {
				return errors.Join(errs...)
			}
		}
		return fmt.Errorf("cuSPARSELt has no plan for %v m=%d n=%d k=%d: %w", dt, m, n, k, errors.Join(errs...))
	})
	return p, err
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
	var ce *CUDAError
	return errors.As(err, &ce)
}

// newPlan initialises every object of a plan; on failure it releases
// what it made. It runs with the mutex held.
func (s *SparseLt) newPlan(dt DType, m, n, k, rows, outBytes int) (*SparseLtPlan, error) {
	host, err := mapHost(spObjects * spObjectBytes)
	if err != nil {
		return nil, err
	}
	p := &SparseLtPlan{s: s, dt: dt, m: m, n: n, k: k, rows: rows, outBytes: outBytes, host: host}
	if err := p.init(); err != nil {
		return nil, errors.Join(err, p.destroy())
	}
	return p, nil
}

// init initialises the plan's objects in order, counting them in
// p.inited, and reads its workspace size.
func (p *SparseLtPlan) init() error {
	s, dt, n, k, rows, outBytes := p.s, p.dt, p.n, p.k, p.rows, p.outBytes
	f, h := &s.fn, s.handle
	t := dt.cudaDataType()
	outType := t
	if outBytes == 4 {
		outType = cudaR32F
	}
	steps := []struct {
		op  string
		run func() int32
	}{
		{"cusparseLtStructuredDescriptorInit(A)", func() int32 {
			return f.structInit(h, p.obj(spObjA), int64(n), int64(k), int64(k), spAlignment, t, spOrderRow, spSparsity50)
		}},
		{"cusparseLtDenseDescriptorInit(B)", func() int32 {
			return f.denseInit(h, p.obj(spObjB), int64(rows), int64(k), int64(k), spAlignment, t, spOrderRow)
		}},
		{"cusparseLtDenseDescriptorInit(C)", func() int32 {
			return f.denseInit(h, p.obj(spObjC), int64(n), int64(rows), int64(n), spAlignment, outType, spOrderCol)
		}},
		{"cusparseLtMatmulDescriptorInit", func() int32 {
			return f.matmulInit(h, p.obj(spObjMatmul), spOpN, spOpT, p.obj(spObjA), p.obj(spObjB), p.obj(spObjC),
				p.obj(spObjC), spCompute32F)
		}},
		{"cusparseLtMatmulAlgSelectionInit", func() int32 {
			return f.algInit(h, p.obj(spObjAlg), p.obj(spObjMatmul), spAlgDefault)
		}},
		{"cusparseLtMatmulPlanInit", func() int32 {
			return f.planInit(h, p.obj(spObjPlan), p.obj(spObjMatmul), p.obj(spObjAlg))
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
func (p *SparseLtPlan) obj(i int) uintptr { return addr(p.host, i*spObjectBytes) }

// readWorkspace asks the library for the plan's workspace size.
func (p *SparseLtPlan) readWorkspace() error {
	var ws uint64
	if err := p.s.check("cusparseLtMatmulGetWorkspace", p.s.fn.workspace(p.s.handle, p.obj(spObjPlan), &ws)); err != nil {
		return err
	}
	p.wsBytes = int64(ws)
	return nil
}

// destroy releases the plan's objects in reverse order and its memory.
// It runs with the mutex held.
func (p *SparseLtPlan) destroy() error {
	if p.host == nil {
		return nil
	}
	f := &p.s.fn
	var errs []error
	if p.inited > spObjPlan {
		errs = append(errs, p.s.check("cusparseLtMatmulPlanDestroy", f.planDestroy(p.obj(spObjPlan))))
	}
	if p.inited > spObjAlg && f.algDestroy != nil {
		errs = append(errs, p.s.check("cusparseLtMatmulAlgSelectionDestroy", f.algDestroy(p.obj(spObjAlg))))
	}
	// The matmul descriptor has no destructor in the C API.
	for _, i := range []int{spObjC, spObjB, spObjA} {
		if p.inited > i {
			errs = append(errs, p.s.check("cusparseLtMatDescriptorDestroy", f.matDestroy(p.obj(i))))
		}
	}
	errs = append(errs, unix.Munmap(p.host))
	p.host = nil
	p.inited = 0
	return errors.Join(errs...)
}

// operands checks the buffers of a product of p. It runs with the mutex
// held.
func (p *SparseLtPlan) operands(op string, y, x, w *Buffer) (wBytes int64, err error) {
	need, err := sizes([3]int{p.rows, p.n, p.outBytes}, [3]int{p.rows, p.k, 2}, [3]int{p.n, p.k, 1})
	if err != nil {
		return 0, err
	}
	// The compressed weight holds at least the kept half of the values.
	if err := p.s.d.operands(op, operand{y, "y", need[0]}, operand{x, "x", need[1]},
		operand{w, "w", need[2]}); err != nil {
		return 0, err
	}
	return need[2], nil
}

// Search times the library's algorithms for this plan on the given
// operands (it runs the product several times, writing y) and keeps the
// fastest in the plan. It runs once: later calls return at once, so that
// the search is paid once per shape, never per product.
func (p *SparseLtPlan) Search(y, x, w *Buffer) error {
	const op = "SparseLtPlan.Search"
	return p.s.do(func() error {
		if p.host == nil {
			return fmt.Errorf("%w: plan was released", ErrClosed)
		}
		if p.searched {
			return nil
		}
		if _, err := p.operands(op, y, x, w); err != nil {
			return err
		}
		ws, err := p.s.workspace(p.wsBytes)
		if err != nil {
			return err
		}
		s := p.s
		if err := s.check("cusparseLtMatmulSearch", s.fn.search(s.handle, p.obj(spObjPlan), addr(s.host, spHostAlpha),
			w.ptr, x.ptr, addr(s.host, spHostBeta), y.ptr, y.ptr, bufPtr(ws), addr(s.host, spHostStream), 1)); err != nil {
			return err
		}
		p.searched = true
		// The chosen algorithm may need another workspace size.
		return p.readWorkspace()
	})
}

// Matmul queues y = x · Wᵀ with the plan, on the device's stream; w is
// the weight compressed by [SparseLt.Compress]. x and y hold Rows rows.
func (p *SparseLtPlan) Matmul(y, x, w *Buffer) error {
	const op = "SparseLtPlan.Matmul"
	return p.s.do(func() error {
		if p.host == nil {
			return fmt.Errorf("%w: plan was released", ErrClosed)
		}
		if _, err := p.operands(op, y, x, w); err != nil {
			return err
		}
		ws, err := p.s.workspace(p.wsBytes)
		if err != nil {
			return err
		}
		s := p.s
		return s.check("cusparseLtMatmul", s.fn.matmul(s.handle, p.obj(spObjPlan), addr(s.host, spHostAlpha),
			w.ptr, x.ptr, addr(s.host, spHostBeta), y.ptr, y.ptr, bufPtr(ws), addr(s.host, spHostStream), 1))
	})
}

// bufPtr returns b's device pointer, or 0 for nil.
func bufPtr(b *Buffer) uint64 {
	if b == nil {
		return 0
	}
	return b.ptr
}
