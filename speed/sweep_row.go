package speed

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/kernels"
)

// refRows is how many rows of each dense candidate's output are checked
// against the reference (the whole output of every sparse backend is).
const refRows = 64

// rowBufs are the activations and outputs of one M, in rotation copies.
type rowBufs struct {
	x, y   []*kernels.Buffer
	copies int
	rows   int       // allocated rows: M rounded up to 16, for cuSPARSELt
	ref    []float32 // the dense product of the pruned weight, M×N
}

// rotation returns copy i of each operand.
func (r *rowBufs) rotation(i int) (x, y *kernels.Buffer) { return r.x[i%r.copies], r.y[i%r.copies] }

// row measures one shape at one M through every backend and appends the
// rows to the report.
func (s *sweeper) row(sh Shape, b *shapeBufs, m int) (err error) {
	dt, n, k := s.opt.DType, sh.N, sh.K
	a := &arena{dev: s.dev}
	defer func() { err = errors.Join(err, a.free()) }()
	r := &rowBufs{rows: roundUp(m, 16)}
	// y holds float32 (the reference is written there too); a rotation
	// copy touches x and y of the products' output type.
	_, out := s.yType()
	xBytes, yBytes := int64(r.rows)*int64(k)*2, int64(r.rows)*int64(n)*4
	r.copies = min(s.copiesFor(xBytes+int64(r.rows)*int64(n)*int64(out)), b.copies)
	if r.x, err = a.copies(b.x[:xBytes], r.copies); err != nil {
		return fmt.Errorf("activations: %w", err)
	}
	for range r.copies {
		y, err := a.alloc(yBytes)
		if err != nil {
			return fmt.Errorf("outputs: %w", err)
		}
		r.y = append(r.y, y)
	}
	base := Row{Model: sh.Model, Ops: sh.Ops, N: n, K: k, M: m}

	// The reference: dense cuBLASLt on the pruned weight, itself checked
	// against float64 on the CPU at sampled elements.
	ref, err := s.output(r.y[0], m*n, 4, func() error {
		return s.dev.DenseMatmul(kernels.DenseOperands{Y: r.y[0], X: r.x[0], W: b.pruned, DType: dt, M: m, N: n, K: k})
	})
	if err != nil {
		return fmt.Errorf("dense reference: %w", err)
	}
	refErr, err := sampleReference(ref, b.x, b.host.pruned, dt, m, n, k)
	refErr = finite(refErr)
	if err != nil {
		s.notef("%s M=%d: the dense reference fails its CPU check (%v); nothing measured", sh.Label(), m, err)
		return nil
	}
	r.ref = ref

	dense := s.dense(base, b, r, refErr)
	s.rep.Rows = append(s.rep.Rows, dense)
	if b.packed != nil {
		s.rep.Rows = append(s.rep.Rows, s.ours(base, b, r, dense))
	}
	if b.lt != nil {
		s.rep.Rows = append(s.rep.Rows, s.cusparselt(base, b, r, dense))
	}
	return nil
}

// yType is the element type dense and ours write y in (Options.Output),
// as DenseOperands.YType and SparseOperands.YType take it, and its bytes.
func (s *sweeper) yType() (checkpoint.DType, int) {
	if s.opt.Output == s.opt.DType {
		return s.opt.DType, 2
	}
	return checkpoint.F32, 4
}

// output poisons y, runs product and returns the first count elements of
// y decoded from outBytes-wide values.
func (s *sweeper) output(y *kernels.Buffer, count, outBytes int, product func() error) ([]float32, error) {
	if err := y.Fill(0xff); err != nil {
		return nil, err
	}
	if err := product(); err != nil {
		return nil, err
	}
	raw := make([]byte, count*outBytes)
	if err := y.Download(raw); err != nil {
		return nil, err
	}
	return decodeOutput(raw, outBytes, s.opt.DType), nil
}

// finish fills a row's time, rate, floor and speedup from its summary.
func (s *sweeper) finish(row *Row, sum Summary, hostBound bool, weight int64, outBytes int, dense Row) {
	row.MedianUS, row.MinUS, row.MaxUS, row.Runs = us(sum.Median), us(sum.Min), us(sum.Max), sum.Runs
	row.Batch = sum.Batch
	if sum.Note != "" {
		row.Detail = strings.TrimPrefix(row.Detail+"; "+sum.Note, "; ")
	}
	row.TFLOPS = TFLOPS(row.M, row.N, row.K, sum.Median)
	cost := RowCost(row.Backend, row.M, row.N, row.K, weight, outBytes, s.rep.Ceilings)
	row.Bytes, row.FloorUS, row.Bound = cost.Bytes, us(cost.Floor), cost.Bound
	if row.MedianUS > 0 {
		row.OfFloor = row.FloorUS / row.MedianUS
	}
	row.HostBound = hostBound
	if dense.Timed() && row.MedianUS > 0 {
		row.Speedup = dense.MedianUS / row.MedianUS
	}
}

// dense times the dense baseline: each of the first cuBLASLt candidates
// (checked on a prefix of rows against the reference), keeping the
// fastest; the package's own kernel without cuBLASLt.
func (s *sweeper) dense(base Row, b *shapeBufs, r *rowBufs, refErr float64) Row {
	dt, m, n, k := s.opt.DType, base.M, base.N, base.K
	yt, out := s.yType()
	row := base
	row.Backend, row.RelErr = Dense, refErr
	wBytes := WeightBytes(Dense, n, k, 0)
	if !s.hasLt {
		row.Backend, row.Detail = DenseOwn, "no cuBLASLt"
		sum, hb, err := s.tm.measure(b.copies, func(i int) error {
			x, y := r.rotation(i)
			return s.dev.DenseMatmul(kernels.DenseOperands{Y: y, X: x, W: b.dense[i%b.copies], DType: dt, M: m, N: n, K: k, YType: yt})
		})
		if err != nil {
			row.Error = err.Error()
			return row
		}
		s.finish(&row, sum, hb, wBytes, out, Row{})
		row.Speedup = 1
		return row
	}
	count, err := s.dev.DenseCandidates(dt, yt, m, n, k)
	if err != nil || count == 0 {
		row.Error = fmt.Sprintf("no cuBLASLt algorithm: %v", err)
		return row
	}
	tried := min(count, s.opt.DenseCandidates)
	f := s.fastest(tried, b.copies, func(cand int) (float64, error) {
		check := min(m, refRows)
		got, err := s.output(r.y[0], check*n, out, func() error {
			return s.dev.DenseMatmulCandidate(kernels.DenseOperands{Y: r.y[0], X: r.x[0], W: b.pruned, DType: dt, M: m, N: n, K: k, YType: yt}, cand)
		})
		if err != nil {
			return 0, err
		}
		return compare(got, r.ref[:check*n], outTolerance(k, out))
	}, func(cand, i int) error {
		x, y := r.rotation(i)
		return s.dev.DenseMatmulCandidate(kernels.DenseOperands{Y: y, X: x, W: b.dense[i%b.copies], DType: dt, M: m, N: n, K: k, YType: yt}, cand)
	})
	if f.cand < 0 {
		row.Error = f.err.Error()
		return row
	}
	row.Detail = fmt.Sprintf("candidate %d of %d (fastest of %d timed)", f.cand+1, count, tried)
	s.finish(&row, f.sum, f.hostBound, wBytes, out, Row{})
	row.Speedup = 1
	return row
}

// fastestRun is what fastest found: the candidate (-1: none passed), its
// summary, whether the host bound it, its check's relative error, and
// the errors of the candidates that failed.
type fastestRun struct {
	cand      int
	sum       Summary
	hostBound bool
	relErr    float64
	err       error
	// first is the median of candidate 0 (the library's own choice: the
	// heuristic's first, the planner's plan), zero when it was not timed.
	first time.Duration
	// medians holds each tried candidate's median, zero where it was not
	// timed.
	medians []time.Duration
}

// fastest checks each of the first tried candidates of a backend and
// times the ones whose result is right (check returns the relative error
// against the reference), keeping the one of least median time; run(cand,
// i) uses rotation copy i of copies.
func (s *sweeper) fastest(tried, copies int, check func(cand int) (float64, error), run func(cand, i int) error) fastestRun {
	f := fastestRun{cand: -1, medians: make([]time.Duration, tried)}
	var errs []error
	for cand := range tried {
		rel, err := check(cand)
		if err == nil {
			var sum Summary
			var hb bool
			sum, hb, err = s.tm.measure(copies, func(i int) error { return run(cand, i) })
			if err == nil {
				f.medians[cand] = sum.Median
			}
			if err == nil && cand == 0 {
				f.first = sum.Median
			}
			if err == nil && (f.cand < 0 || sum.Median < f.sum.Median) {
				f.cand, f.sum, f.hostBound, f.relErr = cand, sum, hb, rel
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("candidate %d: %w", cand+1, err))
		}
	}
	f.err = errors.Join(errs...)
	if f.cand < 0 && f.err == nil {
		f.err = errors.New("no candidate to time")
	}
	return f
}

// checked checks a sparse backend's result and, only when it is right,
// times run (over copies rotation copies): a wrong result leaves the row
// with its error and no time.
func (s *sweeper) checked(row Row, copies int, check func() (float64, error), run func(i int) error, weight int64, outBytes int,
	dense Row) Row {
	rel, err := check()
	row.RelErr = finite(rel)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	sum, hb, err := s.tm.measure(copies, run)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	s.finish(&row, sum, hb, weight, outBytes, dense)
	return row
}

// ours checks and times the package's own kernels on the stored
// packed + meta layout: each of its first launch plans
// (SparseCandidates), keeping the fastest, as dense keeps cuBLASLt's.
// A plan whose result is wrong is not timed, and any wrong plan fails
// the row: every plan must compute the product, not only the fastest.
func (s *sweeper) ours(base Row, b *shapeBufs, r *rowBufs, dense Row) Row {
	dt, m, n, k := s.opt.DType, base.M, base.N, base.K
	yt, out := s.yType()
	row := base
	row.Backend = Ours
	names, err := s.dev.SparseCandidates(dt, m, n, k)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	tried := min(len(names), s.opt.SparseCandidates)
	relErr := 0.0
	f := s.fastest(tried, b.copies, func(cand int) (float64, error) {
		got, err := s.output(r.y[0], m*n, out, func() error {
			return s.dev.SparseMatmulCandidate(kernels.SparseOperands{Y: r.y[0], X: r.x[0], Packed: b.packed[0], Meta: b.meta[0], DType: dt, M: m, N: n, K: k, YType: yt}, cand)
		})
		if err != nil {
			return 0, err
		}
		rel, err := compare(got, r.ref, outTolerance(k, out))
		relErr = max(relErr, finite(rel))
		return rel, err
	}, func(cand, i int) error {
		x, y := r.rotation(i)
		return s.dev.SparseMatmulCandidate(kernels.SparseOperands{Y: y, X: x, Packed: b.packed[i%b.copies], Meta: b.meta[i%b.copies], DType: dt, M: m, N: n, K: k, YType: yt}, cand)
	})
	row.RelErr = relErr
	if f.err != nil || f.cand < 0 {
		row.Error = f.err.Error()
		return row
	}
	row.Plan = names[f.cand]
	if tried > 1 {
		row.Candidates = make([]Candidate, tried)
		for i, med := range f.medians {
			row.Candidates[i] = Candidate{Plan: names[i], MedianUS: us(med)}
		}
	}
	switch {
	case tried == 1:
		row.Detail = row.Plan
	case f.cand != 0 && f.first > 0:
		row.DefaultUS = us(f.first)
		row.Detail = fmt.Sprintf("plan %d of %d, %s (fastest of %d timed; SparseMatmul's own plan %.1f µs)",
			f.cand+1, len(names), row.Plan, tried, row.DefaultUS)
	default:
		row.Detail = fmt.Sprintf("plan %d of %d, %s (fastest of %d timed)", f.cand+1, len(names), row.Plan, tried)
	}
	s.finish(&row, f.sum, f.hostBound, WeightBytes(Ours, n, k, 0), out, dense)
	return row
}

// cusparselt plans (once per shape and M, with the library's algorithm
// search), checks and times cuSPARSELt.
func (s *sweeper) cusparselt(base Row, b *shapeBufs, r *rowBufs, dense Row) Row {
	dt, m, n, k := s.opt.DType, base.M, base.N, base.K
	row := base
	row.Backend = CuSPARSELt
	fail := func(err error) Row {
		row.Error = err.Error()
		return row
	}
	plan, err := s.lt.Plan(dt, m, n, k)
	if err != nil {
		return fail(err)
	}
	if plan.Rows() > r.rows {
		return fail(fmt.Errorf("cuSPARSELt wants %d rows, more than the %d allocated", plan.Rows(), r.rows))
	}
	if err := plan.Search(r.y[0], r.x[0], b.lt[0]); err != nil {
		return fail(fmt.Errorf("algorithm search: %w", err))
	}
	out := plan.OutputBytes()
	row.Detail = fmt.Sprintf("output %s", map[int]string{4: "f32", 2: string(dt)}[out])
	if plan.Rows() != m {
		row.Detail += fmt.Sprintf(", M padded to %d rows", plan.Rows())
	}
	check := func() (float64, error) {
		got, err := s.output(r.y[0], m*n, out, func() error { return plan.Matmul(r.y[0], r.x[0], b.lt[0]) })
		if err != nil {
			return 0, err
		}
		return compare(got, r.ref, outTolerance(k, out))
	}
	return s.checked(row, b.copies, check, func(i int) error {
		x, y := r.rotation(i)
		return plan.Matmul(y, x, b.lt[i%b.copies])
	}, b.ltBytes, out, dense)
}
