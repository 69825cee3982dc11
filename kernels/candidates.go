package kernels

// DenseCandidates returns how many algorithms cuBLASLt's heuristic offers
// for [Device.DenseMatmul] of this data type and shape (at most 8, best
// guess first; the first is the one DenseMatmul runs), or 0 when
// DenseMatmul uses the package's own kernel. The descriptors and the
// heuristic's answer are made once per shape and cached, so neither this
// call nor a later product of the shape repeats that host work. An engine
// times each candidate once and keeps the fastest, with
// [Device.DenseMatmulCandidate].
func (d *Device) DenseCandidates(dt DType, m, n, k int) (int, error) {
	const op = "DenseCandidates"
	if err := checkDims(op, dt, m, n, k); err != nil {
		return 0, err
	}
	var count int
	err := d.do(func() error {
		if d.lt == nil {
			return nil
		}
		p, err := d.lt.plan(ltKey{dt, m, n, k})
		if err != nil {
			return err
		}
		count = len(p.algos)
		return nil
	})
	return count, err
}

// DenseMatmulCandidate is [Device.DenseMatmul] run with the cuBLASLt
// algorithm that the heuristic ranked i-th (0 ≤ i < DenseCandidates). It
// fails when DenseMatmul does not use cuBLASLt. The launch is
// asynchronous.
func (d *Device) DenseMatmulCandidate(y, x, w *Buffer, dt DType, m, n, k, i int) error {
	const op = "DenseMatmulCandidate"
	operands, err := d.denseArgs(op, y, x, w, dt, m, n, k)
	if err != nil {
		return err
	}
	return d.do(func() error {
		if err := operands(); err != nil {
			return err
		}
		if d.lt == nil {
			return argError("%s: no cuBLASLt (%s)", op, d.backend)
		}
		return d.lt.matmulWith(d, y, x, w, ltKey{dt, m, n, k}, i)
	})
}

// CublasLtVersion returns the version of the cuBLASLt that DenseMatmul
// uses (e.g. 130100) and the file it was loaded from, or 0 and "" when
// DenseMatmul runs the package's own kernel.
func (d *Device) CublasLtVersion() (int, string) {
	if d == nil {
		return 0, ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lt == nil {
		return 0, ""
	}
	return int(d.lt.version), d.lt.path
}
