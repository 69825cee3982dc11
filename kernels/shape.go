package kernels

import (
	"math"
	"math/bits"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// Limits of the kernels' index arithmetic and launch grids.
const (
	maxDim   = launchplan.MaxDim // any of m, n, k
	maxGridY = 65535             // CUDA's grid.y limit: weight-row tiles of 64
	maxGridX = 1<<31 - 1         // CUDA's grid.x limit
	tile     = 64                // tokens and weight rows per CTA of the GEMMs
)

// checkDims validates m, n, k (each ≥ 1 and ≤ maxDim) for op.
func checkDims(op string, dt checkpoint.DType, m, n, k int) error {
	if !validType(dt) {
		return argError("%s: unsupported data type %v", op, dt)
	}
	for _, v := range []struct {
		name string
		v    int
	}{{"m", m}, {"n", n}, {"k", k}} {
		if v.v < 1 || v.v > maxDim {
			return argError("%s: %s = %d out of range [1, %d]", op, v.name, v.v, maxDim)
		}
	}
	if ceilDiv(n, tile) > maxGridY {
		return argError("%s: n = %d exceeds %d weight rows", op, n, maxGridY*tile)
	}
	return nil
}

// checkSparse validates the shape of a sparse weight n × k: the guards of
// the packed format (n % 32 == 0, k % 64 == 0).
func checkSparse(op string, n, k int) error {
	if n%32 != 0 {
		return argError("%s: n = %d is not a multiple of 32", op, n)
	}
	if k%64 != 0 {
		return argError("%s: k = %d is not a multiple of 64", op, k)
	}
	return nil
}

// size returns a·b·c bytes, or an error when it overflows int64.
func size(a, b, c int) (int64, error) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi == 0 {
		hi, lo = bits.Mul64(lo, uint64(c))
	}
	if hi != 0 || lo > math.MaxInt64 {
		return 0, argError("size %d × %d × %d overflows", a, b, c)
	}
	return int64(lo), nil
}

// operand is a buffer an operation reads or writes, with the bytes it needs.
type operand struct {
	buf  *Buffer
	name string
	need int64
}

// operands checks every operand and that the output (the first) is none of
// the inputs. It runs with the mutex held.
func (d *Device) operands(op string, ops ...operand) error {
	for i, o := range ops {
		if err := d.use(o.buf, op+": "+o.name, o.need); err != nil {
			return err
		}
		if i > 0 && o.buf == ops[0].buf {
			return argError("%s: output %s is also input %s", op, ops[0].name, o.name)
		}
	}
	return nil
}

// sizes computes the byte sizes of products of dims with overflow checks.
func sizes(dims ...[3]int) ([]int64, error) {
	out := make([]int64, len(dims))
	for i, d := range dims {
		s, err := size(d[0], d[1], d[2])
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
