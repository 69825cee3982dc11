package prune24

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// TestAmpereKnownAnswer is the known-answer vector of docs/formats.md §1.6,
// verified against torch 2.11.
func TestAmpereKnownAnswer(t *testing.T) {
	const rows, cols = 32, 64
	pat := []string{"1100", "1010", "1001", "0110", "0101", "0011", "0000", "0001"}
	d := make([]byte, rows*cols*2)
	for i := range rows {
		for q := range cols / 4 {
			for tt := range 4 {
				if pat[(i+q)%8][tt] == '1' {
					v := 1 + (64*i+4*q+tt)%13
					putBits(d, i*cols+4*q+tt, checkpoint.F16, fromFloat32(float32(v), checkpoint.F16))
				}
			}
		}
	}
	pb, mb := AmpereSizes(checkpoint.F16, rows, cols)
	if pb != rows*cols || mb != rows*cols/16*2 {
		t.Fatalf("AmpereSizes = %d, %d", pb, mb)
	}
	packed, meta := make([]byte, pb), make([]byte, mb)
	if err := PackAmpere(packed, meta, d, checkpoint.F16, rows, cols); err != nil {
		t.Fatal(err)
	}
	// Logical M[0]: row 0's words, at the §1.5 offsets.
	for c, want := range []uint16{0x9c84, 0xeeed, 0x9c84, 0xeeed} {
		o := refMetaOffset(0, c, rows)
		if got := binary.LittleEndian.Uint16(meta[2*o:]); got != want {
			t.Errorf("M[0][%d] = %#04x, want %#04x", c, got, want)
		}
	}
	wantMeta := []uint16{40068, 40068, 61165, 61165, 40068, 40068, 61165, 61165, 55752, 55752, 20206, 20206, 55752, 55752, 20206, 20206}
	for i, want := range wantMeta {
		if got := binary.LittleEndian.Uint16(meta[2*i:]); got != want {
			t.Errorf("stored meta[%d] = %d, want %d", i, got, want)
		}
	}
	for _, h := range []struct {
		name string
		b    []byte
		want string
	}{
		{"meta", meta, "0fd3409c07f0952af575e20ae3eddf77b77b0ebbefebac67341273f39e1eea20"},
		{"packed", packed, "52749a4d3ac061b6b22f666294f0217aa4e15eb37c3eb0c40e7d056d20c4d286"},
	} {
		sum := sha256.Sum256(h.b)
		if got := hex.EncodeToString(sum[:]); got != h.want {
			t.Errorf("SHA-256 of %s = %s, want %s", h.name, got, h.want)
		}
	}
	dense := make([]byte, len(d))
	if err := UnpackAmpere(dense, packed, meta, checkpoint.F16, rows, cols); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dense, d) {
		t.Error("UnpackAmpere does not give D back")
	}
}

// TestMetaBase checks the closed form of §1.5 that the fast code uses
// against the literal scatter loop.
func TestMetaBase(t *testing.T) {
	for _, m := range []int{32, 64, 96} {
		for r := range m {
			for c := range 8 {
				if got, want := metaBase(r)+2*(c/2)*m+2*(c%2), refMetaOffset(r, c, m); got != want {
					t.Fatalf("m=%d: word (%d, %d) at %d, want %d", m, r, c, got, want)
				}
			}
		}
	}
}

// ampereRule returns the rule whose output the Ampere layout holds for dt.
func ampereRule(dt checkpoint.DType) Rule {
	if dt == checkpoint.F32 {
		return Rule12
	}
	return Rule24
}

// randAmpereShape returns a random shape that fits the Ampere layout.
func randAmpereShape(rng *rand.Rand, dt checkpoint.DType) (rows, cols int) {
	q := 64
	if dt == checkpoint.F32 {
		q = 32
	}
	return 32 * (1 + rng.IntN(4)), q * (1 + rng.IntN(4))
}

// randSparse returns a random matrix that satisfies rule without being
// pruned: groups with fewer nonzeros than allowed, zeros of either sign.
func randSparse(rng *rand.Rand, dt checkpoint.DType, rows, cols int, rule Rule) []byte {
	b := randMatrix(rng, dt, rows, cols)
	g := groupOf(rule)
	for e := 0; e < rows*cols; e += g {
		for _, i := range rng.Perm(g)[:g/2+rng.IntN(g/2+1)] {
			putBits(b, e+i, dt, randZero(rng, dt))
		}
	}
	return b
}

func TestAmpereProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(80, 32))
	for iter := range 150 {
		dt := allDTypes[iter%3]
		rule := ampereRule(dt)
		rows, cols := randAmpereShape(rng, dt)
		var d []byte
		pruned := iter%2 == 0
		if pruned {
			d = mustPrune(t, randMatrix(rng, dt, rows, cols), dt, cols, rule)
		} else {
			d = randSparse(rng, dt, rows, cols, rule)
		}
		name := fmt.Sprintf("%v %d×%d pruned=%v", dt, rows, cols, pruned)
		wantP, wantM, err := refPackAmpere(d, dt, rows, cols)
		if err != nil {
			t.Fatalf("%s: reference: %v", name, err)
		}
		pb, mb := AmpereSizes(dt, rows, cols)
		packed, meta := make([]byte, pb), make([]byte, mb)
		if err := PackAmpere(packed, meta, d, dt, rows, cols); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(packed, wantP) {
			t.Fatalf("%s: packed differs from the reference at element %d", name, firstDiff(packed, wantP, dt))
		}
		if !bytes.Equal(meta, wantM) {
			t.Fatalf("%s: meta differs from the reference at byte %d", name, firstDiff(meta, wantM, checkpoint.F16)*2)
		}
		dense := make([]byte, len(d))
		if err := UnpackAmpere(dense, packed, meta, dt, rows, cols); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ref, err := refUnpackAmpere(packed, meta, dt, rows, cols)
		if err != nil {
			t.Fatalf("%s: reference unpack: %v", name, err)
		}
		if !bytes.Equal(dense, ref) {
			t.Fatalf("%s: UnpackAmpere differs from the reference at %d", name, firstDiff(dense, ref, dt))
		}
		// Pruned data round-trips exactly; other sparse data up to the
		// -0.0 in slots that are not selected.
		want := d
		if !pruned {
			want = bytes.Clone(d)
			for i := range rows * cols {
				if getBits(want, i, dt) == negZeroBits(dt) && getBits(dense, i, dt) == 0 {
					putBits(want, i, dt, 0)
				}
			}
		}
		if !bytes.Equal(dense, want) {
			t.Fatalf("%s: round trip differs at element %d", name, firstDiff(dense, want, dt))
		}
	}
}

func TestPackAmpereRejectsDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for iter := range 60 {
		dt := allDTypes[iter%3]
		rule := ampereRule(dt)
		rows, cols := randAmpereShape(rng, dt)
		d := mustPrune(t, randMatrix(rng, dt, rows, cols), dt, cols, rule)
		g := groupOf(rule)
		e := rng.IntN(rows*cols/g) * g
		for i := range g {
			putBits(d, e+i, dt, fromFloat32(float32(1+i), dt))
		}
		pb, mb := AmpereSizes(dt, rows, cols)
		err := PackAmpere(make([]byte, pb), make([]byte, mb), d, dt, rows, cols)
		var se *StructureError
		if !errors.As(err, &se) || !errors.Is(err, ErrNot24) {
			t.Fatalf("%v: PackAmpere = %v, want a StructureError", dt, err)
		}
		if want := (StructureError{Row: e / cols, Col: e % cols, Rule: rule, Nonzero: g}); *se != want {
			t.Fatalf("%v: %+v, want %+v", dt, *se, want)
		}
	}
}

// setStoredNibble sets the nibble of group g of row r in stored meta.
func setStoredNibble(meta []byte, dt checkpoint.DType, rows, r, g int, nib byte) {
	o := 2 * refMetaOffset(r, g/4, rows)
	w := binary.LittleEndian.Uint16(meta[o:])
	s := 4 * (g % 4)
	w = w&^(0xF<<s) | uint16(nib)<<s
	binary.LittleEndian.PutUint16(meta[o:], w)
}

func TestUnpackAmpereRejectsMeta(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for iter := range 96 {
		dt := allDTypes[iter%3]
		rows, cols := randAmpereShape(rng, dt)
		d := mustPrune(t, randMatrix(rng, dt, rows, cols), dt, cols, ampereRule(dt))
		pb, mb := AmpereSizes(dt, rows, cols)
		packed, meta := make([]byte, pb), make([]byte, mb)
		if err := PackAmpere(packed, meta, d, dt, rows, cols); err != nil {
			t.Fatal(err)
		}
		bad := []byte{0x0, 0x1, 0x2, 0x3, 0x5, 0x6, 0x7, 0xA, 0xB, 0xF}
		if dt == checkpoint.F32 {
			bad = append(bad, 0x8, 0x9, 0xC, 0xD)
		}
		nib := bad[iter/3%len(bad)]
		per := cols / 4
		if dt == checkpoint.F32 {
			per = cols / 2
		}
		r, g := rng.IntN(rows), rng.IntN(per)
		setStoredNibble(meta, dt, rows, r, g, nib)
		err := UnpackAmpere(make([]byte, len(d)), packed, meta, dt, rows, cols)
		var me *MetaError
		if !errors.As(err, &me) || !errors.Is(err, ErrMeta) {
			t.Fatalf("%v nibble %#x: UnpackAmpere = %v, want a MetaError", dt, nib, err)
		}
		if want := (MetaError{Row: r, Group: g, Nibble: nib, Rule: ampereRule(dt)}); *me != want {
			t.Fatalf("%v: %+v, want %+v", dt, *me, want)
		}
		if _, err := refUnpackAmpere(packed, meta, dt, rows, cols); !errors.Is(err, ErrMeta) {
			t.Fatalf("%v: reference accepts nibble %#x", dt, nib)
		}
	}
	err := &MetaError{Row: 3, Group: 5, Nibble: 0, Rule: Rule24}
	if got, want := err.Error(), "row 3, group 5: meta nibble 0x0 is not a valid 2:4 index pair"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestAmpereShape(t *testing.T) {
	tests := []struct {
		dt         checkpoint.DType
		rows, cols int
		ok         bool
		pb, mb     int
	}{
		{checkpoint.F16, 32, 64, true, 32 * 64, 32 * 4 * 2},
		{checkpoint.BF16, 64, 128, true, 64 * 128, 64 * 8 * 2},
		{checkpoint.F32, 32, 32, true, 32 * 16 * 4, 32 * 4 * 2},
		{checkpoint.F32, 96, 64, true, 96 * 32 * 4, 96 * 8 * 2},
		{checkpoint.F16, 32, 32, false, 0, 0},
		{checkpoint.BF16, 16, 64, false, 0, 0},
		{checkpoint.F32, 32, 16, false, 0, 0},
		{checkpoint.F16, 0, 64, false, 0, 0},
		{checkpoint.F16, 32, 0, false, 0, 0},
		{checkpoint.F16, -32, 64, false, 0, 0},
		{checkpoint.F32, 1 << 62, 1 << 62, false, 0, 0},
		{checkpoint.DType("I8"), 32, 64, false, 0, 0},
	}
	for _, tt := range tests {
		err := AmpereShapeError(tt.dt, tt.rows, tt.cols)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrShape) && !errors.Is(err, ErrDType)) {
			t.Errorf("AmpereShapeError(%v, %d, %d) = %v, want ok=%v", tt.dt, tt.rows, tt.cols, err, tt.ok)
		}
		if pb, mb := AmpereSizes(tt.dt, tt.rows, tt.cols); pb != tt.pb || mb != tt.mb {
			t.Errorf("AmpereSizes(%v, %d, %d) = %d, %d; want %d, %d", tt.dt, tt.rows, tt.cols, pb, mb, tt.pb, tt.mb)
		}
	}
	// Every buffer length is checked.
	pb, mb := AmpereSizes(checkpoint.BF16, 32, 64)
	dn := 32 * 64 * 2
	for _, l := range [][3]int{{dn - 2, pb, mb}, {dn, pb + 2, mb}, {dn, pb, mb - 2}} {
		d, p, m := make([]byte, l[0]), make([]byte, l[1]), make([]byte, l[2])
		if err := PackAmpere(p, m, d, checkpoint.BF16, 32, 64); !errors.Is(err, ErrShape) {
			t.Errorf("PackAmpere with lengths %v: %v, want ErrShape", l, err)
		}
		if err := UnpackAmpere(d, p, m, checkpoint.BF16, 32, 64); !errors.Is(err, ErrShape) {
			t.Errorf("UnpackAmpere with lengths %v: %v, want ErrShape", l, err)
		}
	}
}
