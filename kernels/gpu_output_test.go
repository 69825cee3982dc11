package kernels

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/internal/half"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// roundTo returns the bits of f in dt (BF16 or F16), rounded to nearest
// even and overflowing to ±Inf: what the kernels' cvt.rn stores.
func roundTo(dt checkpoint.DType, f float32) uint16 {
	if dt == checkpoint.BF16 {
		return half.BF16(f)
	}
	return half.F16(float64(f))
}

// TestSparseOutputArgs checks the operands' output type and bias before
// any device is used: y of float32 or the element type only, and a bias
// or a y of the element type only where the decode kernels (m ≤ 64) or
// the prefill kernel (sm_90a) run; a nil Device has no prefill kernel.
// Valid operands reach the nil Device, which refuses them as closed.
func TestSparseOutputArgs(t *testing.T) {
	var d *Device
	bias := &Buffer{}
	for _, c := range []struct {
		name string
		ops  SparseOperands
		want error
	}{
		{"y of another type", SparseOperands{DType: checkpoint.BF16, M: 1, N: 32, K: 64, YType: checkpoint.F16}, ErrArgument},
		{"y of int8", SparseOperands{DType: checkpoint.F16, M: 1, N: 32, K: 64, YType: checkpoint.I8}, ErrArgument},
		{"bias past 64 tokens", SparseOperands{DType: checkpoint.BF16, M: 65, N: 32, K: 64, Bias: bias}, ErrArgument},
		{"bf16 y past 64 tokens", SparseOperands{DType: checkpoint.BF16, M: 65, N: 32, K: 64, YType: checkpoint.BF16}, ErrArgument},
		{"f32 y past 64 tokens", SparseOperands{DType: checkpoint.BF16, M: 65, N: 32, K: 64, YType: checkpoint.F32}, ErrClosed},
		{"f16 y and bias", SparseOperands{DType: checkpoint.F16, M: 64, N: 32, K: 64, YType: checkpoint.F16, Bias: bias}, ErrClosed},
		{"f32 y and bias", SparseOperands{DType: checkpoint.BF16, M: 1, N: 32, K: 64, YType: checkpoint.F32, Bias: bias}, ErrClosed},
	} {
		if err := d.SparseMatmul(c.ops); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if err := d.SparseMatmulCandidate(SparseOperands{DType: checkpoint.BF16, M: 65, N: 32, K: 64, Bias: bias}, 0); !errors.Is(err, ErrArgument) {
		t.Errorf("candidate 0 with a bias past 64 tokens: %v, want ErrArgument", err)
	}
}

// noPair turns a plan with the pair sum into the same plan with tickets
// where SFSURGERY_TEST_NO_PAIR is set: for compute-sanitizer's racecheck,
// which cannot follow the pair sum's st.async stores into another CTA's
// shared memory (tools/probes/racecheck_pair.cu).
func noPair(c sparseChoice) sparseChoice {
	if c.kernel == sparseDecode && os.Getenv("SFSURGERY_TEST_NO_PAIR") != "" {
		c.decode.Pair = -1
	}
	return c
}

// outSlack is the float32 values past y that runSparseOut poisons and
// checks.
const outSlack = 64

// runSparseOut runs the sparse product with kernel choice c, bias (nil:
// none) and y of the element type where elem is set, into an output of
// m·n + outSlack float32 poisoned with 0xFF bytes, and returns y's m·n
// values as bits (float32, or dt's 16 bits). It fails t where anything
// was written past y's m·n values (4·m·n bytes, or 2·m·n of the
// element type).
func runSparseOut(t testing.TB, d *Device, dt checkpoint.DType, w *weight, x, bias *Buffer, elem bool, m int,
	c sparseChoice) []uint32 {
	t.Helper()
	y := poisoned(t, d, m*w.n+outSlack)
	defer freeAll(t, y)
	ops := SparseOperands{Y: y, X: x, Packed: w.dPack, Meta: w.dMeta, DType: dt, M: m, N: w.n, K: w.k, Bias: bias}
	if elem {
		ops.YType = dt
	}
	if err := d.sparse("SparseMatmul", ops, noPair(c)); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 4*(m*w.n+outSlack))
	if err := y.Download(raw); err != nil {
		t.Fatal(err)
	}
	used := 4 * m * w.n
	if elem {
		used = 2 * m * w.n
	}
	for i := used; i < len(raw); i++ {
		if raw[i] != 0xFF {
			t.Errorf("%v m=%d %+v tile %d: y (elem %v) written past its %d bytes, at byte %d", dt, m, c.decode, c.tile, elem, used, i)
			break
		}
	}
	out := make([]uint32, m*w.n)
	if !elem {
		for i := range out {
			out[i] = binary.LittleEndian.Uint32(raw[4*i:])
		}
		return out
	}
	for i := range out {
		out[i] = uint32(binary.LittleEndian.Uint16(raw[2*i:]))
	}
	return out
}

// outputChoices are the plans TestGPUDecodeOutput runs, for every kernel
// family the device has: the mma.sp form with one slice (kw = 1 and 8) and
// several (also kw = 2); the warpgroup form's 128-row CTAs with one and
// two slices, the cooperative sum, token groups in clusters and without;
// its 64-row CTAs by tickets and with one slice; both as pairs; the
// hybrid with one slice, two and three by tickets, and as a pair. The
// test skips those launchplan.Choose refuses for its m and shape.
func outputChoices(lim launchplan.Limits) []launchplan.Options {
	c := []launchplan.Options{
		{Warpgroup: -1, Slices: 1},
		{Warpgroup: -1, Warps: 8, WarpsPerRowBlock: 8, Slices: 1},
		{Warpgroup: -1, ChunksPerStage: 2, Warps: 3, Slices: 2},
		{Warpgroup: -1, ChunksPerStage: 2, Warps: 4, WarpsPerRowBlock: 2, Slices: 3},
	}
	if !lim.Warpgroup {
		return c
	}
	return append(c,
		launchplan.Options{Warpgroup: 1, Rows: 128, Pair: -1, Slices: 1},
		launchplan.Options{Warpgroup: 1, Rows: 128, Pair: -1, Cooperative: -1, ChunksPerStage: 2, Slices: 2},
		launchplan.Options{Cooperative: 1, ChunksPerStage: 2, Slices: 3},
		launchplan.Options{TokenTiles: 1, Slices: 2},
		launchplan.Options{TokenTiles: 2, ChunksPerStage: 4, Cluster: -1},
		launchplan.Options{TokenTiles: 2, ChunksPerStage: 4, Slices: 4},
		launchplan.Options{Rows: 64, Pair: -1, ChunksPerStage: 2, Slices: 2},
		launchplan.Options{Rows: 64, ChunksPerStage: 4, Slices: 1},
		launchplan.Options{Rows: 128, Pair: 1, ChunksPerStage: 2},
		launchplan.Options{Rows: 64, Pair: 1},
		launchplan.Options{Rows: 32, ChunksPerStage: 4, Slices: 1},
		launchplan.Options{Rows: 32, Pair: -1, Slices: 2},
		launchplan.Options{Rows: 32, ChunksPerStage: 4, Slices: 3},
		launchplan.Options{Rows: 32, Pair: 1, ChunksPerStage: 2})
}

// entryFamily returns the kernel family of an entry point: its name less
// the element type, tiles and stage size.
func entryFamily(entry string) string {
	parts := strings.Split(entry, "_")
	return strings.Join(parts[:max(len(parts)-3, 0)], "_")
}

// TestGPUDecodeOutput checks the decode kernels' bias and output types on
// every family (outputChoices), BF16 and F16, several shapes (n = 96: idle
// row blocks in the wider CTAs; k = 1600: windows and short stages) and m
// of 1, 3, 8, 17 and 64 (both of reduce's orders, token groups, the
// cooperative sum): with a bias, y in float32 is the sum without one
// plus float32(b[n]), bit for bit, and y in the element type is that
// (or, without a bias, the sum) rounded to nearest even, bit for bit;
// nothing is written past y. The bias holds +0, -0 and the type's
// largest finite value (F16: sums past 65520 overflow to Inf) beside
// random values. Then the operand checks: a bias smaller than n values,
// a bias that is y, a y too small for its type.
func TestGPUDecodeOutput(t *testing.T) {
	d := openGPU(t)
	rng := testRand(t)
	families := map[string]bool{}
	coop, groups := false, false
	for _, s := range []struct{ n, k int }{{96, 1600}, {1024, 4096}, {288, 320}} {
		for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
			w := newWeight(t, d, rng, dt, s.n, s.k)
			x := upload16(t, d, randDense(rng, dt, launchplan.MaxTokens*s.k))
			b := randDense(rng, dt, s.n)
			b[0], b[1], b[2] = 0, 0x8000, 0x7F7F // +0, -0, BF16's largest
			if dt == checkpoint.F16 {
				b[2] = 0x7BFF // F16's largest
			}
			bias := upload16(t, d, b)
			for _, m := range []int{1, 3, 8, 17, 64} {
				for _, o := range outputChoices(d.dec.lim) {
					if _, err := launchplan.Choose(m, s.n, s.k, d.dec.lim, o); err != nil {
						continue
					}
					c := sparseChoice{kernel: sparseDecode, decode: o}
					what := fmt.Sprintf("%v n%d k%d m%d %+v", dt, s.n, s.k, m, o)
					sums := runSparseOut(t, d, dt, w, x, nil, false, m, c)
					if l, ok := d.dec.records[decodeKey{dt, m, s.n, s.k, noPair(c).decode, 0}]; ok {
						families[entryFamily(l.Entry)] = true
						coop = coop || l.Cooperative
						groups = groups || l.Grid[2] > 1
					}
					checkBiasOut(t, what+" f32 bias", dt, s.n, sums, b, false, runSparseOut(t, d, dt, w, x, bias, false, m, c))
					checkBiasOut(t, what+" elem", dt, s.n, sums, nil, true, runSparseOut(t, d, dt, w, x, nil, true, m, c))
					checkBiasOut(t, what+" elem bias", dt, s.n, sums, b, true, runSparseOut(t, d, dt, w, x, bias, true, m, c))
				}
			}
			freeAll(t, x, bias)
			w.free(t)
		}
	}
	want := []string{"gemv"}
	if d.dec.lim.Warpgroup {
		want = append(want, "gemv_wg", "gemv_wg64", "gemv_wg_pair", "gemv_wg64_pair", "gemv_hy", "gemv_hy_pair")
		if !coop || !groups {
			t.Errorf("cooperative sum run: %v; token groups run: %v", coop, groups)
		}
	}
	for _, f := range want {
		if !families[f] && (!strings.HasSuffix(f, "_pair") || os.Getenv("SFSURGERY_TEST_NO_PAIR") == "") {
			t.Errorf("family %s not run (ran %v)", f, families)
		}
	}

	// The operands: sizes and aliasing of the bias and y.
	const m, n, k = 2, 64, 128
	w := newWeight(t, d, rng, checkpoint.BF16, n, k)
	defer w.free(t)
	x := upload16(t, d, randDense(rng, checkpoint.BF16, m*k))
	short := alloc(t, d, 2*n-2)
	y2 := alloc(t, d, 2*m*n) // room for a BF16 y, not a float32 one
	defer freeAll(t, x, short, y2)
	ops := SparseOperands{Y: y2, X: x, Packed: w.dPack, Meta: w.dMeta, DType: checkpoint.BF16, M: m, N: n, K: k, YType: checkpoint.BF16}
	if err := d.SparseMatmul(ops); err != nil {
		t.Errorf("a BF16 y of %d bytes: %v", 2*m*n, err)
	}
	f32 := ops
	f32.YType = checkpoint.F32
	if err := d.SparseMatmul(f32); !errors.Is(err, ErrArgument) {
		t.Errorf("a float32 y of %d bytes: %v, want ErrArgument", 2*m*n, err)
	}
	small := ops
	small.Bias = short
	if err := d.SparseMatmul(small); !errors.Is(err, ErrArgument) {
		t.Errorf("a bias of %d bytes for n = %d: %v, want ErrArgument", 2*n-2, n, err)
	}
	same := ops
	same.Bias = y2
	if err := d.SparseMatmul(same); !errors.Is(err, ErrArgument) {
		t.Errorf("the bias is y: %v, want ErrArgument", err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// checkBiasOut fails t where got, the m·n outputs of a run with bias b (nil:
// none) and y of the element type where elem is set, is not sums (the
// run's float32 y without a bias) with b added in float32 and, for elem,
// rounded to dt, bit for bit.
func checkBiasOut(t testing.TB, what string, dt checkpoint.DType, n int, sums []uint32, b []uint16, elem bool, got []uint32) {
	t.Helper()
	for i, s := range sums {
		v := math.Float32frombits(s)
		if math.IsNaN(float64(v)) {
			t.Fatalf("%s: y[%d] of the run without a bias not written", what, i)
		}
		if b != nil {
			v = float32(v + float32(toFloat64(dt, b[i%n])))
		}
		want := math.Float32bits(v)
		if elem {
			want = uint32(roundTo(dt, v))
		}
		if got[i] != want {
			t.Errorf("%s: y[%d] (token %d, row %d) = %#x, want %#x (sum %v, bias %v)", what, i, i/n, i%n, got[i], want,
				math.Float32frombits(s), b != nil)
			return
		}
	}
}

// TestGPUDecodeDigests writes, where SFSURGERY_TEST_DIGESTS names a file,
// the SHA-256 of the float32 y without a bias of every plan of
// gemvChoices on three of TestGPUDecodeSmall's shapes, at m of 1, 3, 8,
// 17, 33 and 64, BF16 and F16, from fixed operands: the bits of one PTX
// build, to diff against another's (run it once with each through
// SFSURGERY_TEST_PTX and SFSURGERY_TEST_PTX_SM90A) when a kernel change
// must keep them. Skipped otherwise.
func TestGPUDecodeDigests(t *testing.T) {
	path := os.Getenv("SFSURGERY_TEST_DIGESTS")
	if path == "" {
		t.Skip("SFSURGERY_TEST_DIGESTS names no file")
	}
	d := openGPU(t)
	rng := rand.New(rand.NewPCG(24, 0x5f5))
	var out strings.Builder
	for _, s := range []struct{ n, k int }{{96, 192}, {288, 320}, {288, 1600}} {
		for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
			w := newWeight(t, d, rng, dt, s.n, s.k)
			x := upload16(t, d, randDense(rng, dt, launchplan.MaxTokens*s.k))
			for _, m := range []int{1, 3, 8, 17, 33, 64} {
				for _, c := range gemvChoices(m, s.k, d.dec.lim) {
					y := runSparseOut(t, d, dt, w, x, nil, false, m, c)
					h := sha256.New()
					if err := binary.Write(h, binary.LittleEndian, y); err != nil {
						t.Fatal(err)
					}
					fmt.Fprintf(&out, "%v n%d k%d m%d %+v %x\n", dt, s.n, s.k, m, c.decode, h.Sum(nil))
				}
			}
			freeAll(t, x)
			w.free(t)
		}
	}
	if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
