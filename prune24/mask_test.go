package prune24

import (
	"bytes"
	"errors"
	"math"
	"math/bits"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// refMaskBit reports whether the mask (rows of ceil(cols/8) bytes) keeps
// element i of a cols-column matrix.
func refMaskBit(mask []byte, cols, i int) bool {
	r, c := i/cols, i%cols
	return mask[r*((cols+7)/8)+c/8]>>(c%8)&1 != 0
}

// refCheckMask is CheckMask the slow way: group by group, then the
// padding of the row.
func refCheckMask(mask []byte, rows, cols int) error {
	mb := (cols + 7) / 8
	for r := range rows {
		for g := range cols / 4 {
			n := 0
			for c := 4 * g; c < 4*g+4; c++ {
				if refMaskBit(mask, cols, r*cols+c) {
					n++
				}
			}
			if n != 2 {
				return &BitmaskError{Row: r, Group: g, Bits: n}
			}
		}
		if pad := bits.OnesCount8(mask[r*mb+mb-1] >> (cols % 8)); cols%8 != 0 && pad != 0 {
			return &BitmaskError{Row: r, Group: cols / 4, Bits: pad, Padding: true}
		}
	}
	return nil
}

// refPruneMask is PruneMask the slow way.
func refPruneMask(src, mask []byte, dt checkpoint.DType, cols, rowBase int) ([]byte, Stats, error) {
	n := len(src) / dt.Size()
	if err := refCheckMask(mask, n/max(cols, 1), cols); err != nil {
		return nil, Stats{}, OffsetRows(err, rowBase)
	}
	for i := range n {
		if math.IsNaN(slowValue(getBits(src, i, dt), dt)) {
			return nil, Stats{}, &NaNError{Row: rowBase + i/cols, Col: i % cols}
		}
	}
	dst := make([]byte, len(src))
	var st Stats
	for i := range n {
		v := slowValue(getBits(src, i, dt), dt)
		st.Total += math.Abs(v)
		if refMaskBit(mask, cols, i) {
			st.Kept += math.Abs(v)
			if v != 0 {
				putBits(dst, i, dt, getBits(src, i, dt))
			}
		}
	}
	return dst, st, nil
}

// randMask returns a random valid mask of rows×cols: 2 of every 4.
func randMask(rng *rand.Rand, rows, cols int) []byte {
	mb := (cols + 7) / 8
	mask := make([]byte, rows*mb)
	for r := range rows {
		for g := range cols / 4 {
			p := rng.Perm(4)
			setMaskNibble(mask[r*mb:(r+1)*mb], g, byte(1<<p[0]|1<<p[1]))
		}
	}
	return mask
}

// magnitudeMask returns the mask of the set Prune keeps of src by Rule24.
func magnitudeMask(t testing.TB, src []byte, dt checkpoint.DType, cols int) []byte {
	t.Helper()
	pruned := mustPrune(t, src, dt, cols, Rule24)
	mask := make([]byte, MaskBytes(len(src)/dt.Size()/cols, cols))
	if err := MaskOf(mask, pruned, dt, cols); err != nil {
		t.Fatal(err)
	}
	return mask
}

// TestPruneMaskIsPrune feeds the magnitude rule's own mask back: the
// output and the Stats must be Prune's exactly, in every dtype, for
// shapes whose rows end inside a block and whose masks end in half a
// byte.
func TestPruneMaskIsPrune(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	for iter := range 600 {
		dt := allDTypes[iter%3]
		rows, cols := randShape(rng)
		if iter%7 == 0 {
			rows, cols = 1+rng.IntN(40), 4*(1+rng.IntN(80))
		}
		src := randMatrix(rng, dt, rows, cols)
		rowBase := rng.IntN(50)
		want := make([]byte, len(src))
		wantSt, err := Prune(want, src, dt, cols, rowBase, Rule24)
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, len(src))
		st, err := PruneMask(dst, src, magnitudeMask(t, src, dt, cols), dt, cols, rowBase)
		if err != nil {
			t.Fatalf("%v %d×%d: %v", dt, rows, cols, err)
		}
		if !bytes.Equal(dst, want) {
			t.Fatalf("%v %d×%d: element %d differs from Prune's", dt, rows, cols, firstDiff(dst, want, dt))
		}
		if st != wantSt {
			t.Fatalf("%v %d×%d: stats %+v, Prune's %+v", dt, rows, cols, st, wantSt)
		}
	}
}

// TestPruneMaskReference holds PruneMask to the slow reference for
// random valid masks, in place and not.
func TestPruneMaskReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 2))
	for iter := range 600 {
		dt := allDTypes[iter%3]
		rows, cols := randShape(rng)
		src := randMatrix(rng, dt, rows, cols)
		mask := randMask(rng, rows, cols)
		want, wantSt, err := refPruneMask(src, mask, dt, cols, 0)
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, len(src))
		st, err := PruneMask(dst, src, mask, dt, cols, 0)
		if err != nil {
			t.Fatalf("%v %d×%d: %v", dt, rows, cols, err)
		}
		if !bytes.Equal(dst, want) {
			t.Fatalf("%v %d×%d: element %d = %#x, the reference %#x", dt, rows, cols,
				firstDiff(dst, want, dt), getBits(dst, firstDiff(dst, want, dt), dt), getBits(want, firstDiff(dst, want, dt), dt))
		}
		if !close(st.Kept, wantSt.Kept) || !close(st.Total, wantSt.Total) {
			t.Fatalf("%v: stats %+v, the reference %+v", dt, st, wantSt)
		}
		inPlace := bytes.Clone(src)
		if _, err := PruneMask(inPlace, inPlace, mask, dt, cols, 0); err != nil || !bytes.Equal(inPlace, want) {
			t.Fatalf("%v: in place differs (err %v)", dt, err)
		}
		if err := CheckMasked(dst, src, mask, dt, cols); err != nil {
			t.Fatalf("CheckMasked(PruneMask(x, m), x, m): %v", err)
		}
	}
}

func TestPruneMaskRefuses(t *testing.T) {
	const rows, cols = 3, 12 // 2 mask bytes a row, the second with padding
	src := bytes.Repeat([]byte{0x80, 0x3F}, rows*cols)
	good := func() []byte { return bytes.Repeat([]byte{0x33, 0x05}, rows) }
	tests := []struct {
		name string
		edit func(m []byte) []byte
		want error
	}{
		{"one bit", func(m []byte) []byte { m[2] = 0x31; return m }, &BitmaskError{Row: 11, Group: 0, Bits: 1}},
		{"three bits", func(m []byte) []byte { m[5] = 0x07; return m }, &BitmaskError{Row: 12, Group: 2, Bits: 3}},
		{"none", func(m []byte) []byte { m[0] = 0x30; return m }, &BitmaskError{Row: 10, Group: 0, Bits: 0}},
		{"all four", func(m []byte) []byte { m[1] = 0x0F; return m }, &BitmaskError{Row: 10, Group: 2, Bits: 4}},
		{"bit past the last column", func(m []byte) []byte { m[3] = 0x15; return m }, &BitmaskError{Row: 11, Group: 3, Bits: 1, Padding: true}},
		{"short", func(m []byte) []byte { return m[:5] }, ErrShape},
		{"long", func(m []byte) []byte { return append(m, 0) }, ErrShape},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mask := tt.edit(good())
			_, err := PruneMask(make([]byte, len(src)), src, mask, checkpoint.BF16, cols, 10)
			var be *BitmaskError
			if want, ok := tt.want.(*BitmaskError); ok {
				if !errors.As(err, &be) || *be != *want || !errors.Is(err, ErrBitmask) {
					t.Fatalf("PruneMask: %v, want %v", err, want)
				}
				if cerr := CheckMask(mask, cols); !errors.As(cerr, &be) || be.Row != want.Row-10 {
					t.Fatalf("CheckMask: %v, want row %d", cerr, want.Row-10)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("PruneMask: %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := PruneMask(make([]byte, len(src)), src, good(), checkpoint.BF16, cols, 10); err != nil {
		t.Fatalf("the good mask: %v", err)
	}
	if _, err := PruneMask(make([]byte, len(src)), src, good(), checkpoint.I16, cols, 0); !errors.Is(err, ErrDType) {
		t.Fatalf("I16: %v, want ErrDType", err)
	}
}

// TestCheckMaskReference holds CheckMask to the slow reference on random
// masks, most of them close to valid.
func TestCheckMaskReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 2))
	for range 3000 {
		rows, cols := 1+rng.IntN(5), 4*(1+rng.IntN(40))
		mask := randMask(rng, rows, cols)
		for range rng.IntN(3) {
			mask[rng.IntN(len(mask))] ^= 1 << rng.IntN(8)
		}
		err, want := CheckMask(mask, cols), refCheckMask(mask, rows, cols)
		if !reflect.DeepEqual(err, want) {
			t.Fatalf("%d×%d % x: %v, the reference %v", rows, cols, mask, err, want)
		}
	}
}

func TestPruneMaskNaN(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 2))
	for iter := range 300 {
		dt := allDTypes[iter%3]
		rows, cols := randShape(rng)
		src := randMatrix(rng, dt, rows, cols)
		at := rng.IntN(rows * cols)
		putBits(src, at, dt, nanBits(rng, dt))
		_, err := PruneMask(make([]byte, len(src)), src, randMask(rng, rows, cols), dt, cols, 7)
		var ne *NaNError
		if !errors.As(err, &ne) || ne.Row != 7+at/cols || ne.Col != at%cols {
			t.Fatalf("%v: %v, want NaN at row %d column %d", dt, err, 7+at/cols, at%cols)
		}
	}
}

// TestMaskOf holds MaskOf to PackBitmask's bitmask, and shows the one
// case where a mask is not what its matrix shows: a zero kept above a
// pruned place.
func TestMaskOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 2))
	for iter := range 300 {
		dt := allDTypes[iter%3]
		rows, cols := randShape(rng)
		cols = (cols + 4) / 8 * 8 // the bitmask format's columns
		if cols == 0 {
			cols = 8
		}
		d := mustPrune(t, randMatrix(rng, dt, rows, cols), dt, cols, Rule24)
		cb, bb := BitmaskSizes(dt, rows, cols)
		comp, want := make([]byte, cb), make([]byte, bb)
		if err := PackBitmask(comp, want, d, dt, rows, cols); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, bb)
		if err := MaskOf(got, d, dt, cols); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%v %d×%d: MaskOf % x, PackBitmask % x (err %v)", dt, rows, cols, got, want, err)
		}
		e := rng.IntN(rows*cols/4) * 4
		for i := range 3 {
			putBits(d, e+i, dt, fromFloat32(1, dt))
		}
		var se *StructureError
		if err := MaskOf(got, d, dt, cols); !errors.As(err, &se) || se.Row != e/cols || se.Col != e%cols {
			t.Fatalf("%v: 3 nonzeros at %d: %v", dt, e, err)
		}
	}
	// Row [0 0 0 5]: the mask {2, 3} keeps the zero at 2; the matrix
	// shows {0, 3}.
	src := []byte{0, 0, 0, 0, 0, 0, 0xA0, 0x40}
	out := make([]byte, len(src))
	if _, err := PruneMask(out, src, []byte{0x0C}, checkpoint.BF16, 4, 0); err != nil {
		t.Fatal(err)
	}
	shown := make([]byte, 1)
	if err := MaskOf(shown, out, checkpoint.BF16, 4); err != nil || shown[0] != 0x09 {
		t.Fatalf("MaskOf = %#x (err %v), want 0x09", shown[0], err)
	}
}

func TestCheckMasked(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 2))
	for iter := range 300 {
		dt := allDTypes[iter%3]
		rows, cols := randShape(rng)
		src := randMatrix(rng, dt, rows, cols)
		mask := randMask(rng, rows, cols)
		out := make([]byte, len(src))
		if _, err := PruneMask(out, src, mask, dt, cols, 0); err != nil {
			t.Fatal(err)
		}
		i := rng.IntN(rows * cols)
		was := getBits(out, i, dt)
		putBits(out, i, dt, was^1)
		var re *RuleError
		if err := CheckMasked(out, src, mask, dt, cols); !errors.As(err, &re) || re.Row != i/cols || re.Col != i%cols || re.Want != was {
			t.Fatalf("%v: element %d changed: %v", dt, i, err)
		}
	}
}

func FuzzPruneMask(f *testing.F) {
	rng := rand.New(rand.NewPCG(11, 2))
	for sel := range 12 {
		dt := allDTypes[sel%3]
		cols := 4 * (1 + sel/3%8)
		f.Add(randMatrix(rng, dt, 3, cols), randMask(rng, 3, cols), byte(sel))
	}
	f.Fuzz(func(t *testing.T, data, mask []byte, sel byte) {
		dt, cols := allDTypes[sel%3], 4*(1+int(sel/3)%8)
		rowBytes := cols * dt.Size()
		src := data[:len(data)/rowBytes*rowBytes]
		rows := len(src) / rowBytes
		if sel >= 128 {
			mask = fit(mask, MaskBytes(rows, cols))
		}
		dst := make([]byte, len(src))
		st, err := PruneMask(dst, src, mask, dt, cols, 3)
		if len(mask) != MaskBytes(rows, cols) {
			if !errors.Is(err, ErrShape) {
				t.Fatalf("%d mask bytes for %d rows: %v, want ErrShape", len(mask), rows, err)
			}
			return
		}
		want, wantSt, wantErr := refPruneMask(src, mask, dt, cols, 3)
		if !reflect.DeepEqual(err, wantErr) {
			t.Fatalf("PruneMask error %v, reference %v", err, wantErr)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(dst, want) {
			t.Fatalf("PruneMask differs from the reference at element %d", firstDiff(dst, want, dt))
		}
		if !close(st.Kept, wantSt.Kept) || !close(st.Total, wantSt.Total) {
			t.Fatalf("stats %+v, reference %+v", st, wantSt)
		}
		if err := Check(dst, dt, cols, Rule24); err != nil {
			t.Fatalf("Check(PruneMask(x)): %v", err)
		}
		if err := CheckMasked(dst, src, mask, dt, cols); err != nil {
			t.Fatalf("CheckMasked(PruneMask(x, m), x, m): %v", err)
		}
	})
}
