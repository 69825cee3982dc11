package verify

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/prune24"
)

func TestProductDiff(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	tests := []struct {
		name      string
		s, d      []float64
		nonFinite int
		mismatch  string // "" for none
		rel       float64
	}{
		{"finite, equal", []float64{1, 2}, []float64{1, 2}, 0, "", 0},
		{"finite, differing", []float64{3, 4}, []float64{0, 4}, 0, "", 3.0 / 4},
		{"+Inf in both", []float64{inf, 2}, []float64{inf, 2}, 1, "", 0},
		{"-Inf in both", []float64{-inf, 2}, []float64{-inf, 2}, 1, "", 0},
		{"NaN in both", []float64{nan, 2}, []float64{nan, 2}, 1, "", 0},
		{"+Inf against -Inf", []float64{1, inf}, []float64{1, -inf}, 0, "row 1, token 0: the sparse product is +Inf, the dense product -Inf", 0},
		{"NaN against +Inf", []float64{nan}, []float64{inf}, 0, "row 0, token 0: the sparse product is NaN, the dense product +Inf", 0},
		{"finite against NaN", []float64{2, 0.5}, []float64{2, nan}, 0, "row 1, token 0: the sparse product is 0.5, the dense product NaN", 0},
		{"first mismatch kept", []float64{inf, nan}, []float64{1, 1}, 0, "row 0, token 0", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p productDiff
			for i := range tt.s {
				p.add(tt.s[i], tt.d[i], i, 0)
			}
			if p.nonFinite != tt.nonFinite {
				t.Errorf("nonFinite = %d, want %d", p.nonFinite, tt.nonFinite)
			}
			switch {
			case tt.mismatch == "" && p.mismatch != nil:
				t.Errorf("mismatch %v, want none", p.mismatch)
			case tt.mismatch != "" && (p.mismatch == nil || !strings.Contains(p.mismatch.Error(), tt.mismatch)):
				t.Errorf("mismatch %v, want %q", p.mismatch, tt.mismatch)
			}
			if tt.mismatch == "" && p.rel() != tt.rel {
				t.Errorf("rel = %g, want %g", p.rel(), tt.rel)
			}
		})
	}
}

// TestClassBits holds the bit test against decoding and classifying the
// value: every 16-bit code of BF16 and F16, and random F32 codes with the
// special ones.
func TestClassBits(t *testing.T) {
	b := make([]byte, 4)
	for u := range 1 << 16 {
		binary.LittleEndian.PutUint16(b, uint16(u))
		for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
			if got, want := classBitsOf(dt).class(b), classOf(decoded(t, b, dt)); got != want {
				t.Fatalf("%v %#04x: class %v, decoded %v", dt, u, got, want)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	codes := []uint32{0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x7F7FFFFF, 0, 0x80000000}
	for range 100000 {
		codes = append(codes, rng.Uint32())
	}
	f32 := classBitsOf(checkpoint.F32)
	for _, u := range codes {
		binary.LittleEndian.PutUint32(b, u)
		if got, want := f32.class(b), classOf(decoded(t, b, checkpoint.F32)); got != want {
			t.Fatalf("F32 %#08x: class %v, decoded %v", u, got, want)
		}
	}
}

// decoded returns the value of the element of type dt at the start of b.
func decoded(t *testing.T, b []byte, dt checkpoint.DType) float64 {
	var v [1]float64
	if err := prune24.DecodeFloat64(v[:], b[:dt.Size()], dt); err != nil {
		t.Fatal(err)
	}
	return v[0]
}

func TestWeightScanNote(t *testing.T) {
	cols := 4
	data := make([]byte, 2*cols*5) // BF16, 5 rows of zeros
	put := func(i int, u uint16) { binary.LittleEndian.PutUint16(data[2*i:], u) }
	put(1, 0x7F80)  // +Inf at row 0, column 1
	put(6, 0xFF80)  // -Inf at row 1, column 2
	put(19, 0x7FC1) // NaN at row 4, column 3
	var w weightScan
	w.scan(data[:2*cols*2], checkpoint.BF16, cols, 10)
	w.scan(data[2*cols*2:], checkpoint.BF16, cols, 12)
	want := "3 non-finite weight(s) (±Inf has the largest magnitude, so the rule keeps it): +Inf at row 10, column 1; -Inf at row 11, column 2; NaN at row 14, column 3"
	if got := w.note(); got != want {
		t.Errorf("note\n%q, want\n%q", got, want)
	}
	var many weightScan
	for r := range maxWeightPositions + 3 {
		many.scan(data[2:4], checkpoint.BF16, 1, r) // the +Inf, one row of one column at a time
	}
	if got := many.note(); !strings.HasSuffix(got, "; and 3 more") || strings.Count(got, "+Inf at") != maxWeightPositions {
		t.Errorf("note of %d: %q", maxWeightPositions+3, got)
	}
	if (&weightScan{}).note() != "" {
		t.Error("a scan that found nothing has a note")
	}
}
