package kernels

import (
	"errors"
	"fmt"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/cuda"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// hasPrefill reports whether d runs the prefill kernel above
// launchplan.MaxTokens tokens: whether its sm_90a module is loaded (set
// at Open, read-only after). A nil Device has none.
func (d *Device) hasPrefill() bool { return d != nil && d.dec.lim.Warpgroup }

// prefillMaps returns the tensor maps the prefill kernel reads ops
// through, for tile t (cuda/spmm_wg.cuh's TensorMap), C = t.StageK(): x
// [M][K] in boxes of 64 × t.Tokens (128-byte swizzle), packed [N][K/2] in
// boxes of C/2 × t.Rows (C-byte swizzle), and the meta as uint32
// [K/32][N] in boxes of t.Rows × C/32.
func prefillMaps(ops SparseOperands, t launchplan.PrefillTile) [3]cuda.TensorMap2D {
	c, sw := t.StageK(), cuda.Swizzle64B
	if c == 128 {
		sw = cuda.Swizzle128B
	}
	return [3]cuda.TensorMap2D{
		{Addr: uint64(ops.X.ptr), ElemBytes: 2, Cols: ops.K, Rows: ops.M, BoxCols: 64, BoxRows: t.Tokens, Swizzle: cuda.Swizzle128B},
		{Addr: uint64(ops.Packed.ptr), ElemBytes: 2, Cols: ops.K / 2, Rows: ops.N, BoxCols: c / 2, BoxRows: t.Rows, Swizzle: sw},
		{Addr: uint64(ops.Meta.ptr), ElemBytes: 4, Cols: ops.N, Rows: ops.K / 32, BoxCols: t.Rows, BoxRows: c / 32, Swizzle: cuda.SwizzleNone},
	}
}

// prefillCandidates is launchplan.PrefillCandidates on d's limits (at
// most launchplan.MaxCandidates), a refusal reported as an argument error
// of op.
func (d *Device) prefillCandidates(op string, dt checkpoint.DType, m, n, k int) ([]launchplan.Prefill, error) {
	ps, err := launchplan.PrefillCandidates(dt, m, n, k, d.dec.lim, launchplan.MaxCandidates)
	if errors.Is(err, launchplan.ErrNoPlan) {
		return nil, argError("%s: %v", op, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return ps, nil
}

// launchPrefill queues the prefill kernel for ops, as SparseMatmul does
// above launchplan.MaxTokens tokens on compute capability 9.0:
// launchplan.PrefillCandidates' plan c.cand (0: ChoosePrefill's) or, for
// tests, tile c.tile-1 of launchplan.PrefillTiles with K in c.splits
// splits (0: one), a split plan in clusters of its splits; where the
// driver refuses those clusters, the same tile in one split. It runs with
// the context current and the mutex held.
func (d *Device) launchPrefill(op string, ops SparseOperands, c sparseChoice) error {
	p, err := d.prefillPlan(op, ops, c)
	if err != nil {
		return err
	}
	var tm [3]cuda.TensorMap
	for i, v := range prefillMaps(ops, p.Tile) {
		if tm[i], err = d.drv.EncodeTensorMap2D(v); err != nil {
			return fmt.Errorf("%s: the %s tensor map of %s: %w", op, [...]string{"x", "packed", "meta"}[i], p.Entry, err)
		}
	}
	var bias uint64
	if ops.Bias != nil {
		bias = uint64(ops.Bias.ptr)
	}
	out := 0
	if ops.elementY() {
		out = 1
	}
	launch := func(p launchplan.Prefill) error {
		fn, ok := d.dec.funcs[p.Entry]
		if !ok {
			return fmt.Errorf("%s: %s is not in the loaded sm_90a module", op, p.Entry)
		}
		cfg := cuda.LaunchConfig{
			Grid: cuda.Dim3{uint32(p.Grid), 1, 1}, Block: cuda.Dim3{uint32(p.Block), 1, 1},
			SharedBytes: p.SharedBytes, Stream: d.stream,
		}
		if c := p.Cluster(); c > 0 {
			cfg.Cluster = cuda.Dim3{uint32(c), 1, 1}
		}
		return d.drv.LaunchArgs(p.Entry, fn, cfg, cuda.Word(uint64(ops.Y.ptr)),
			cuda.TensorArg(&tm[0]), cuda.TensorArg(&tm[1]), cuda.TensorArg(&tm[2]),
			cuda.Word(cuda.Int32(ops.M)), cuda.Word(cuda.Int32(ops.N)), cuda.Word(cuda.Int32(ops.K)),
			cuda.Word(bias), cuda.Word(cuda.Int32(out)), cuda.Word(cuda.Int32(p.Splits)))
	}
	err = launch(p)
	if p.Splits > 1 && (cuda.IsResult(err, cuda.ErrorInvalidClusterSize) || cuda.IsResult(err, cuda.ErrorNotSupported)) {
		// The device cannot run the clusters (a partitioned or shared
		// GPU): the same tile with K in one split; nothing was queued.
		return launch(p.WithTile(p.Tile, 1, ops.DType, ops.M, ops.N, ops.K, d.dec.lim))
	}
	return err
}

// prefillPlan is the plan launchPrefill runs for c.
func (d *Device) prefillPlan(op string, ops SparseOperands, c sparseChoice) (launchplan.Prefill, error) {
	ps, err := d.prefillCandidates(op, ops.DType, ops.M, ops.N, ops.K)
	if err != nil {
		return launchplan.Prefill{}, err
	}
	if c.tile == 0 {
		if c.cand >= len(ps) {
			return launchplan.Prefill{}, argError("%s: no prefill candidate %d of %d", op, c.cand, len(ps))
		}
		return ps[c.cand], nil
	}
	tiles := launchplan.PrefillTiles()
	if c.tile > len(tiles) {
		return launchplan.Prefill{}, fmt.Errorf("%s: prefill tile %d of %d", op, c.tile, len(tiles))
	}
	splits := max(c.splits, 1)
	p := ps[0].WithTile(tiles[c.tile-1], splits, ops.DType, ops.M, ops.N, ops.K, d.dec.lim)
	if p.Tile != tiles[c.tile-1] || p.Splits != splits {
		return launchplan.Prefill{}, fmt.Errorf("%s: prefill tile %s with %d splits does not fit (%d bytes of shared memory, k = %d)",
			op, tiles[c.tile-1], splits, d.dec.lim.SharedPerBlock, ops.K)
	}
	return p, nil
}
