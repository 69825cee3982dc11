package speed

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/prune24"
)

func TestCompare(t *testing.T) {
	want := make([]float32, 3<<20) // spans several parallel chunks
	for i := range want {
		want[i] = float32(i%97) - 48
	}
	got := append([]float32(nil), want...)
	if rel, err := compare(got, want, 1e-5); err != nil || rel != 0 {
		t.Errorf("equal: %v, %v", rel, err)
	}
	got[2<<20+5] = float32(math.NaN())
	if _, err := compare(got, want, 1e-5); !errors.Is(err, ErrWrong) {
		t.Errorf("a NaN (unwritten element) passed: %v", err)
	}
	got[2<<20+5] = want[2<<20+5] + 40
	if _, err := compare(got, want, 1e-5); !errors.Is(err, ErrWrong) {
		t.Errorf("one element off by 40 passed: %v", err)
	}
	copy(got, want)
	for i := range got {
		got[i] *= 1 + 1e-6
	}
	if rel, err := compare(got, want, 1e-5); err != nil || rel > 2e-6 {
		t.Errorf("1e-6 relative noise: %v, %v", rel, err)
	}
	if _, err := compare(got[:10], want, 1); !errors.Is(err, ErrWrong) {
		t.Errorf("length mismatch: %v", err)
	}
	if sumTolerance(14336) <= sumTolerance(64) || outTolerance(64, 2) != 8e-3 {
		t.Error("tolerances")
	}
	if finite(math.Inf(1)) != 0 || finite(math.NaN()) != 0 || finite(0.5) != 0.5 {
		t.Error("finite")
	}
}

func TestRandomHalves(t *testing.T) {
	for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
		b := randomHalves(dt, 3<<20+7, 42)
		if again := randomHalves(dt, 3<<20+7, 42); string(again) != string(b) {
			t.Fatalf("%v: not reproducible from the seed", dt)
		}
		neg := 0
		for i := 0; i < len(b); i += 2 {
			v := half(dt, binary.LittleEndian.Uint16(b[i:]))
			if a := math.Abs(v); !(a >= 0.25 && a < 2) {
				t.Fatalf("%v: value %d = %v outside ±[0.25, 2)", dt, i/2, v)
			}
			if v < 0 {
				neg++
			}
		}
		if frac := float64(neg) / float64(len(b)/2); frac < 0.49 || frac > 0.51 {
			t.Errorf("%v: %.3f negative", dt, frac)
		}
	}
}

func TestNewPrunedWeight(t *testing.T) {
	w, err := newPrunedWeight(checkpoint.BF16, 96, 128, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := prune24.Check(w.pruned, checkpoint.BF16, 128, prune24.Rule24); err != nil {
		t.Errorf("pruned weight is not 2:4: %v", err)
	}
	if err := prune24.CheckRule(w.pruned, w.dense, checkpoint.BF16, 128, prune24.Rule24); err != nil {
		t.Errorf("pruned weight does not follow the rule: %v", err)
	}
	dense := make([]byte, len(w.pruned))
	if err := prune24.UnpackAmpere(dense, w.packed, w.meta, checkpoint.BF16, 96, 128); err != nil || string(dense) != string(w.pruned) {
		t.Errorf("packed form does not decode to the pruned weight: %v", err)
	}
	odd, err := newPrunedWeight(checkpoint.F16, 48, 96, 3)
	if err != nil || odd.packed != nil {
		t.Errorf("48x96 does not fit our kernel, yet packed: %v", err)
	}
}

func TestSampleReference(t *testing.T) {
	m, n, k := 5, 12, 64
	x, w := randomHalves(checkpoint.BF16, m*k, 1), randomHalves(checkpoint.BF16, n*k, 2)
	y := make([]float32, m*n)
	for r := range m {
		for c := range n {
			var s float64
			for i := range k {
				s += half(checkpoint.BF16, binary.LittleEndian.Uint16(x[2*(r*k+i):])) *
					half(checkpoint.BF16, binary.LittleEndian.Uint16(w[2*(c*k+i):]))
			}
			y[r*n+c] = float32(s)
		}
	}
	if _, err := sampleReference(y, x, w, checkpoint.BF16, m, n, k); err != nil {
		t.Errorf("exact product: %v", err)
	}
	y[(m-1)*n+n-1] += 3 // the last element is always sampled
	if _, err := sampleReference(y, x, w, checkpoint.BF16, m, n, k); !errors.Is(err, ErrWrong) {
		t.Errorf("a wrong last element passed: %v", err)
	}
}
