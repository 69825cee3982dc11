package kernels

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/internal/half"
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
// product's float32 y: every value the float32 one rounded to nearest
// even, or (where cuBLASLt's heuristic picked another algorithm for the
// 16-bit output, whose sums differ in their last bits) within one unit
// in the last place of it, with nothing written past y's 2·m·n bytes;
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
				exact, far := 0, 0
				for i, f := range want {
					got := binary.LittleEndian.Uint16(raw[2*i:])
					r := roundTo(dt, f)
					switch {
					case got == r:
						exact++
					case ulps(got, r) > 1:
						if far++; far <= 3 {
							t.Errorf("y[%d] = %#04x, float32 %g rounds to %#04x", i, got, f, r)
						}
					}
				}
				if far > 0 {
					t.Errorf("%d of %d values more than one unit in the last place from the float32 y rounded", far, len(want))
				}
				t.Logf("%d of %d values the float32 y rounded exactly", exact, len(want))
			})
		}
	}
}

// ulps is how many representable 16-bit values of one sign apart a and
// b are (math.MaxInt where their signs differ and neither is zero).
func ulps(a, b uint16) int {
	const sign = 0x8000
	if a&^sign == 0 && b&^sign == 0 {
		return 0
	}
	if a&sign != b&sign {
		return math.MaxInt
	}
	d := int(a&^sign) - int(b&^sign)
	if d < 0 {
		d = -d
	}
	return d
}

// TestUlps checks the distance TestGPUDenseOutput allows.
func TestUlps(t *testing.T) {
	one := half.BF16(1)
	for _, c := range []struct {
		a, b uint16
		want int
	}{
		{one, one, 0}, {one, one + 1, 1}, {one + 2, one, 2}, {0x8000, 0, 0}, {one | 0x8000, one, math.MaxInt},
		{0x8001, 0x8003, 2},
	} {
		if got := ulps(c.a, c.b); got != c.want {
			t.Errorf("ulps(%#04x, %#04x) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
