package prune24

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// negZeroBits returns the bits of -0.0 in dt.
func negZeroBits(dt checkpoint.DType) uint32 {
	if dt == checkpoint.F32 {
		return 0x8000_0000
	}
	return 0x8000
}

// mustPrune returns src pruned by rule.
func mustPrune(t testing.TB, src []byte, dt checkpoint.DType, cols int, rule Rule) []byte {
	t.Helper()
	dst := make([]byte, len(src))
	if _, err := Prune(dst, src, dt, cols, 0, rule); err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 600 {
		dt := allDTypes[iter%3]
		rule := Rule(iter / 3 % 2)
		rows, cols := randShape(rng)
		pruned := mustPrune(t, randMatrix(rng, dt, rows, cols), dt, cols, rule)
		if err := Check(pruned, dt, cols, rule); err != nil {
			t.Fatalf("%v %v: Check(pruned) = %v", dt, rule, err)
		}
		// -0.0 counts as zero: fill every zero slot with -0.0.
		withNeg := bytes.Clone(pruned)
		for i := 0; i < rows*cols; i++ {
			if getBits(withNeg, i, dt) == 0 {
				putBits(withNeg, i, dt, negZeroBits(dt))
			}
		}
		if err := Check(withNeg, dt, cols, rule); err != nil {
			t.Fatalf("%v %v: Check with -0.0 zeros = %v", dt, rule, err)
		}
		// Plant a violation: fill a group (a pair for Rule12) with nonzeros
		// (sometimes NaN, which counts as nonzero), after an earlier
		// violation-free prefix.
		g := groupOf(rule)
		e := rng.IntN(rows*cols/g) * g
		n := g/2 + 1 + rng.IntN(g/2)
		for _, i := range rng.Perm(g)[:n] {
			v := fromFloat32(float32(1+rng.IntN(5)), dt)
			if rng.IntN(8) == 0 {
				v = nanBits(rng, dt)
			}
			putBits(withNeg, e+i, dt, v)
		}
		n = 0 // count again: the planted values may land on nonzeros
		for i := 0; i < g; i++ {
			if getBits(withNeg, e+i, dt)&magOf(dt) != 0 {
				n++
			}
		}
		err := Check(withNeg, dt, cols, rule)
		var se *StructureError
		if !errors.As(err, &se) || !errors.Is(err, ErrNot24) {
			t.Fatalf("%v %v: Check = %v, want a StructureError", dt, rule, err)
		}
		if want := (StructureError{Row: e / cols, Col: e % cols, Rule: rule, Nonzero: n}); *se != want {
			t.Fatalf("%v %v: %+v, want %+v", dt, rule, *se, want)
		}
	}
}

func TestCheckErrors(t *testing.T) {
	tests := []struct {
		data []byte
		dt   checkpoint.DType
		cols int
		rule Rule
		want error
	}{
		{make([]byte, 8), checkpoint.DType("I8"), 4, Rule24, ErrDType},
		{make([]byte, 8), checkpoint.F16, 4, Rule(-1), ErrInvalidRule},
		{make([]byte, 8), checkpoint.F16, 3, Rule24, ErrShape},
		{make([]byte, 10), checkpoint.F16, 4, Rule24, ErrShape},
		{bf16s(1, 2, 3, 0), checkpoint.BF16, 4, Rule24, ErrNot24},
		{bf16s(1, 2, 0, 0), checkpoint.BF16, 4, Rule12, ErrNot24},
		{bf16s(1, 0, 0, 3), checkpoint.BF16, 4, Rule12, nil},
		{bf16s(1, 0, 0, 3, 0, 0, 0, 0), checkpoint.BF16, 4, Rule24, nil},
	}
	for _, tt := range tests {
		if err := Check(tt.data, tt.dt, tt.cols, tt.rule); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("Check(% x, %v, %d, %v) = %v, want %v", tt.data, tt.dt, tt.cols, tt.rule, err, tt.want)
		}
	}
	err := &StructureError{Row: 3, Col: 8, Rule: Rule24, Nonzero: 3}
	if got, want := err.Error(), "row 3, column 8: 3 nonzeros in a 2:4 group"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestCheckRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for iter := range 300 {
		dt := allDTypes[iter%3]
		rule := Rule(iter / 3 % 2)
		rows, cols := randShape(rng)
		if iter%50 == 0 { // more than one CheckRule chunk
			rows, cols = 3*checkRuleChunk/(4*dt.Size())/64+1, 64*4
		}
		orig := randMatrix(rng, dt, rows, cols)
		pruned := mustPrune(t, orig, dt, cols, rule)
		if err := CheckRule(pruned, orig, dt, cols, rule); err != nil {
			t.Fatalf("%v %v: CheckRule = %v", dt, rule, err)
		}
		// Change one element (a bit flip), and expect it reported.
		i := rng.IntN(rows * cols)
		bad := bytes.Clone(pruned)
		want := getBits(pruned, i, dt)
		got := want ^ 1<<rng.IntN(8*dt.Size())
		putBits(bad, i, dt, got)
		err := CheckRule(bad, orig, dt, cols, rule)
		var re *RuleError
		if !errors.As(err, &re) || !errors.Is(err, ErrRule) {
			t.Fatalf("%v %v: CheckRule = %v, want a RuleError", dt, rule, err)
		}
		if w := (RuleError{Row: i / cols, Col: i % cols, Got: got, Want: want}); *re != w {
			t.Fatalf("%v %v: %+v, want %+v", dt, rule, *re, w)
		}
		// A NaN in the original is reported as such, at its place.
		putBits(orig, i, dt, nanBits(rng, dt))
		var ne *NaNError
		if err := CheckRule(pruned, orig, dt, cols, rule); !errors.As(err, &ne) || *ne != (NaNError{Row: i / cols, Col: i % cols}) {
			t.Fatalf("%v %v: CheckRule with NaN at %d = %v", dt, rule, i, err)
		}
	}
	if err := CheckRule(make([]byte, 8), make([]byte, 16), checkpoint.BF16, 4, Rule24); !errors.Is(err, ErrShape) {
		t.Errorf("length mismatch: %v, want ErrShape", err)
	}
	if err := CheckRule(nil, nil, checkpoint.F32, 0, Rule24); err != nil {
		t.Errorf("empty: %v", err)
	}
}
