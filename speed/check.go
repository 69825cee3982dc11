package speed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/prune24"
)

// ErrWrong is wrapped by the error of a product whose result differs from
// the reference by more than its tolerance; such a row is never timed.
var ErrWrong = errors.New("speed: wrong result")

// sumTolerance is the relative Frobenius error allowed between two f32
// products over k of the same 16-bit inputs: they differ only by the
// order and truncation of f32 sums, which may grow with the k/32 tensor
// core steps; 4× the kernels tests' bound, far below the ~1 of a wrong
// result.
func sumTolerance(k int) float64 {
	return 4 * max(1e-5, 2*float64(k)/32*0x1p-24)
}

// outTolerance is the relative error allowed for an output of outBytes:
// sumTolerance for float32, and the rounding of the output for 16 bits.
func outTolerance(k, outBytes int) float64 {
	if outBytes == 2 {
		return 8e-3
	}
	return sumTolerance(k)
}

// decodeOutput converts a downloaded output (float32, or 16-bit of dt) to
// float32.
func decodeOutput(raw []byte, outBytes int, dt checkpoint.DType) []float32 {
	out := make([]float32, len(raw)/outBytes)
	parallel((len(out)+(1<<20)-1)>>20, func(t int) {
		lo, hi := t<<20, min(len(out), (t+1)<<20)
		for i := lo; i < hi; i++ {
			if outBytes == 4 {
				out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
				continue
			}
			out[i] = float32(half(dt, binary.LittleEndian.Uint16(raw[2*i:])))
		}
	})
	return out
}

// half converts one 16-bit value of dt to float64.
func half(dt checkpoint.DType, v uint16) float64 {
	if dt == checkpoint.F16 {
		return prune24.F16ToFloat64(v)
	}
	return prune24.BF16ToFloat64(v)
}

// compare returns the relative Frobenius error of got against want, and
// an error wrapping ErrWrong when it exceeds tol, when any element is
// NaN (an unwritten, poisoned output) or when one element is off by more
// than 10·tol of the largest |want| (a few wrong elements hide in the
// Frobenius norm of a large product).
func compare(got, want []float32, tol float64) (float64, error) {
	if len(got) != len(want) {
		return math.Inf(1), fmt.Errorf("%w: %d values, want %d", ErrWrong, len(got), len(want))
	}
	const chunk = 1 << 20
	tasks := (len(want) + chunk - 1) / chunk
	type part struct {
		num, den, maxErr, scale float64
		nan                     int
	}
	parts := make([]part, tasks)
	parallel(tasks, func(t int) {
		p := &parts[t]
		for i := t * chunk; i < min(len(want), (t+1)*chunk); i++ {
			g, w := float64(got[i]), float64(want[i])
			if math.IsNaN(g) || math.IsNaN(w) {
				p.nan++
				continue
			}
			e := math.Abs(g - w)
			p.num += e * e
			p.den += w * w
			p.maxErr = max(p.maxErr, e)
			p.scale = max(p.scale, math.Abs(w))
		}
	})
	var all part
	for _, p := range parts {
		all.num += p.num
		all.den += p.den
		all.maxErr = max(all.maxErr, p.maxErr)
		all.scale = max(all.scale, p.scale)
		all.nan += p.nan
	}
	if all.nan > 0 {
		return math.Inf(1), fmt.Errorf("%w: %d NaN values (unwritten output?)", ErrWrong, all.nan)
	}
	rel := 0.0
	if all.den > 0 {
		rel = math.Sqrt(all.num / all.den)
	} else if all.num > 0 {
		rel = math.Inf(1)
	}
	if !(rel <= tol) {
		return rel, fmt.Errorf("%w: relative error %.3g > %.3g", ErrWrong, rel, tol)
	}
	if lim := 10 * tol * max(all.scale, 1); all.maxErr > lim {
		return rel, fmt.Errorf("%w: an element is off by %.3g > %.3g", ErrWrong, all.maxErr, lim)
	}
	return rel, nil
}

// sampleReference checks the dense product y [m][n] (float32) against
// float64 sums on the CPU at a few rows and columns (first, last and
// spread between), from the host copies of x [m][k] and w [n][k].
func sampleReference(y []float32, x, w []byte, dt checkpoint.DType, m, n, k int) (float64, error) {
	pick := func(count, want int) []int {
		if count <= want {
			out := make([]int, count)
			for i := range out {
				out[i] = i
			}
			return out
		}
		out := make([]int, want)
		for i := range out {
			out[i] = i * (count - 1) / (want - 1)
		}
		return out
	}
	rows, cols := pick(m, 8), pick(n, 8)
	var got, want []float32
	for _, r := range rows {
		for _, c := range cols {
			var s float64
			for i := range k {
				s += half(dt, binary.LittleEndian.Uint16(x[2*(r*k+i):])) * half(dt, binary.LittleEndian.Uint16(w[2*(c*k+i):]))
			}
			want = append(want, float32(s))
			got = append(got, y[r*n+c])
		}
	}
	return compare(got, want, sumTolerance(k))
}

// finite returns v, or 0 for an infinity or NaN (which JSON cannot hold;
// the row's error says what was wrong).
func finite(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0
	}
	return v
}
