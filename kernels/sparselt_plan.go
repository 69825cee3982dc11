package kernels

import (
	"fmt"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/cuda"
	"github.com/sfsurgery/sfsurgery/cusparselt"
)

// SparseLtPlan is a cuSPARSELt product y = x · Wᵀ of one data type and
// shape, planned once (see [cusparselt.Plan]): y [m][n] of the input
// type, x [Rows][k] of type dt, W the compressed weight of
// [SparseLt.Compress]. Plans are cached by [SparseLt.Plan] and released
// by [SparseLt.Close].
type SparseLtPlan struct {
	s *SparseLt
	p *cusparselt.Plan
}

// Rows returns the number of x and y rows the plan computes: m, or m
// rounded up to a multiple of 8 or 16 when the library does not take m
// itself (as PyTorch pads). x and y must hold that many rows; the extra
// rows of y are computed from the extra rows of x.
func (p *SparseLtPlan) Rows() int { return p.p.Rows() }

// OutputBytes returns the size of an element of y: 2, the input type.
func (p *SparseLtPlan) OutputBytes() int { return p.p.OutputBytes() }

// Searched reports whether [SparseLtPlan.Search] has chosen the plan's
// algorithm.
func (p *SparseLtPlan) Searched() bool { return p.p.Searched() }

// Plan returns the plan of y[m][n] = x[m][k] · W[n][k]ᵀ for inputs of
// type dt, creating and caching it on first use (see
// [cusparselt.Library.Plan], which says what was seen of F16 plans).
func (s *SparseLt) Plan(dt checkpoint.DType, m, n, k int) (*SparseLtPlan, error) {
	if err := checkDims("SparseLt.Plan", dt, m, n, k); err != nil {
		return nil, err
	}
	var p *SparseLtPlan
	err := s.do(func() error {
		q, err := s.lib.Plan(dataType(dt), m, n, k)
		if err != nil {
			return err
		}
		if p = s.plans[q]; p == nil {
			p = &SparseLtPlan{s: s, p: q}
			s.plans[q] = p
		}
		return nil
	})
	return p, err
}

// operands checks the buffers of a product of p. It runs with the mutex
// held.
func (p *SparseLtPlan) operands(op string, y, x, w *Buffer) error {
	n, k := p.p.Shape()
	rows := p.p.Rows()
	need, err := sizes([3]int{rows, n, p.p.OutputBytes()}, [3]int{rows, k, 2}, [3]int{n, k, 1})
	if err != nil {
		return err
	}
	// The compressed weight holds at least the kept half of the values.
	return p.s.d.operands(op, operand{y, "y", need[0]}, operand{x, "x", need[1]}, operand{w, "w", need[2]})
}

// Search times the library's algorithms for this plan on the given
// operands (it runs the product several times, writing y) and keeps the
// fastest in the plan. It runs once: later calls return at once, so that
// the search is paid once per shape, never per product.
func (p *SparseLtPlan) Search(y, x, w *Buffer) error {
	const op = "SparseLtPlan.Search"
	return p.s.do(func() error {
		if p.p.Released() {
			return fmt.Errorf("%w: plan was released", ErrClosed)
		}
		if p.p.Searched() {
			return nil
		}
		if err := p.operands(op, y, x, w); err != nil {
			return err
		}
		ws, err := p.s.workspace(p.p.WorkspaceBytes())
		if err != nil {
			return err
		}
		return p.p.Search(y.ptr, x.ptr, w.ptr, bufPtr(ws))
	})
}

// Matmul queues y = x · Wᵀ with the plan, on the device's stream; w is
// the weight compressed by [SparseLt.Compress]. x and y hold Rows rows.
func (p *SparseLtPlan) Matmul(y, x, w *Buffer) error {
	const op = "SparseLtPlan.Matmul"
	return p.s.do(func() error {
		if p.p.Released() {
			return fmt.Errorf("%w: plan was released", ErrClosed)
		}
		if err := p.operands(op, y, x, w); err != nil {
			return err
		}
		ws, err := p.s.workspace(p.p.WorkspaceBytes())
		if err != nil {
			return err
		}
		return p.p.Matmul(y.ptr, x.ptr, w.ptr, bufPtr(ws))
	})
}

// bufPtr returns b's device pointer, or 0 for nil.
func bufPtr(b *Buffer) cuda.DevicePtr {
	if b == nil {
		return 0
	}
	return b.ptr
}
