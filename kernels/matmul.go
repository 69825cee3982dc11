package kernels

import (
	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/cuda"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// SparseOperands are the operands of a sparse product y = x · Wᵀ (+ b),
// where the weight W [N][K] is given in PyTorch's CUTLASS layout exactly
// as stored: Packed [N][K/2] of DType and Meta (int16, N·K/16 values,
// reordered); X is [M][K] of DType and Y [M][N] float32 or, as YType
// says, of DType, all row-major. Buffers may be larger than needed.
type SparseOperands struct {
	Y, X, Packed, Meta *Buffer
	DType              checkpoint.DType // BF16 or F16
	M, N, K            int              // tokens, weight rows, weight columns
	// Bias, unless nil, holds b: N values of DType, added to every
	// token's sums (y[m][n] = s + float32(b[n]), s the float32 sum).
	Bias *Buffer
	// YType is Y's element type: float32 (the zero value, or
	// checkpoint.F32), or DType, each value then rounded to nearest even
	// from its float32 result. A Bias or a YType of DType needs M ≤
	// launchplan.MaxTokens or the sm_90a module loaded (compute
	// capability 9.0): the decode kernels and the prefill kernel take
	// them, the tiled mma.sp kernel does not.
	YType checkpoint.DType
}

// elementY reports whether ops asks for y in the element type.
func (ops SparseOperands) elementY() bool { return ops.YType == ops.DType }

// checkOutput validates the output type and bias of ops for op (the name
// its errors carry), whose product runs on a kernel that takes them
// (the decode or prefill kernels) where full is set, and returns the
// bytes of one element of y.
func (ops SparseOperands) checkOutput(op string, full bool) (int, error) {
	size, err := yBytes(op, ops.YType, ops.DType)
	if err != nil {
		return 0, err
	}
	if !full && (ops.Bias != nil || size == 2) {
		return 0, argError("%s: a bias or a y of %v needs m ≤ %d (the decode kernels) or the sm_90a module (the prefill kernel), not m = %d here",
			op, ops.DType, launchplan.MaxTokens, ops.M)
	}
	return size, nil
}

// SparseMatmul computes op.Y = op.X · Wᵀ (+ op.Bias) on the sparse tensor
// cores.
//
// It needs N % 32 == 0 and K % 64 == 0 (the guards of the format); M is
// any positive number, but at most launchplan.MaxTokens with a bias or y
// of the element type. The launch is asynchronous.
//
// The kernel depends on M. Up to launchplan.MaxTokens (64) tokens, the
// decode sizes where the product is bound by the weight bytes, a kernel
// streams the weight once over every SM; to fill them it may split K, and
// the last slice of each row block to finish sums the slices' partial
// sums in a fixed order, so results are bit-for-bit reproducible. Larger
// M uses, where the sm_90a module is loaded (H100, H200), the prefill kernel
// (cuda/spmm_wg.cuh: bulk tensor copies and wgmma.sp on a persistent
// grid, its tile chosen by launchplan.ChoosePrefill), elsewhere the tiled
// mma.sp kernel. (At M = 64 on an H100 the decode kernel measured
// 1.2-2.3× faster than the tiled one on every Llama-3 projection; from
// 256 tokens the prefill kernel runs 2.5-5× faster than the tiled one:
// docs/kernels.md.)
func (d *Device) SparseMatmul(op SparseOperands) error {
	return d.sparse("SparseMatmul", op, sparseChoice{})
}

// Kernels of a sparse product.
const (
	sparseAuto    = iota // by M, as SparseMatmul documents
	sparseTiled          // the tiled kernel (cuda/spmm.cuh)
	sparseDecode         // the decode kernels (cuda/gemv.cuh), M ≤ launchplan.MaxTokens
	sparsePrefill        // the prefill kernel (cuda/spmm_wg.cuh), compute capability 9.0
)

// sparseChoice selects the kernel of a sparse product; the zero value is
// SparseMatmul's choice. Tests and benchmarks force the others.
type sparseChoice struct {
	kernel int                // sparseAuto, sparseTiled, sparseDecode or sparsePrefill
	decode launchplan.Options // the decode plan's forced parts; zero lets launchplan.Choose choose
	cand   int                // the candidate plan (launchplan.Candidates, PrefillCandidates), 0 the planner's
	tile   int                // the prefill kernel's tile: 0 by cand, i+1 launchplan.PrefillTiles()[i]
	splits int                // with tile: the prefill kernel's splits of K, 0 one
}

// sparse is SparseMatmul for op (the name its errors carry) with the
// kernel chosen by c.
func (d *Device) sparse(op string, ops SparseOperands, c sparseChoice) error {
	dt, m, n, k := ops.DType, ops.M, ops.N, ops.K
	if err := checkDims(op, dt, m, n, k); err != nil {
		return err
	}
	if err := checkSparse(op, n, k); err != nil {
		return err
	}
	decode := c.kernel == sparseDecode || c.kernel == sparseAuto && m <= launchplan.MaxTokens
	prefill := c.kernel == sparsePrefill || c.kernel == sparseAuto && !decode && d.hasPrefill()
	ySize, err := ops.checkOutput(op, decode || prefill)
	if err != nil {
		return err
	}
	need, err := sizes([3]int{m, n, ySize}, [3]int{m, k, 2}, [3]int{n, k, 1}, [3]int{n, k / 8, 1}, [3]int{n, 2, 1})
	if err != nil {
		return err
	}
	return d.do(func() error {
		in := []operand{{ops.Y, "y", need[0]}, {ops.X, "x", need[1]}, {ops.Packed, "packed", need[2]}, {ops.Meta, "meta", need[3]}}
		if ops.Bias != nil {
			in = append(in, operand{ops.Bias, "bias", need[4]})
		}
		if err := d.operands(op, in...); err != nil {
			return err
		}
		switch {
		case decode:
			return d.launchDecode(op, ops, c.decode, c.cand)
		case prefill:
			return d.launchPrefill(op, ops, c)
		}
		return d.launchTiled(ops)
	})
}

// launchTiled queues the tiled kernel, as SparseMatmul does above
// launchplan.MaxTokens tokens. It runs with the context current and the
// mutex held.
func (d *Device) launchTiled(ops SparseOperands) error {
	fn := d.fn.spmmBF16
	if ops.DType == checkpoint.F16 {
		fn = d.fn.spmmF16
	}
	grid := cuda.Dim3{uint32(ceilDiv(ops.M, tile)), uint32(ceilDiv(ops.N, tile)), 1}
	return d.launch("spmm", fn, grid3(grid, cuda.Dim3{128, 1, 1}, 0),
		uint64(ops.Y.ptr), uint64(ops.X.ptr), uint64(ops.Packed.ptr), uint64(ops.Meta.ptr),
		cuda.Int32(ops.M), cuda.Int32(ops.N), cuda.Int32(ops.K))
}

// DenseOperands are the operands of a dense product y = x · wᵀ: X
// [M][K] and W [N][K] of DType, Y [M][N] of YType, all row-major. Buffers
// may be larger than needed.
type DenseOperands struct {
	Y, X, W *Buffer
	DType   checkpoint.DType // BF16 or F16
	M, N, K int              // tokens, weight rows, weight columns
	// YType is Y's element type: float32 (the zero value, or
	// checkpoint.F32), or DType, each value then rounded from its float32
	// result (what a model's projections write). A YType of DType needs
	// cuBLASLt: the package's own dense kernel writes float32.
	YType checkpoint.DType
}

// yBytes returns the bytes of one element of a product's y of yType for
// inputs of dt: 4 for float32 ("" or checkpoint.F32), 2 for dt; any other
// type is refused (op names the call in the error). Sparse and dense
// products take the same output types.
func yBytes(op string, yType, dt checkpoint.DType) (int, error) {
	switch yType {
	case "", checkpoint.F32:
		return 4, nil
	case dt:
		return 2, nil
	}
	return 0, argError("%s: y of type %v: float32 or the element type %v", op, yType, dt)
}

// DenseMatmul computes op.Y = op.X · op.Wᵀ, accumulating in float32. It
// uses cuBLASLt when it was found at Open, else the package's own kernel
// (float32 y only); [Device.DenseBackend] says which. The launch is
// asynchronous.
func (d *Device) DenseMatmul(op DenseOperands) error {
	return d.dense("DenseMatmul", op, false)
}

// denseArgs checks the dimensions of a dense product for op (the name
// its errors carry) and returns a check of its operands, to run inside
// d.do.
func (d *Device) denseArgs(op string, ops DenseOperands) (func() error, error) {
	if err := checkDims(op, ops.DType, ops.M, ops.N, ops.K); err != nil {
		return nil, err
	}
	yb, err := yBytes(op, ops.YType, ops.DType)
	if err != nil {
		return nil, err
	}
	need, err := sizes([3]int{ops.M, ops.N, yb}, [3]int{ops.M, ops.K, 2}, [3]int{ops.N, ops.K, 2})
	if err != nil {
		return nil, err
	}
	return func() error {
		return d.operands(op, operand{ops.Y, "y", need[0]}, operand{ops.X, "x", need[1]}, operand{ops.W, "w", need[2]})
	}, nil
}

// dense is DenseMatmul for op (the name its errors carry), on the
// package's own kernel where own is set (tests compare the two).
func (d *Device) dense(op string, ops DenseOperands, own bool) error {
	operands, err := d.denseArgs(op, ops)
	if err != nil {
		return err
	}
	return d.do(func() error {
		if err := operands(); err != nil {
			return err
		}
		if d.lt != nil && !own {
			return d.ltMatmul(ops, 0)
		}
		if ops.YType == ops.DType {
			return argError("%s: y of %v needs cuBLASLt; the package's own dense kernel writes float32", op, ops.DType)
		}
		fn := d.fn.denseBF16
		if ops.DType == checkpoint.F16 {
			fn = d.fn.denseF16
		}
		grid := cuda.Dim3{uint32(ceilDiv(ops.M, tile)), uint32(ceilDiv(ops.N, tile)), 1}
		return d.launch("dense", fn, grid3(grid, cuda.Dim3{256, 1, 1}, 0),
			uint64(ops.Y.ptr), uint64(ops.X.ptr), uint64(ops.W.ptr), cuda.Int32(ops.M), cuda.Int32(ops.N), cuda.Int32(ops.K))
	})
}

// DecodeOperands are the operands of DecodeAmpere: the weight of N rows
// and K columns, stored in PyTorch's CUTLASS layout (Packed [N][K/2] of
// DType, Meta int16 reordered; docs/formats.md §1), and W, which receives
// the dense pruned weight [N][K].
type DecodeOperands struct {
	W, Packed, Meta *Buffer
	DType           checkpoint.DType // BF16 or F16
	N, K            int              // weight rows, weight columns
}

// DecodeAmpere expands the stored weight of ops into the dense pruned
// weight ops.W, bit for bit; pruned elements become +0.0. It needs
// N % 32 == 0 and K % 64 == 0. The launch is asynchronous.
func (d *Device) DecodeAmpere(ops DecodeOperands) error {
	const op = "DecodeAmpere"
	w, packed, meta, dt, n, k := ops.W, ops.Packed, ops.Meta, ops.DType, ops.N, ops.K
	if err := checkDims(op, dt, 1, n, k); err != nil {
		return err
	}
	if err := checkSparse(op, n, k); err != nil {
		return err
	}
	need, err := sizes([3]int{n, k, 2}, [3]int{n, k, 1}, [3]int{n, k / 8, 1})
	if err != nil {
		return err
	}
	const threads = 256
	blocks := (int64(n)*int64(k/16) + threads - 1) / threads
	if blocks > maxGridX {
		return argError("%s: %d × %d is too large for one launch", op, n, k)
	}
	return d.do(func() error {
		if err := d.operands(op, operand{w, "w", need[0]}, operand{packed, "packed", need[1]},
			operand{meta, "meta", need[2]}); err != nil {
			return err
		}
		return d.launch("decode", d.fn.decode16, grid3(cuda.Dim3{uint32(blocks), 1, 1}, cuda.Dim3{threads, 1, 1}, 0),
			uint64(w.ptr), uint64(packed.ptr), uint64(meta.ptr), cuda.Int32(n), cuda.Int32(k))
	})
}
