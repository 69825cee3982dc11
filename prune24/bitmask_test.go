package prune24

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// TestBitmaskKnown packs a hand-made 2×12 BF16 matrix: 3 groups per row,
// so the last byte of every bitmask row has 4 padding bits.
func TestBitmaskKnown(t *testing.T) {
	d := bf16s(
		0, 5, 0, -6 /**/, 0, 0, 0, 0 /**/, 0, 0, 7, 0,
		1, 2, 0, 0 /**/, 0, 0, -3, 4 /**/, 0, 8, 0, 0,
	)
	// Row 0: group 0 keeps 1 and 3 (0b1010), group 1 the lowest zeros 0
	// and 1 (0b0011), group 2 the zero at 0 and the 7 at 2 (0b0101).
	// Row 1: 0b0011, 0b1100, and the zero at 0 with the 8 at 1 (0b0011).
	wantMask := []byte{0x3A, 0x05, 0xC3, 0x03}
	wantComp := bf16s(5, -6, 0, 0, 0, 7, 1, 2, -3, 4, 0, 8)
	cb, bb := BitmaskSizes(checkpoint.BF16, 2, 12)
	comp, mask := make([]byte, cb), make([]byte, bb)
	if err := PackBitmask(comp, mask, d, checkpoint.BF16, 2, 12); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mask, wantMask) {
		t.Errorf("bitmask = % x, want % x", mask, wantMask)
	}
	if !bytes.Equal(comp, wantComp) {
		t.Errorf("compressed = % x, want % x", comp, wantComp)
	}
	dense := make([]byte, len(d))
	if err := UnpackBitmask(dense, comp, mask, checkpoint.BF16, 2, 12); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dense, d) {
		t.Errorf("round trip = % x, want % x", dense, d)
	}
}

func TestBitmaskProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 24))
	for iter := range 600 {
		dt := allDTypes[iter%3]
		rows, cols := randShape(rng)
		var d []byte
		pruned := iter/3%2 == 0
		if pruned {
			d = mustPrune(t, randMatrix(rng, dt, rows, cols), dt, cols, Rule24)
		} else {
			d = randSparse(rng, dt, rows, cols, Rule24)
		}
		name := fmt.Sprintf("%v %d×%d pruned=%v", dt, rows, cols, pruned)
		wantC, wantB, err := refPackBitmask(d, dt, rows, cols)
		if err != nil {
			t.Fatalf("%s: reference: %v", name, err)
		}
		cb, bb := BitmaskSizes(dt, rows, cols)
		comp, mask := make([]byte, cb), make([]byte, bb)
		for i := range mask { // stale bytes must be overwritten
			mask[i] = 0xFF
		}
		if err := PackBitmask(comp, mask, d, dt, rows, cols); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(mask, wantB) {
			t.Fatalf("%s: bitmask % x, want % x", name, mask, wantB)
		}
		if !bytes.Equal(comp, wantC) {
			t.Fatalf("%s: compressed differs at element %d", name, firstDiff(comp, wantC, dt))
		}
		dense := make([]byte, len(d))
		if err := UnpackBitmask(dense, comp, mask, dt, rows, cols); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ref, err := refUnpackBitmask(comp, mask, dt, rows, cols)
		if err != nil {
			t.Fatalf("%s: reference unpack: %v", name, err)
		}
		if !bytes.Equal(dense, ref) {
			t.Fatalf("%s: UnpackBitmask differs from the reference at %d", name, firstDiff(dense, ref, dt))
		}
		// The selection keeps every nonzero, so the round trip is exact up
		// to -0.0 in slots that are not kept.
		want := bytes.Clone(d)
		for i := range rows * cols {
			if getBits(want, i, dt) == negZeroBits(dt) && getBits(dense, i, dt) == 0 {
				putBits(want, i, dt, 0)
			}
		}
		if !bytes.Equal(dense, want) {
			t.Fatalf("%s: round trip differs at element %d", name, firstDiff(dense, want, dt))
		}
	}
}

func TestPackBitmaskRejectsDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 9))
	for iter := range 60 {
		dt := allDTypes[iter%3]
		rows, cols := randShape(rng)
		d := mustPrune(t, randMatrix(rng, dt, rows, cols), dt, cols, Rule24)
		e := rng.IntN(rows*cols/4) * 4
		n := 3 + rng.IntN(2)
		for _, i := range rng.Perm(4)[:n] {
			putBits(d, e+i, dt, fromFloat32(-2, dt))
		}
		n = 0 // count again: the planted values may land on nonzeros
		for i := range 4 {
			if getBits(d, e+i, dt)&magOf(dt) != 0 {
				n++
			}
		}
		cb, bb := BitmaskSizes(dt, rows, cols)
		err := PackBitmask(make([]byte, cb), make([]byte, bb), d, dt, rows, cols)
		var se *StructureError
		if !errors.As(err, &se) || !errors.Is(err, ErrNot24) {
			t.Fatalf("%v: PackBitmask = %v, want a StructureError", dt, err)
		}
		if want := (StructureError{Row: e / cols, Col: e % cols, Rule: Rule24, Nonzero: n}); *se != want {
			t.Fatalf("%v: %+v, want %+v", dt, *se, want)
		}
	}
}

func TestUnpackBitmaskRejects(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 9))
	for iter := range 300 {
		dt := allDTypes[iter%3]
		rows, cols := randShape(rng)
		d := mustPrune(t, randMatrix(rng, dt, rows, cols), dt, cols, Rule24)
		cb, bb := BitmaskSizes(dt, rows, cols)
		comp, mask := make([]byte, cb), make([]byte, bb)
		if err := PackBitmask(comp, mask, d, dt, rows, cols); err != nil {
			t.Fatal(err)
		}
		nb := (cols + 7) / 8
		r := rng.IntN(rows)
		var want BitmaskError
		if cols%8 != 0 && iter%4 == 0 { // set padding bits
			pad := byte(1 + rng.IntN(15))
			mask[r*nb+nb-1] |= pad << 4
			want = BitmaskError{Row: r, Group: cols / 4, Bits: popcount(pad), Padding: true}
		} else { // a group with 0, 1, 3 or 4 bits
			g := rng.IntN(cols / 4)
			bad := []byte{0x0, 0x1, 0x2, 0x4, 0x8, 0x7, 0xB, 0xD, 0xE, 0xF}[rng.IntN(10)]
			at, s := r*nb+g/2, 4*(g%2)
			mask[at] = mask[at]&^(0xF<<s) | bad<<s
			want = BitmaskError{Row: r, Group: g, Bits: popcount(bad)}
		}
		err := UnpackBitmask(make([]byte, len(d)), comp, mask, dt, rows, cols)
		var be *BitmaskError
		if !errors.As(err, &be) || !errors.Is(err, ErrBitmask) {
			t.Fatalf("%v: UnpackBitmask = %v, want a BitmaskError", dt, err)
		}
		if *be != want {
			t.Fatalf("%v %d×%d: %+v, want %+v", dt, rows, cols, *be, want)
		}
		if _, err := refUnpackBitmask(comp, mask, dt, rows, cols); !errors.Is(err, ErrBitmask) {
			t.Fatalf("%v: reference accepts the corrupt bitmask", dt)
		}
	}
	err := &BitmaskError{Row: 3, Group: 5, Bits: 3}
	if got, want := err.Error(), "row 3, group 5: 3 mask bits set, want 2"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func popcount(b byte) int {
	n := 0
	for ; b != 0; b &= b - 1 {
		n++
	}
	return n
}

func TestBitmaskShape(t *testing.T) {
	tests := []struct {
		dt         checkpoint.DType
		rows, cols int
		vllm       bool
		cb, bb     int
	}{
		{checkpoint.BF16, 8, 8, true, 8 * 4 * 2, 8},
		{checkpoint.F32, 16, 64, true, 16 * 32 * 4, 16 * 8},
		{checkpoint.F16, 3, 12, false, 3 * 6 * 2, 3 * 2},
		{checkpoint.F16, 0, 12, false, 0, 0},
		{checkpoint.BF16, 8, 6, false, 0, 0},
		{checkpoint.BF16, -8, 8, false, 0, 0},
		{checkpoint.DType("I8"), 8, 8, true, 0, 0},
		{checkpoint.F32, 1 << 40, 1 << 40, true, 0, 0},
	}
	for _, tt := range tests {
		err := BitmaskShapeError(tt.rows, tt.cols)
		if (err == nil) != tt.vllm || (err != nil && !errors.Is(err, ErrShape)) {
			t.Errorf("BitmaskShapeError(%d, %d) = %v, want ok=%v", tt.rows, tt.cols, err, tt.vllm)
		}
		if cb, bb := BitmaskSizes(tt.dt, tt.rows, tt.cols); cb != tt.cb || bb != tt.bb {
			t.Errorf("BitmaskSizes(%v, %d, %d) = %d, %d; want %d, %d", tt.dt, tt.rows, tt.cols, cb, bb, tt.cb, tt.bb)
		}
	}
	cb, bb := BitmaskSizes(checkpoint.F16, 2, 12)
	dn := 2 * 12 * 2
	for _, l := range [][3]int{{dn + 2, cb, bb}, {dn, cb - 2, bb}, {dn, cb, bb + 1}} {
		d, c, m := make([]byte, l[0]), make([]byte, l[1]), make([]byte, l[2])
		if err := PackBitmask(c, m, d, checkpoint.F16, 2, 12); !errors.Is(err, ErrShape) {
			t.Errorf("PackBitmask with lengths %v: %v, want ErrShape", l, err)
		}
		if err := UnpackBitmask(d, c, m, checkpoint.F16, 2, 12); !errors.Is(err, ErrShape) {
			t.Errorf("UnpackBitmask with lengths %v: %v, want ErrShape", l, err)
		}
	}
	if err := PackBitmask(nil, nil, nil, checkpoint.F16, 3, 6); !errors.Is(err, ErrShape) {
		t.Errorf("PackBitmask with 6 columns: %v, want ErrShape", err)
	}
	if err := UnpackBitmask(nil, nil, nil, checkpoint.DType("I8"), 0, 8); !errors.Is(err, ErrDType) {
		t.Errorf("UnpackBitmask with I8: %v, want ErrDType", err)
	}
}
