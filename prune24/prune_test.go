package prune24

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// bf16s returns the BF16 bytes of the values, which must be exact.
func bf16s(vals ...float32) []byte {
	b := make([]byte, 2*len(vals))
	for i, v := range vals {
		putBits(b, i, checkpoint.BF16, math.Float32bits(v)>>16)
	}
	return b
}

func TestPruneKnown(t *testing.T) {
	inf := float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	tests := []struct {
		name    string
		rule    Rule
		in, out []float32
		kept    float64
	}{
		{"largest two", Rule24, []float32{1, -3, 2, 0.5}, []float32{0, -3, 2, 0}, 5},
		{"all tie", Rule24, []float32{1, -1, 1, -1}, []float32{1, -1, 0, 0}, 2},
		{"tie for second", Rule24, []float32{1, 4, -1, 1}, []float32{1, 4, 0, 0}, 5},
		{"tie between last two", Rule24, []float32{0, 0, 7, -7}, []float32{0, 0, 7, -7}, 14},
		{"infinities", Rule24, []float32{inf, 65504, -inf, 3e38}, []float32{inf, 0, -inf, 0}, math.Inf(1)},
		{"negative zero kept becomes +0", Rule24, []float32{0, negZero, 5, 0}, []float32{0, 0, 5, 0}, 5},
		{"all zero", Rule24, []float32{negZero, negZero, 0, negZero}, []float32{0, 0, 0, 0}, 0},
		{"one nonzero", Rule24, []float32{0, 0, 0, -2}, []float32{0, 0, 0, -2}, 2},
		{"subnormal", Rule24, []float32{0x1p-130, 0, -0x1p-129, 0x1p-133}, []float32{0x1p-130, 0, -0x1p-129, 0}, 0x1p-130 + 0x1p-129},
		{"pairs", Rule12, []float32{1, -3, 2, 2}, []float32{0, -3, 2, 0}, 5},
		{"pair of zeros", Rule12, []float32{negZero, negZero, -1, inf}, []float32{0, 0, 0, inf}, math.Inf(1)},
	}
	for _, tt := range tests {
		for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F32} {
			t.Run(fmt.Sprintf("%s/%v", tt.name, dt), func(t *testing.T) {
				src, want := make([]byte, 4*dt.Size()), make([]byte, 4*dt.Size())
				for i := range 4 {
					putBits(src, i, dt, bitsOf(tt.in[i], dt))
					putBits(want, i, dt, bitsOf(tt.out[i], dt))
				}
				dst := make([]byte, len(src))
				st, err := Prune(dst, src, dt, 4, 0, tt.rule)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(dst, want) {
					t.Errorf("Prune(% x) = % x, want % x", src, dst, want)
				}
				if st.Kept != tt.kept || !close(st.Kept, decodedSum(want, dt)) {
					t.Errorf("Kept = %v, want %v", st.Kept, tt.kept)
				}
				if !close(st.Total, decodedSum(src, dt)) {
					t.Errorf("Total = %v, want %v", st.Total, decodedSum(src, dt))
				}
			})
		}
	}
}

// bitsOf returns the bits of f in dt; for BF16 f must be exact or the
// top half is taken (the tests use exact values and infinities).
func bitsOf(f float32, dt checkpoint.DType) uint32 {
	if dt == checkpoint.BF16 {
		return math.Float32bits(f) >> 16
	}
	return math.Float32bits(f)
}

// decodedSum returns Σ|x| over the elements of b.
func decodedSum(b []byte, dt checkpoint.DType) float64 {
	s := 0.0
	for i := 0; i < len(b)/dt.Size(); i++ {
		s += math.Abs(slowValue(getBits(b, i, dt), dt))
	}
	return s
}

// statsTol is the relative accuracy that Stats documents for inputs of up
// to 2^27 elements.
const statsTol = 1e-6

// close reports whether a and b agree to statsTol relative, infinities
// matching.
func close(a, b float64) bool {
	if math.IsInf(a, 0) || math.IsInf(b, 0) {
		return a == b
	}
	return math.Abs(a-b) <= statsTol*math.Max(math.Abs(a), math.Abs(b))
}

// randShape returns a random rows and a cols that is a multiple of 4.
func randShape(rng *rand.Rand) (rows, cols int) {
	return 1 + rng.IntN(9), 4 * (1 + rng.IntN(12))
}

var allDTypes = []checkpoint.DType{checkpoint.F16, checkpoint.BF16, checkpoint.F32}

func TestPruneProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 1))
	for iter := range 600 {
		dt := allDTypes[iter%3]
		rule := Rule(iter / 3 % 2)
		rows, cols := randShape(rng)
		src := randMatrix(rng, dt, rows, cols)
		rowBase := rng.IntN(100)
		want, wantSt, err := refPrune(src, dt, cols, rowBase, rule)
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, len(src))
		st, err := Prune(dst, src, dt, cols, rowBase, rule)
		if err != nil {
			t.Fatalf("%v %v %d×%d: %v", dt, rule, rows, cols, err)
		}
		if !bytes.Equal(dst, want) {
			i := firstDiff(dst, want, dt)
			t.Fatalf("%v %v %d×%d: element %d (group % x) = %#x, want %#x", dt, rule, rows, cols, i,
				src[i/4*4*dt.Size():(i/4+1)*4*dt.Size()], getBits(dst, i, dt), getBits(want, i, dt))
		}
		if !close(st.Kept, wantSt.Kept) || !close(st.Total, wantSt.Total) {
			t.Fatalf("%v %v: stats %+v, want %+v", dt, rule, st, wantSt)
		}
		// In place gives the same.
		inPlace := bytes.Clone(src)
		if _, err := Prune(inPlace, inPlace, dt, cols, rowBase, rule); err != nil || !bytes.Equal(inPlace, want) {
			t.Fatalf("%v %v: in place differs (err %v)", dt, rule, err)
		}
	}
}

// firstDiff returns the index of the first element where a and b differ.
func firstDiff(a, b []byte, dt checkpoint.DType) int {
	for i := 0; i < len(a)/dt.Size(); i++ {
		if getBits(a, i, dt) != getBits(b, i, dt) {
			return i
		}
	}
	return -1
}

// nanBits returns a NaN of dt with a random payload and sign.
func nanBits(rng *rand.Rand, dt checkpoint.DType) uint32 {
	switch dt {
	case checkpoint.F16:
		return 0x7C00 | (1 + rng.Uint32N(0x3FF)) | rng.Uint32N(2)<<15
	case checkpoint.BF16:
		return 0x7F80 | (1 + rng.Uint32N(0x7F)) | rng.Uint32N(2)<<15
	}
	return 0x7F80_0000 | (1 + rng.Uint32N(0x7F_FFFF)) | rng.Uint32N(2)<<31
}

func TestPruneNaN(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for iter := range 300 {
		dt := allDTypes[iter%3]
		rule := Rule(iter / 3 % 2)
		rows, cols := randShape(rng)
		src := randMatrix(rng, dt, rows, cols)
		first := rng.IntN(rows * cols)
		putBits(src, first, dt, nanBits(rng, dt))
		for range rng.IntN(3) { // more NaNs later
			putBits(src, first+rng.IntN(rows*cols-first), dt, nanBits(rng, dt))
		}
		rowBase := rng.IntN(1000)
		_, err := Prune(make([]byte, len(src)), src, dt, cols, rowBase, rule)
		var ne *NaNError
		if !errors.As(err, &ne) || !errors.Is(err, ErrNaN) {
			t.Fatalf("%v: error %v, want a NaNError", dt, err)
		}
		if want := (NaNError{Row: rowBase + first/cols, Col: first % cols}); *ne != want {
			t.Fatalf("%v %d×%d: NaN at %+v, want %+v", dt, rows, cols, *ne, want)
		}
	}
	err := &NaNError{Row: 12, Col: 40}
	if got, want := err.Error(), "row 12, column 40: NaN"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestPruneErrors(t *testing.T) {
	b8 := make([]byte, 8)
	tests := []struct {
		name     string
		dst, src []byte
		dt       checkpoint.DType
		cols     int
		rule     Rule
		want     error
	}{
		{"bad dtype", b8, b8, checkpoint.DType("I8"), 4, Rule24, ErrDType},
		{"bad rule", b8, b8, checkpoint.BF16, 4, Rule(2), ErrInvalidRule},
		{"cols not multiple of 4", b8, b8, checkpoint.BF16, 2, Rule24, ErrShape},
		{"negative cols", b8, b8, checkpoint.BF16, -4, Rule24, ErrShape},
		{"partial row", make([]byte, 6), make([]byte, 6), checkpoint.F16, 4, Rule24, ErrShape},
		{"partial row f32", b8, b8, checkpoint.F32, 4, Rule24, ErrShape},
		{"dst too short", make([]byte, 4), b8, checkpoint.BF16, 4, Rule24, ErrShape},
		{"dst too long", make([]byte, 16), b8, checkpoint.BF16, 4, Rule24, ErrShape},
		{"zero cols with data", b8, b8, checkpoint.BF16, 0, Rule24, ErrShape},
		{"huge cols", b8, b8, checkpoint.F32, math.MaxInt &^ 3, Rule24, ErrShape},
		{"zero cols empty", nil, nil, checkpoint.BF16, 0, Rule24, nil},
		{"no rows", nil, nil, checkpoint.F32, 8, Rule24, nil},
	}
	for _, tt := range tests {
		_, err := Prune(tt.dst, tt.src, tt.dt, tt.cols, 0, tt.rule)
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%s: error %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestStats(t *testing.T) {
	tests := []struct {
		s    Stats
		want float64
	}{
		{Stats{}, 1},
		{Stats{Kept: 3, Total: 4}, 0.75},
		{Stats{Kept: 0, Total: 4}, 0},
		{Stats{Kept: math.Inf(1), Total: math.Inf(1)}, 1},
		{Stats{Kept: 1, Total: math.Inf(1)}, 0},
	}
	for _, tt := range tests {
		if got := tt.s.Fraction(); got != tt.want {
			t.Errorf("%+v.Fraction() = %v, want %v", tt.s, got, tt.want)
		}
	}
	s := Stats{Kept: 1, Total: 2}
	s.Add(Stats{Kept: 0.5, Total: 4})
	if s != (Stats{Kept: 1.5, Total: 6}) {
		t.Errorf("Add: %+v, want {1.5 6}", s)
	}
}
