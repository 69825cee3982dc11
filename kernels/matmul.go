package kernels

import (
	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/cuda"
)

// SparseMatmul computes y = x · Wᵀ on the sparse tensor cores, where the
// weight W [n][k] is given in PyTorch's CUTLASS layout exactly as stored:
// packed [n][k/2] (dtype dt) and meta (int16, n·k/16 values, reordered).
// x is [m][k] (dtype dt) and y is float32 [m][n], all row-major.
//
// It needs n % 32 == 0 and k % 64 == 0 (the guards of the format); m is
// any positive number. Buffers may be larger than needed. The launch is
// asynchronous.
//
// The kernel depends on m. Up to gemvMaxTokens (64) tokens, the decode
// sizes where the product is bound by the weight bytes, a kernel streams
// the weight once over every SM; to fill them it may split k, and the
// last slice of each row block to finish sums the slices' partial sums in
// a fixed order, so results are bit-for-bit reproducible. Larger m uses
// the tiled kernel. (At m = 64 on an H100 the decode kernel measured
// 1.2-2.3× faster than the tiled one on every Llama-3 projection.)
func (d *Device) SparseMatmul(y, x, packed, meta *Buffer, dt checkpoint.DType, m, n, k int) error {
	return d.sparse(y, x, packed, meta, dt, m, n, k, sparseChoice{})
}

// Kernels of a sparse product.
const (
	sparseAuto    = iota // by m, as SparseMatmul documents
	sparseGeneral        // the tiled kernel (cuda/spmm.cuh)
	sparseGemv           // the decode kernel (cuda/gemv.cuh), m ≤ gemvMaxTokens
)

// sparseChoice selects the kernel of a sparse product; the zero value is
// SparseMatmul's choice. Tests and benchmarks force the others.
type sparseChoice struct {
	kernel int         // sparseAuto, sparseGeneral or sparseGemv
	gemv   gemvOptions // decode-kernel overrides; zero lets planGemv choose
	cand   int         // the decode kernel's candidate plan (gemvCandidates), 0 planGemv's
}

// sparse is SparseMatmul with the kernel chosen by c.
func (d *Device) sparse(y, x, packed, meta *Buffer, dt checkpoint.DType, m, n, k int, c sparseChoice) error {
	return d.sparseOp("SparseMatmul", y, x, packed, meta, dt, m, n, k, c)
}

// sparseOp is sparse for op (the name its errors carry).
func (d *Device) sparseOp(op string, y, x, packed, meta *Buffer, dt checkpoint.DType, m, n, k int, c sparseChoice) error {
	if err := checkDims(op, dt, m, n, k); err != nil {
		return err
	}
	if err := checkSparse(op, n, k); err != nil {
		return err
	}
	need, err := sizes([3]int{m, n, 4}, [3]int{m, k, 2}, [3]int{n, k, 1}, [3]int{n, k / 8, 1})
	if err != nil {
		return err
	}
	return d.do(func() error {
		if err := d.operands(op, operand{y, "y", need[0]}, operand{x, "x", need[1]},
			operand{packed, "packed", need[2]}, operand{meta, "meta", need[3]}); err != nil {
			return err
		}
		if c.kernel == sparseGemv || c.kernel == sparseAuto && m <= gemvMaxTokens {
			return d.launchGemv(op, y, x, packed, meta, dt, m, n, k, c.gemv, c.cand)
		}
		return d.launchTiled(y, x, packed, meta, dt, m, n, k)
	})
}

// launchTiled queues the tiled kernel, as SparseMatmul does above
// gemvMaxTokens tokens. It runs with the context current and the mutex
// held.
func (d *Device) launchTiled(y, x, packed, meta *Buffer, dt checkpoint.DType, m, n, k int) error {
	fn := d.fn.spmmBF16
	if dt == checkpoint.F16 {
		fn = d.fn.spmmF16
	}
	grid := cuda.Dim3{uint32(ceilDiv(m, tile)), uint32(ceilDiv(n, tile)), 1}
	return d.launch("spmm", fn, grid3(grid, cuda.Dim3{128, 1, 1}, 0),
		uint64(y.ptr), uint64(x.ptr), uint64(packed.ptr), uint64(meta.ptr), cuda.Int32(m), cuda.Int32(n), cuda.Int32(k))
}

// DenseMatmul computes y = x · wᵀ with x [m][k] and w [n][k] of dtype dt
// and y float32 [m][n], all row-major, accumulating in float32. It uses
// cuBLASLt when it was found at Open, else the package's own kernel;
// [Device.DenseBackend] says which.
func (d *Device) DenseMatmul(y, x, w *Buffer, dt checkpoint.DType, m, n, k int) error {
	return d.dense("DenseMatmul", y, x, w, dt, m, n, k, false)
}

// denseOwn is DenseMatmul forced onto the package's own kernel.
func (d *Device) denseOwn(y, x, w *Buffer, dt checkpoint.DType, m, n, k int) error {
	return d.dense("DenseMatmul", y, x, w, dt, m, n, k, true)
}

// denseArgs checks the dimensions of a dense product y[m][n] = x·wᵀ and
// returns a check of its operands, to run inside d.do.
func (d *Device) denseArgs(op string, y, x, w *Buffer, dt checkpoint.DType, m, n, k int) (func() error, error) {
	if err := checkDims(op, dt, m, n, k); err != nil {
		return nil, err
	}
	need, err := sizes([3]int{m, n, 4}, [3]int{m, k, 2}, [3]int{n, k, 2})
	if err != nil {
		return nil, err
	}
	return func() error {
		return d.operands(op, operand{y, "y", need[0]}, operand{x, "x", need[1]}, operand{w, "w", need[2]})
	}, nil
}

func (d *Device) dense(op string, y, x, w *Buffer, dt checkpoint.DType, m, n, k int, own bool) error {
	operands, err := d.denseArgs(op, y, x, w, dt, m, n, k)
	if err != nil {
		return err
	}
	return d.do(func() error {
		if err := operands(); err != nil {
			return err
		}
		if d.lt != nil && !own {
			return d.ltMatmul(y, x, w, dt, m, n, k, 0)
		}
		fn := d.fn.denseBF16
		if dt == checkpoint.F16 {
			fn = d.fn.denseF16
		}
		grid := cuda.Dim3{uint32(ceilDiv(m, tile)), uint32(ceilDiv(n, tile)), 1}
		return d.launch("dense", fn, grid3(grid, cuda.Dim3{256, 1, 1}, 0),
			uint64(y.ptr), uint64(x.ptr), uint64(w.ptr), cuda.Int32(m), cuda.Int32(n), cuda.Int32(k))
	})
}

// DecodeAmpere expands a weight stored in PyTorch's CUTLASS layout (packed
// [n][k/2] of dtype dt, meta int16 reordered) into the dense pruned weight
// w [n][k], bit for bit; pruned elements become +0.0. It needs n % 32 == 0
// and k % 64 == 0. The launch is asynchronous.
func (d *Device) DecodeAmpere(w, packed, meta *Buffer, dt checkpoint.DType, n, k int) error {
	const op = "DecodeAmpere"
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
