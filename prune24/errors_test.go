package prune24

import (
	"errors"
	"testing"
)

func TestOffsetRows(t *testing.T) {
	other := errors.New("no row")
	tests := []struct {
		err  error
		want string
		is   error
	}{
		{&NaNError{Row: 3, Col: 9}, "row 103, column 9: NaN", ErrNaN},
		{&StructureError{Row: 0, Col: 4, Rule: Rule24, Nonzero: 3}, "row 100, column 4: 3 nonzeros in a 2:4 group", ErrNot24},
		{&MetaError{Row: 1, Group: 2, Nibble: 0xB, Rule: Rule24}, "row 101, group 2: meta nibble 0xb is not a valid 2:4 index pair", ErrMeta},
		{&BitmaskError{Row: 2, Group: 1, Bits: 3}, "row 102, group 1: 3 mask bits set, want 2", ErrBitmask},
		{&RuleError{Row: 5, Col: 1, Got: 1, Want: 0}, "row 105, column 1: bits 0x1, the rule gives 0x0", ErrRule},
		{other, "no row", other},
	}
	for _, tt := range tests {
		got := OffsetRows(tt.err, 100)
		if got.Error() != tt.want || !errors.Is(got, tt.is) {
			t.Errorf("OffsetRows(%v) = %v, want %q", tt.err, got, tt.want)
		}
	}
	orig := &NaNError{Row: 3}
	OffsetRows(orig, 100)
	if orig.Row != 3 {
		t.Error("OffsetRows changed its argument")
	}
	if OffsetRows(nil, 5) != nil {
		t.Error("OffsetRows(nil) is not nil")
	}
}
