package kernels

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// TestDenseOutputArgs checks a dense product's output type before any
// device is used: y of float32 or the element type only, for the
// product and for its candidates' count. Valid operands reach the nil
// Device, which refuses them as closed.
func TestDenseOutputArgs(t *testing.T) {
	var d *Device
	for _, c := range []struct {
		name string
		ops  DenseOperands
		want error
	}{
		{"y of another type", DenseOperands{DType: checkpoint.BF16, M: 1, N: 32, K: 64, YType: checkpoint.F16}, ErrArgument},
		{"y of int8", DenseOperands{DType: checkpoint.F16, M: 1, N: 32, K: 64, YType: checkpoint.I8}, ErrArgument},
		{"f32 y", DenseOperands{DType: checkpoint.BF16, M: 65, N: 32, K: 64, YType: checkpoint.F32}, ErrClosed},
		{"default y", DenseOperands{DType: checkpoint.BF16, M: 65, N: 32, K: 64}, ErrClosed},
		{"bf16 y", DenseOperands{DType: checkpoint.BF16, M: 300, N: 32, K: 64, YType: checkpoint.BF16}, ErrClosed},
		{"f16 y", DenseOperands{DType: checkpoint.F16, M: 1, N: 32, K: 64, YType: checkpoint.F16}, ErrClosed},
	} {
		if err := d.DenseMatmul(c.ops); !errors.Is(err, c.want) {
			t.Errorf("DenseMatmul, %s: %v, want %v", c.name, err, c.want)
		}
		if err := d.DenseMatmulCandidate(c.ops, 0); !errors.Is(err, c.want) {
			t.Errorf("DenseMatmulCandidate, %s: %v, want %v", c.name, err, c.want)
		}
		if _, err := d.DenseCandidates(c.ops.DType, c.ops.YType, c.ops.M, c.ops.N, c.ops.K); !errors.Is(err, c.want) {
			t.Errorf("DenseCandidates, %s: %v, want %v", c.name, err, c.want)
		}
	}
}

// TestGPUDenseOutput checks y of the element type against the same
// product's float32 y: every value within one unit in the last place of
// the float32 value rounded, plus what two float32 summation orders may
// differ by (cuBLASLt's heuristic may pick another algorithm for the
// 16-bit output: sumSlack), with nothing written past y's 2·m·n bytes;
// and the package's own dense kernel refuses it.
func TestGPUDenseOutput(t *testing.T) {
	d := openGPU(t)
	if ver, _ := d.CublasLtVersion(); ver == 0 {
		t.Skipf("no cuBLASLt (%s): y of the element type needs it", d.DenseBackend())
	}
	rng := testRand(t)
	for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
		for _, s := range []struct{ m, n, k int }{{1, 32, 64}, {65, 288, 320}, {300, 1024, 4096}} {
			t.Run(fmt.Sprintf("%v/m%d_n%d_k%d", dt, s.m, s.n, s.k), func(t *testing.T) {
				w := newWeight(t, d, rng, dt, s.n, s.k)
				defer w.free(t)
				x := upload16(t, d, randDense(rng, dt, s.m*s.k))
				yf, yh := poisoned(t, d, s.m*s.n), poisoned(t, d, s.m*s.n+outSlack)
				defer freeAll(t, x, yf, yh)
				ops := DenseOperands{Y: yf, X: x, W: w.dDense, DType: dt, M: s.m, N: s.n, K: s.k}
				if err := d.DenseMatmul(ops); err != nil {
					t.Fatal(err)
				}
				ops.Y, ops.YType = yh, dt
				if err := d.DenseMatmul(ops); err != nil {
					t.Fatal(err)
				}
				if err := d.dense("DenseMatmul", ops, true); !errors.Is(err, ErrArgument) {
					t.Errorf("own dense kernel with y of %v: %v, want ErrArgument", dt, err)
				}
				if err := d.Synchronize(); err != nil {
					t.Fatal(err)
				}
				want := downloadF32(t, yf, s.m*s.n)
				raw := make([]byte, 4*(s.m*s.n+outSlack))
				if err := yh.Download(raw); err != nil {
					t.Fatal(err)
				}
				for i := 2 * s.m * s.n; i < len(raw); i++ {
					if raw[i] != 0xFF {
						t.Fatalf("y of %v written past its %d bytes, at byte %d", dt, 2*s.m*s.n, i)
					}
				}
				top := 0.0
				for _, f := range want {
					top = max(top, math.Abs(float64(f)))
				}
				slack := sumSlack(s.k, top)
				exact, far := 0, 0
				for i, f := range want {
					got := binary.LittleEndian.Uint16(raw[2*i:])
					if got == roundTo(dt, f) {
						exact++
						continue
					}
					if g := toFloat64(dt, got); math.IsNaN(g) || math.Abs(g-float64(f)) > ulp16(dt, float64(f))+slack {
						if far++; far <= 3 {
							t.Errorf("y[%d] = %g (%#04x), float32 %g", i, g, got, f)
						}
					}
				}
				if far > 0 {
					t.Errorf("%d of %d values farther than one unit in the last place (plus %.3g) from the float32 y", far, len(want), slack)
				}
				t.Logf("%d of %d values the float32 y rounded exactly", exact, len(want))
			})
		}
	}
}

// ulp16 is one unit in the last place of dt at v's magnitude: 2⁻⁷ (BF16)
// or 2⁻¹⁰ (F16) of its power of two, and F16's subnormal step below.
func ulp16(dt checkpoint.DType, v float64) float64 {
	bits, least := 7, 0x1p-133
	if dt == checkpoint.F16 {
		bits, least = 10, 0x1p-24
	}
	if v == 0 {
		return least
	}
	_, e := math.Frexp(v)
	return max(math.Ldexp(1, e-1-bits), least)
}

// sumSlack bounds how far two float32 sums of k products of one output,
// added in different orders, may differ, for outputs up to top in
// magnitude: k rounding steps of 2⁻²⁴ of the running sum, taken as 4·top.
func sumSlack(k int, top float64) float64 {
	return float64(k) * 0x1p-24 * 4 * top
}

// TestUlp16 checks the step TestGPUDenseOutput allows.
func TestUlp16(t *testing.T) {
	for _, c := range []struct {
		dt   checkpoint.DType
		v    float64
		want float64
	}{
		{checkpoint.BF16, 1, 0x1p-7}, {checkpoint.BF16, 1.5, 0x1p-7}, {checkpoint.BF16, -3, 0x1p-6}, {checkpoint.BF16, 0, 0x1p-133},
		{checkpoint.F16, 1, 0x1p-10}, {checkpoint.F16, 1000, 0x1p-1}, {checkpoint.F16, 1e-7, 0x1p-24},
	} {
		if got := ulp16(c.dt, c.v); got != c.want {
			t.Errorf("ulp16(%v, %g) = %g, want %g", c.dt, c.v, got, c.want)
		}
	}
	if got := sumSlack(4096, 2); got != 4096*0x1p-24*8 {
		t.Errorf("sumSlack(4096, 2) = %g", got)
	}
}
