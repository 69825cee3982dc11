package kernels

import (
	"fmt"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// DenseCandidates returns how many algorithms cuBLASLt's heuristic offers
// for [Device.DenseMatmul] of this data type, y type (as
// DenseOperands.YType) and shape (at most 8, best
// guess first; the first is the one DenseMatmul runs), or 0 when
// DenseMatmul uses the package's own kernel. The descriptors and the
// heuristic's answer are made once per shape and cached, so neither this
// call nor a later product of the shape repeats that host work. An engine
// times each candidate once and keeps the fastest, with
// [Device.DenseMatmulCandidate].
func (d *Device) DenseCandidates(dt, yType checkpoint.DType, m, n, k int) (int, error) {
	const op = "DenseCandidates"
	if err := checkDims(op, dt, m, n, k); err != nil {
		return 0, err
	}
	if _, err := yBytes(op, yType, dt); err != nil {
		return 0, err
	}
	var count int
	err := d.do(func() error {
		if d.lt == nil {
			return nil
		}
		var err error
		count, err = d.lt.Algorithms(ltShape(dt, yType, m, n, k))
		return err
	})
	return count, err
}

// DenseMatmulCandidate is [Device.DenseMatmul] run with the cuBLASLt
// algorithm that the heuristic ranked i-th (0 ≤ i < DenseCandidates). It
// fails when DenseMatmul does not use cuBLASLt. The launch is
// asynchronous.
func (d *Device) DenseMatmulCandidate(ops DenseOperands, i int) error {
	const op = "DenseMatmulCandidate"
	operands, err := d.denseArgs(op, ops)
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
		count, err := d.lt.Algorithms(ltShape(ops.DType, ops.YType, ops.M, ops.N, ops.K))
		if err != nil {
			return err
		}
		if i < 0 || i >= count {
			return argError("DenseMatmulCandidate: candidate %d of %d", i, count)
		}
		return d.ltMatmul(ops, i)
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
	return d.lt.Version(), d.lt.Path()
}

// SparseCandidates describes the launch plans [Device.SparseMatmulCandidate]
// offers for this data type and shape, best guess first; the first is the
// one SparseMatmul runs. Up to 64 tokens they are the decode kernel's plans
// (at most 8) that its cost model, fitted on an H100, rates cheapest, as
// "decode sc4 w4 kw1 s1 xw8": chunks per stage, warps per CTA and per row
// block, slices of k, chunks per window of activations (0: staged whole),
// and " wg" for the kernel's warpgroup form (wgmma.sp; H100 and H200
// only), of which the model's picks hold at most half; " r64" marks that
// form's CTAs of 64 rows and " pair" two slices summed in a cluster's
// shared memory (a pair of 64-row CTAs, where one fills the GPU, comes
// first: the plan SparseMatmul runs). From 33 tokens the
// list ends with up to two plans of that form that split the tokens over
// CTAs (" tok32": each CTA multiplies 32 of them, the weight read once per
// group), which the model does not rank.
// Above 64 tokens, on compute capability 9.0, they are the prefill
// kernel's plans (at most 8) that its cost model rates cheapest, as
// "prefill r256 t128 s1" (its tile, weight rows by tokens, and the splits
// of K); elsewhere there is one, the tiled kernel ("tiled"). An engine on
// another GPU times each once and keeps the fastest, as it does with
// [Device.DenseCandidates].
func (d *Device) SparseCandidates(dt checkpoint.DType, m, n, k int) ([]string, error) {
	const op = "SparseCandidates"
	if err := checkDims(op, dt, m, n, k); err != nil {
		return nil, err
	}
	if err := checkSparse(op, n, k); err != nil {
		return nil, err
	}
	if m > launchplan.MaxTokens {
		if err := d.usable(); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		if !d.hasPrefill() {
			return []string{"tiled"}, nil
		}
		ps, err := d.prefillCandidates(op, dt, m, n, k)
		if err != nil {
			return nil, err
		}
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = p.String()
		}
		return out, nil
	}
	var ps []launchplan.Plan
	err := d.do(func() error {
		var err error
		ps, err = launchplan.Candidates(m, n, k, d.dec.lim, launchplan.Options{}, launchplan.MaxCandidates)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out, nil
}

// SparseMatmulCandidate is [Device.SparseMatmul] run with the plan that
// SparseCandidates lists i-th. Every plan computes the same product; with
// the same plan the result is the same bits every run. The launch is
// asynchronous.
func (d *Device) SparseMatmulCandidate(ops SparseOperands, i int) error {
	const op = "SparseMatmulCandidate"
	if i < 0 || i >= launchplan.MaxCandidates || i > 0 && ops.M > launchplan.MaxTokens && !d.hasPrefill() {
		return argError("%s: no candidate %d for m = %d", op, i, ops.M)
	}
	return d.sparse(op, ops, sparseChoice{cand: i})
}
