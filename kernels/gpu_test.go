package kernels

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// openGPU opens device 0 or skips the test when the machine has no usable
// GPU. SFSURGERY_TEST_PTX and SFSURGERY_TEST_PTX_SM90A may name PTX files
// to load instead of the embedded ones (to test a fresh nvcc build before
// committing it).
func openGPU(t testing.TB) *Device {
	t.Helper()
	cfg := defaultConfig()
	for _, o := range []struct {
		env string
		dst *[]byte
	}{{"SFSURGERY_TEST_PTX", &cfg.ptx}, {"SFSURGERY_TEST_PTX_SM90A", &cfg.ptx90a}} {
		if p := os.Getenv(o.env); p != "" {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			*o.dst = append(b, 0)
		}
	}
	d, err := open(0, cfg)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("no CUDA driver or usable GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// testRand returns a generator seeded from SFSURGERY_SEED or the clock,
// and logs the seed so a failure can be replayed.
func testRand(t testing.TB) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SFSURGERY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed = v
	}
	t.Logf("SFSURGERY_SEED=%d", seed)
	return rand.New(rand.NewPCG(seed, 0x5f5))
}

func bytes16(s []uint16) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 2*len(s)) }

func upload16(t testing.TB, d *Device, s []uint16) *Buffer {
	t.Helper()
	b, err := d.Upload(bytes16(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func download16(t testing.TB, b *Buffer, count int) []uint16 {
	t.Helper()
	out := make([]uint16, count)
	if err := b.Download(bytes16(out)); err != nil {
		t.Fatal(err)
	}
	return out
}

func downloadF32(t testing.TB, b *Buffer, count int) []float32 {
	t.Helper()
	out := make([]float32, count)
	if err := b.Download(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 4*count)); err != nil {
		t.Fatal(err)
	}
	return out
}

// poisoned allocates an f32 output filled with NaN (0xFF bytes), so that
// an element the kernel fails to write fails every comparison.
func poisoned(t testing.TB, d *Device, count int) *Buffer {
	t.Helper()
	b, err := d.Alloc(int64(4 * count))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.memset(0xff); err != nil {
		t.Fatal(err)
	}
	return b
}

// diff compares got with want: relative Frobenius error and max absolute
// error. A NaN anywhere gives +Inf.
func diff(got, want []float32) (rel, maxAbs float64) {
	var num, den float64
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) || math.IsNaN(w) {
			return math.Inf(1), math.Inf(1)
		}
		e := math.Abs(g - w)
		num += e * e
		den += w * w
		maxAbs = max(maxAbs, e)
	}
	if den == 0 {
		if num == 0 {
			return 0, maxAbs
		}
		return math.Inf(1), maxAbs
	}
	return math.Sqrt(num / den), maxAbs
}

// tolerance returns the relative Frobenius error allowed for a product
// over k: products of 16-bit floats are exact in f32, so results differ only
// by f32 summation. Tensor cores round each m16n8k32 step's sum toward zero,
// a bias that can grow with the k/32 steps, on both sides of a comparison:
// 1e-5, or 2·(k/32)·2⁻²⁴ when larger (5.3e-5 at k = 14336).
func tolerance(k int) float64 {
	return max(1e-5, 2*float64(k)/32*0x1p-24)
}

// refColumns computes, in float64, output columns cols (weight rows) of
// y = x · wᵀ for all m tokens, as float32 [m][len(cols)].
func refColumns(dt checkpoint.DType, x, w []uint16, m, k int, cols []int) []float32 {
	v := lut(dt)
	out := make([]float32, m*len(cols))
	for ci, c := range cols {
		wr := w[c*k : (c+1)*k]
		for tok := 0; tok < m; tok++ {
			xr := x[tok*k : (tok+1)*k]
			var s float64
			for i, wb := range wr {
				if wb != 0 {
					s += v[xr[i]] * v[wb]
				}
			}
			out[tok*len(cols)+ci] = float32(s)
		}
	}
	return out
}

// pickColumns gathers columns cols of y [m][n].
func pickColumns(y []float32, m, n int, cols []int) []float32 {
	out := make([]float32, m*len(cols))
	for tok := 0; tok < m; tok++ {
		for ci, c := range cols {
			out[tok*len(cols)+ci] = y[tok*n+c]
		}
	}
	return out
}

// checkClose fails t when got is not within tolerance(k) of want, in
// relative Frobenius error and in max abs error (10·tolerance(k) of the
// largest |want|).
func checkClose(t testing.TB, what string, k int, got, want []float32) {
	t.Helper()
	rel, maxAbs := diff(got, want)
	var scale float64
	for _, w := range want {
		scale = max(scale, math.Abs(float64(w)))
	}
	tol := tolerance(k)
	if !(rel <= tol) || !(maxAbs <= 10*tol*max(scale, 1)) {
		t.Errorf("%s: relative error %.3g (tol %.3g), max abs error %.3g (tol %.3g)", what, rel, tol, maxAbs,
			10*tol*max(scale, 1))
	}
}

// weight is a random pruned weight on the host and the device.
type weight struct {
	n, k                 int
	dense, packed, meta  []uint16
	dDense, dPack, dMeta *Buffer
}

func newWeight(t testing.TB, d *Device, rng *rand.Rand, dt checkpoint.DType, n, k int) *weight {
	w := &weight{n: n, k: k, dense: randPruned(rng, dt, n, k)}
	w.packed, w.meta = packAmpere(w.dense, n, k)
	w.dDense = upload16(t, d, w.dense)
	w.dPack = upload16(t, d, w.packed)
	w.dMeta = upload16(t, d, w.meta)
	return w
}

func (w *weight) free(t testing.TB) { freeAll(t, w.dDense, w.dPack, w.dMeta) }

func freeAll(t testing.TB, bufs ...*Buffer) {
	t.Helper()
	for _, b := range bufs {
		if err := b.Free(); err != nil {
			t.Error(err)
		}
	}
}

func alloc(t testing.TB, d *Device, n int) *Buffer {
	t.Helper()
	b, err := d.Alloc(int64(n))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGPUInfo(t *testing.T) {
	d := openGPU(t)
	info := d.Info()
	t.Logf("device: %v", info)
	t.Logf("dense backend: %s", d.DenseBackend())
	if info.Major < 8 || info.SMs <= 0 || info.MemBytes <= 0 || info.Driver < 11000 || info.Name == "" {
		t.Errorf("implausible Info %+v", info)
	}
	if d.DenseBackend() == "" {
		t.Error("empty DenseBackend")
	}
}

func TestGPUBuffers(t *testing.T) {
	d := openGPU(t)
	src := []byte("sparse tensor cores, 2:4")
	b, err := d.Upload(src)
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != int64(len(src)) {
		t.Errorf("Len = %d", b.Len())
	}
	got := make([]byte, len(src))
	if err := b.Download(got); err != nil || string(got) != string(src) {
		t.Fatalf("Download = %q, %v", got, err)
	}
	if err := b.Download(make([]byte, len(src)+1)); !errors.Is(err, ErrArgument) {
		t.Errorf("oversized Download: %v", err)
	}
	if err := b.Free(); err != nil {
		t.Fatal(err)
	}
	if err := b.Free(); !errors.Is(err, ErrClosed) {
		t.Errorf("double Free: %v", err)
	}
	if err := b.Download(got); !errors.Is(err, ErrClosed) {
		t.Errorf("Download after Free: %v", err)
	}
	// Operands are checked before any launch.
	y := poisoned(t, d, 32)
	x, p, m := alloc(t, d, 2*64), alloc(t, d, 32*64), alloc(t, d, 32*64/8)
	if err := d.SparseMatmul(SparseOperands{Y: y, X: x, Packed: p, Meta: m, DType: checkpoint.BF16, M: 1, N: 32, K: 64}); err != nil {
		t.Errorf("valid SparseMatmul: %v", err)
	}
	if err := d.SparseMatmul(SparseOperands{Y: y, X: x, Packed: p, Meta: m, DType: checkpoint.BF16, M: 2, N: 32, K: 64}); !errors.Is(err, ErrArgument) {
		t.Errorf("SparseMatmul with short x and y: %v", err)
	}
	if err := d.SparseMatmul(SparseOperands{Y: x, X: x, Packed: p, Meta: m, DType: checkpoint.BF16, M: 1, N: 32, K: 64}); !errors.Is(err, ErrArgument) {
		t.Errorf("SparseMatmul with y == x: %v", err)
	}
	if err := d.SparseMatmul(SparseOperands{Y: y, X: x, Packed: p, Meta: nil, DType: checkpoint.BF16, M: 1, N: 32, K: 64}); !errors.Is(err, ErrArgument) {
		t.Errorf("SparseMatmul with nil meta: %v", err)
	}
	if err := d.DecodeAmpere(DecodeOperands{W: p, Packed: p, Meta: m, DType: checkpoint.F16, N: 32, K: 64}); !errors.Is(err, ErrArgument) {
		t.Errorf("DecodeAmpere in place: %v", err)
	}
	other := openGPU(t)
	if err := other.DenseMatmul(DenseOperands{Y: y, X: x, W: p, DType: checkpoint.BF16, M: 1, N: 32, K: 64}); !errors.Is(err, ErrArgument) {
		t.Errorf("buffers of another Device: %v", err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := y.Download(make([]byte, 4)); !errors.Is(err, ErrClosed) {
		t.Errorf("Download after Close: %v", err)
	}
	if _, err := d.Alloc(8); !errors.Is(err, ErrClosed) {
		t.Errorf("Alloc after Close: %v", err)
	}
}

// runAll runs the sparse kernel, the default dense path and the own dense
// kernel for m tokens and returns their outputs.
func runAll(t testing.TB, d *Device, dt checkpoint.DType, w *weight, x *Buffer, m int) (sparse, dense, own []float32) {
	t.Helper()
	n, k := w.n, w.k
	ys, yd, yo := poisoned(t, d, m*n), poisoned(t, d, m*n), poisoned(t, d, m*n)
	defer freeAll(t, ys, yd, yo)
	if err := d.SparseMatmul(SparseOperands{Y: ys, X: x, Packed: w.dPack, Meta: w.dMeta, DType: dt, M: m, N: n, K: k}); err != nil {
		t.Fatal(err)
	}
	if err := d.DenseMatmul(DenseOperands{Y: yd, X: x, W: w.dDense, DType: dt, M: m, N: n, K: k}); err != nil {
		t.Fatal(err)
	}
	if err := d.dense("DenseMatmul", DenseOperands{Y: yo, X: x, W: w.dDense, DType: dt, M: m, N: n, K: k}, true); err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return downloadF32(t, ys, m*n), downloadF32(t, yd, m*n), downloadF32(t, yo, m*n)
}

// checkDecode decodes w on the GPU and compares bit for bit.
func checkDecode(t testing.TB, d *Device, dt checkpoint.DType, w *weight) {
	t.Helper()
	out := alloc(t, d, 2*w.n*w.k)
	defer freeAll(t, out)
	if err := out.memset(0xa5); err != nil {
		t.Fatal(err)
	}
	if err := d.DecodeAmpere(DecodeOperands{W: out, Packed: w.dPack, Meta: w.dMeta, DType: dt, N: w.n, K: w.k}); err != nil {
		t.Fatal(err)
	}
	got := download16(t, out, w.n*w.k)
	for i := range got {
		if got[i] != w.dense[i] {
			t.Fatalf("DecodeAmpere %d×%d: element [%d][%d] = %#04x, want %#04x", w.n, w.k, i/w.k, i%w.k,
				got[i], w.dense[i])
		}
	}
}

// TestGPUSmall covers odd shapes fully against a float64 reference: m not
// a multiple of the tile, n % 64 == 32 (a half-empty last tile), one k-block.
// The sanitizer runs use this test.
func TestGPUSmall(t *testing.T) {
	d := openGPU(t)
	rng := testRand(t)
	for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
		for _, s := range []struct{ m, n, k int }{
			{1, 32, 64}, {37, 96, 192}, {130, 160, 320}, {64, 64, 128}, {200, 32, 320},
		} {
			t.Run(fmt.Sprintf("%v/m%d_n%d_k%d", dt, s.m, s.n, s.k), func(t *testing.T) {
				w := newWeight(t, d, rng, dt, s.n, s.k)
				defer w.free(t)
				xs := randDense(rng, dt, s.m*s.k)
				x := upload16(t, d, xs)
				defer freeAll(t, x)
				checkDecode(t, d, dt, w)
				sparse, dense, own := runAll(t, d, dt, w, x, s.m)
				cols := make([]int, s.n)
				for i := range cols {
					cols[i] = i
				}
				ref := refColumns(dt, xs, w.dense, s.m, s.k, cols)
				checkClose(t, "sparse vs float64", s.k, sparse, ref)
				checkClose(t, "dense vs float64", s.k, dense, ref)
				checkClose(t, "own dense vs float64", s.k, own, ref)
			})
		}
	}
}

// TestGPUDegenerate covers weights whose groups hold fewer than 2 nonzeros:
// all zero (the output must be exactly zero everywhere) and one nonzero at
// each position.
func TestGPUDegenerate(t *testing.T) {
	d := openGPU(t)
	rng := testRand(t)
	const m, n, k = 70, 96, 256
	for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
		xs := randDense(rng, dt, m*k)
		x := upload16(t, d, xs)
		for _, pos := range []int{-1, 0, 1, 2, 3, 4} { // -1: all zero; 4: the position varies per group
			dense := make([]uint16, n*k)
			if pos >= 0 {
				for g := 0; g < n*k/4; g++ {
					p := pos
					if pos == 4 {
						p = g % 4
					}
					dense[4*g+p] = randValue(rng, dt)
				}
			}
			w := &weight{n: n, k: k, dense: dense}
			w.packed, w.meta = packAmpere(dense, n, k)
			w.dDense, w.dPack, w.dMeta = upload16(t, d, w.dense), upload16(t, d, w.packed), upload16(t, d, w.meta)
			checkDecode(t, d, dt, w)
			sparse, dense32, own := runAll(t, d, dt, w, x, m)
			if pos < 0 {
				for i, v := range sparse {
					if v != 0 {
						t.Fatalf("%v all-zero weight: y[%d] = %v", dt, i, v)
					}
				}
			}
			cols := []int{0, 1, 16, 31, 63, n - 1}
			ref := refColumns(dt, xs, w.dense, m, k, cols)
			checkClose(t, fmt.Sprintf("%v pos %d sparse", dt, pos), k, pickColumns(sparse, m, n, cols), ref)
			checkClose(t, fmt.Sprintf("%v pos %d sparse vs dense", dt, pos), k, sparse, dense32)
			checkClose(t, fmt.Sprintf("%v pos %d own vs dense", dt, pos), k, own, dense32)
			w.free(t)
		}
		freeAll(t, x)
	}
}

// TestGPUCorruptMeta flips one metadata nibble to another valid value and
// checks that the comparison catches it, in exactly the affected output
// column, for a row read with selector 0 and one read with selector 1.
func TestGPUCorruptMeta(t *testing.T) {
	d := openGPU(t)
	rng := testRand(t)
	// m = 48 runs the decode kernels; m = 300 the prefill kernel on
	// sm_90a, the tiled one elsewhere.
	const n, k = 64, 128
	ms := []int{48, 300}
	dt := checkpoint.BF16
	xs := randDense(rng, dt, ms[len(ms)-1]*k)
	x := upload16(t, d, xs)
	defer freeAll(t, x)
	for _, row := range []int{5, 21, 40} {
		w := newWeight(t, d, rng, dt, n, k)
		// Find a group of this row with two nonzeros.
		g := -1
		for c := 0; c < k/4; c++ {
			grp := w.dense[row*k+4*c : row*k+4*c+4]
			cnt := 0
			for _, v := range grp {
				if v != 0 {
					cnt++
				}
			}
			if cnt == 2 {
				g = c
				break
			}
		}
		if g < 0 {
			t.Fatalf("row %d has no group with 2 nonzeros", row)
		}
		idx := metaIndex(row, g/4, n)
		shift := 4 * (g % 4)
		old := (w.meta[idx] >> shift) & 0xf
		nib := uint16(0x4)
		if old == 0x4 {
			nib = 0xe
		}
		bad := append([]uint16(nil), w.meta...)
		bad[idx] = bad[idx]&^(0xf<<shift) | nib<<shift
		dBad := upload16(t, d, bad)

		for _, m := range ms {
			ys := poisoned(t, d, m*n)
			if err := d.SparseMatmul(SparseOperands{Y: ys, X: x, Packed: w.dPack, Meta: dBad, DType: dt, M: m, N: n, K: k}); err != nil {
				t.Fatal(err)
			}
			got := downloadF32(t, ys, m*n)
			yd := poisoned(t, d, m*n)
			if err := d.DenseMatmul(DenseOperands{Y: yd, X: x, W: w.dDense, DType: dt, M: m, N: n, K: k}); err != nil {
				t.Fatal(err)
			}
			want := downloadF32(t, yd, m*n)
			for c := 0; c < n; c++ {
				rel, _ := diff(pickColumns(got, m, n, []int{c}), pickColumns(want, m, n, []int{c}))
				if c == row && rel <= tolerance(k) {
					t.Errorf("m=%d row %d: nibble %#x→%#x in group %d not detected (relative error %.3g)", m, row, old, nib, g, rel)
				}
				if c != row && rel > tolerance(k) {
					t.Errorf("m=%d row %d corrupted, but column %d differs too (relative error %.3g)", m, row, c, rel)
				}
			}
			freeAll(t, ys, yd)
		}
		// The decoded weight differs in exactly that group.
		out := alloc(t, d, 2*n*k)
		if err := d.DecodeAmpere(DecodeOperands{W: out, Packed: w.dPack, Meta: dBad, DType: dt, N: n, K: k}); err != nil {
			t.Fatal(err)
		}
		dec := download16(t, out, n*k)
		changed := false
		for i := range dec {
			inGroup := i/k == row && (i%k)/4 == g
			if dec[i] != w.dense[i] {
				if !inGroup {
					t.Fatalf("row %d: decoded element [%d][%d] changed outside group %d", row, i/k, i%k, g)
				}
				changed = true
			}
		}
		if !changed {
			t.Errorf("row %d: decoding the corrupted meta gives the original weight", row)
		}
		freeAll(t, dBad, out)
		w.free(t)
	}
}

// modelShape is a projection shape (n = out, k = in).
type modelShape struct {
	model, proj string
	n, k        int
}

// modelShapes returns the projection shapes of TinyLlama-1.1B and
// Llama-3-8B.
func modelShapes() []modelShape {
	return []modelShape{
		{"tinyllama", "q_o", 2048, 2048},
		{"tinyllama", "k_v", 256, 2048},
		{"tinyllama", "gate_up", 5632, 2048},
		{"tinyllama", "down", 2048, 5632},
		{"llama3-8b", "q_o", 4096, 4096},
		{"llama3-8b", "k_v", 1024, 4096},
		{"llama3-8b", "gate_up", 14336, 4096},
		{"llama3-8b", "down", 4096, 14336},
	}
}

// TestGPUModels runs every projection shape of TinyLlama and Llama-3-8B,
// BF16 and F16, for several token counts: sparse vs cuBLASLt (or the own
// kernel) over the whole output, own kernel vs sparse, sampled columns vs a
// float64 reference, and DecodeAmpere bit for bit. -short keeps TinyLlama
// and three token counts.
func TestGPUModels(t *testing.T) {
	d := openGPU(t)
	rng := testRand(t)
	ms := []int{1, 16, 64, 256, 1000, 4096}
	if testing.Short() {
		ms = []int{1, 64, 1000}
	}
	maxM := ms[len(ms)-1]
	t.Logf("dense backend: %s", d.DenseBackend())
	for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
		for _, s := range modelShapes() {
			if testing.Short() && s.model != "tinyllama" {
				continue
			}
			t.Run(fmt.Sprintf("%v/%s/%s_%dx%d", dt, s.model, s.proj, s.n, s.k), func(t *testing.T) {
				w := newWeight(t, d, rng, dt, s.n, s.k)
				defer w.free(t)
				checkDecode(t, d, dt, w)
				xs := randDense(rng, dt, maxM*s.k)
				x := upload16(t, d, xs)
				defer freeAll(t, x)
				cols := []int{0, 17, 31, s.n / 2, s.n - 1, rng.IntN(s.n)}
				for _, m := range ms {
					sparse, dense, own := runAll(t, d, dt, w, x, m)
					checkClose(t, fmt.Sprintf("m=%d sparse vs DenseMatmul", m), s.k, sparse, dense)
					checkClose(t, fmt.Sprintf("m=%d own dense vs sparse", m), s.k, own, sparse)
					ref := refColumns(dt, xs, w.dense, m, s.k, cols)
					checkClose(t, fmt.Sprintf("m=%d sparse vs float64", m), s.k, pickColumns(sparse, m, s.n, cols), ref)
					rel, maxAbs := diff(sparse, dense)
					t.Logf("m=%-4d sparse vs dense: rel %.2e max %.2e", m, rel, maxAbs)
				}
			})
		}
	}
}
