package kernels

import (
	"errors"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// TestGPUGraph captures the decode kernel (a split-K plan, whose tickets
// must reset for the next replay), the general sparse kernel and the dense
// baseline into one graph, replays it three times and checks each output
// bit for bit against the same calls made directly; then checks that a
// capture whose work fails, or that waits for the device, returns an
// error and leaves the device working.
func TestGPUGraph(t *testing.T) {
	d := openGPU(t)
	rng := testRand(t)
	const m, n, k = 16, 1024, 4096
	w := newWeight(t, d, rng, checkpoint.BF16, n, k)
	defer w.free(t)
	x := upload16(t, d, randDense(rng, checkpoint.BF16, m*k))
	defer freeAll(t, x)
	split := sparseChoice{kernel: sparseDecode, decode: launchplan.Options{Slices: 8, Warpgroup: -1}}
	general := sparseChoice{kernel: sparseTiled}
	wantSplit := runSparse(t, d, checkpoint.BF16, w, x, m, split)
	wantGeneral := runSparse(t, d, checkpoint.BF16, w, x, m, general)
	ys := [3]*Buffer{poisoned(t, d, m*n), poisoned(t, d, m*n), poisoned(t, d, m*n)}
	defer freeAll(t, ys[:]...)
	if err := d.DenseMatmul(DenseOperands{Y: ys[2], X: x, W: w.dDense, DType: checkpoint.BF16, M: m, N: n, K: k}); err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	wantDense := downloadF32(t, ys[2], m*n)
	for _, y := range ys {
		if err := y.memset(0xff); err != nil {
			t.Fatal(err)
		}
	}
	g, err := d.Capture(func() error {
		return errors.Join(
			d.sparse("SparseMatmul", SparseOperands{Y: ys[0], X: x, Packed: w.dPack, Meta: w.dMeta, DType: checkpoint.BF16, M: m, N: n, K: k}, split),
			d.sparse("SparseMatmul", SparseOperands{Y: ys[1], X: x, Packed: w.dPack, Meta: w.dMeta, DType: checkpoint.BF16, M: m, N: n, K: k}, general),
			d.DenseMatmul(DenseOperands{Y: ys[2], X: x, W: w.dDense, DType: checkpoint.BF16, M: m, N: n, K: k}))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	}()
	// Captured, not run: the outputs are still poisoned.
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if got := downloadF32(t, ys[0], m*n); bitDiff(got, wantSplit) < 0 {
		t.Error("the capture ran the decode kernel")
	}
	for replay := range 3 {
		for _, y := range ys {
			if err := y.memset(0xff); err != nil {
				t.Fatal(err)
			}
		}
		if err := g.Launch(); err != nil {
			t.Fatal(err)
		}
		if err := d.Synchronize(); err != nil {
			t.Fatal(err)
		}
		for i, want := range [][]float32{wantSplit, wantGeneral, wantDense} {
			if j := bitDiff(downloadF32(t, ys[i], m*n), want); j >= 0 {
				t.Errorf("replay %d, output %d: y[%d] differs from the direct call's", replay, i, j)
			}
		}
	}

	boom := errors.New("boom")
	if _, err := d.Capture(func() error { return boom }); !errors.Is(err, boom) {
		t.Errorf("capture of failing work: %v, want it wrapped", err)
	}
	if _, err := d.Capture(func() error { return d.Synchronize() }); err == nil {
		t.Error("a capture that waits for the device succeeded")
	}
	if _, err := d.Capture(nil); !errors.Is(err, ErrArgument) {
		t.Errorf("nil capture: %v", err)
	}
	if got := runSparse(t, d, checkpoint.BF16, w, x, m, split); bitDiff(got, wantSplit) >= 0 {
		t.Error("the device computes differently after failed captures")
	}
	if err := g.Close(); err != nil {
		t.Error(err)
	}
	if err := g.Launch(); !errors.Is(err, ErrArgument) {
		t.Errorf("launch of a closed graph: %v", err)
	}
}
