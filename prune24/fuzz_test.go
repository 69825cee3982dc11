package prune24

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// fit returns b repeated or cut to n bytes (zeros if b is empty).
func fit(b []byte, n int) []byte {
	out := make([]byte, n)
	if len(b) > 0 {
		for i := range out {
			out[i] = b[i%len(b)]
		}
	}
	return out
}

// allNonzero reports whether every element of b has a nonzero magnitude.
func allNonzero(b []byte, dt checkpoint.DType) bool {
	for i := 0; i < len(b)/dt.Size(); i++ {
		if getBits(b, i, dt)&magOf(dt) == 0 {
			return false
		}
	}
	return true
}

func FuzzPrune(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 1))
	for sel := range 12 {
		dt := allDTypes[sel%3]
		f.Add(randMatrix(rng, dt, 3, 8), byte(sel))
	}
	f.Add([]byte{0x01, 0x7C, 0, 0, 0, 0, 0, 0}, byte(0)) // F16 NaN
	f.Fuzz(func(t *testing.T, data []byte, sel byte) {
		dt, rule, cols := allDTypes[sel%3], Rule(sel/3%2), 4*(1+int(sel/6)%8)
		rowBytes := cols * dt.Size()
		src := data[:len(data)/rowBytes*rowBytes]
		dst := make([]byte, len(src))
		st, err := Prune(dst, src, dt, cols, 5, rule)
		want, wantSt, wantErr := refPrune(src, dt, cols, 5, rule)
		if !reflect.DeepEqual(err, wantErr) {
			t.Fatalf("Prune error %v, reference %v", err, wantErr)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(dst, want) {
			t.Fatalf("Prune differs from the reference at element %d", firstDiff(dst, want, dt))
		}
		if !close(st.Kept, wantSt.Kept) || !close(st.Total, wantSt.Total) {
			t.Fatalf("stats %+v, reference %+v", st, wantSt)
		}
		if err := Check(dst, dt, cols, rule); err != nil {
			t.Fatalf("Check(Prune(x)): %v", err)
		}
		again := make([]byte, len(dst))
		st2, err := Prune(again, dst, dt, cols, 0, rule)
		if err != nil || !bytes.Equal(again, dst) {
			t.Fatalf("Prune is not idempotent (err %v)", err)
		}
		if st2.Kept != st2.Total {
			t.Fatalf("second prune lost magnitude: %+v", st2)
		}
		if err := CheckRule(dst, src, dt, cols, rule); err != nil {
			t.Fatalf("CheckRule(Prune(x), x): %v", err)
		}
	})
}

// sameUpToNegZero reports whether got equals want except where want has
// -0.0 and got +0.0: a -0.0 counts as zero when packing, so a repack may
// leave it out of the selection.
func sameUpToNegZero(got, want []byte, dt checkpoint.DType) bool {
	for i := 0; i < len(want)/dt.Size(); i++ {
		g, w := getBits(got, i, dt), getBits(want, i, dt)
		if g != w && (w != negZeroBits(dt) || g != 0) {
			return false
		}
	}
	return len(got) == len(want)
}

// sanitizeNibbles replaces every nibble of b by one of valid, chosen by
// its value.
func sanitizeNibbles(b []byte, valid []byte) {
	for i, x := range b {
		b[i] = valid[int(x&0xF)%len(valid)] | valid[int(x>>4)%len(valid)]<<4
	}
}

func FuzzUnpackAmpere(f *testing.F) {
	// Inputs are short and repeated to the buffer lengths (fit), which
	// keeps the fuzzer's minimisation fast. A matrix whose rows and meta
	// words are all alike has periodic packed and meta buffers: one word
	// 0x9c84 (groups 4, 8, C, 9) with nonzero values is such a seed.
	for sel := range 3 {
		f.Add([]byte{0x00, 0x3C, 0x00, 0xC0, 0x11, 0x22}, []byte{0x84, 0x9C}, byte(12+sel))
		f.Add([]byte{0x00, 0x00, 0x00, 0x80}, []byte{0xE4, 0x4E}, byte(36+sel))
	}
	f.Add([]byte{1, 2, 3}, []byte{0x44, 0xEE}, byte(3))
	f.Add([]byte{1, 2, 3}, []byte{0x05}, byte(4+24))
	f.Fuzz(func(t *testing.T, packed, meta []byte, sel byte) {
		dt := allDTypes[sel%3]
		q := 64
		if dt == checkpoint.F32 {
			q = 32
		}
		rows, cols := 32*(1+int(sel/3)%2), q*(1+int(sel/6)%2)
		pb, mb := AmpereSizes(dt, rows, cols)
		packed, meta = packed[:min(len(packed), 256)], meta[:min(len(meta), 256)]
		if mode := sel / 12 % 4; mode > 0 { // mode 0: the bytes as they are
			packed, meta = fit(packed, pb), fit(meta, mb)
			if mode > 1 {
				valid := []byte{0x4, 0x8, 0x9, 0xC, 0xD, 0xE}
				if dt == checkpoint.F32 {
					valid = []byte{0x4, 0xE}
				}
				sanitizeNibbles(meta, valid)
			}
		}
		dense := make([]byte, rows*cols*dt.Size())
		err := UnpackAmpere(dense, packed, meta, dt, rows, cols)
		if len(packed) != pb || len(meta) != mb {
			if !errors.Is(err, ErrShape) {
				t.Fatalf("lengths %d, %d: error %v, want ErrShape", len(packed), len(meta), err)
			}
			return
		}
		want, wantErr := refUnpackAmpere(packed, meta, dt, rows, cols)
		if !reflect.DeepEqual(err, wantErr) {
			t.Fatalf("UnpackAmpere error %v, reference %v", err, wantErr)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(dense, want) {
			t.Fatalf("UnpackAmpere differs from the reference at element %d", firstDiff(dense, want, dt))
		}
		p2, m2 := make([]byte, pb), make([]byte, mb)
		if err := PackAmpere(p2, m2, dense, dt, rows, cols); err != nil {
			t.Fatalf("PackAmpere(UnpackAmpere(x)): %v", err)
		}
		dense2 := make([]byte, len(dense))
		if err := UnpackAmpere(dense2, p2, m2, dt, rows, cols); err != nil || !sameUpToNegZero(dense2, dense, dt) {
			t.Fatalf("repacked matrix does not unpack to the same (err %v)", err)
		}
		// With no zero among the packed values the input is canonical, and
		// packing reproduces it exactly.
		if allNonzero(packed, dt) && (!bytes.Equal(p2, packed) || !bytes.Equal(m2, meta)) {
			t.Fatalf("repacking does not reproduce a canonical input")
		}
	})
}

func FuzzUnpackBitmask(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 3))
	for sel := range 3 {
		dt := allDTypes[sel]
		d := mustPrune(f, randMatrix(rng, dt, 1, 4), dt, 4, Rule24)
		cb, bb := BitmaskSizes(dt, 1, 4)
		c, m := make([]byte, cb), make([]byte, bb)
		if err := PackBitmask(c, m, d, dt, 1, 4); err != nil {
			f.Fatal(err)
		}
		f.Add(c, m, byte(sel))
	}
	f.Add([]byte{1, 2, 3, 4}, []byte{0x37}, byte(2*60+4*12))
	f.Fuzz(func(t *testing.T, comp, mask []byte, sel byte) {
		dt := allDTypes[sel%3]
		rows, cols := 1+int(sel/3)%4, 4*(1+int(sel/12)%5)
		cb, bb := BitmaskSizes(dt, rows, cols)
		if mode := sel / 60 % 4; mode > 0 {
			comp, mask = fit(comp, cb), fit(mask, bb)
			if mode > 1 {
				sanitizeNibbles(mask, []byte{0x3, 0x5, 0x6, 0x9, 0xA, 0xC})
				if cols%8 != 0 {
					for r := 0; r < rows; r++ {
						mask[(r+1)*bb/rows-1] &= 0xF
					}
				}
			}
		}
		dense := make([]byte, rows*cols*dt.Size())
		err := UnpackBitmask(dense, comp, mask, dt, rows, cols)
		if len(comp) != cb || len(mask) != bb {
			if !errors.Is(err, ErrShape) {
				t.Fatalf("lengths %d, %d: error %v, want ErrShape", len(comp), len(mask), err)
			}
			return
		}
		want, wantErr := refUnpackBitmask(comp, mask, dt, rows, cols)
		if !reflect.DeepEqual(err, wantErr) {
			t.Fatalf("UnpackBitmask error %v, reference %v", err, wantErr)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(dense, want) {
			t.Fatalf("UnpackBitmask differs from the reference at element %d", firstDiff(dense, want, dt))
		}
		c2, m2 := make([]byte, cb), make([]byte, bb)
		if err := PackBitmask(c2, m2, dense, dt, rows, cols); err != nil {
			t.Fatalf("PackBitmask(UnpackBitmask(x)): %v", err)
		}
		dense2 := make([]byte, len(dense))
		if err := UnpackBitmask(dense2, c2, m2, dt, rows, cols); err != nil || !sameUpToNegZero(dense2, dense, dt) {
			t.Fatalf("repacked matrix does not unpack to the same (err %v)", err)
		}
		if allNonzero(comp, dt) && (!bytes.Equal(c2, comp) || !bytes.Equal(m2, mask)) {
			t.Fatalf("repacking does not reproduce a canonical input")
		}
	})
}

// fuzzAmpereShape returns the dtype, rule and Ampere shape that sel picks.
func fuzzAmpereShape(sel byte) (dt checkpoint.DType, rule Rule, rows, cols int) {
	dt, rule = allDTypes[sel%3], Rule(sel/3%2)
	q := 64
	if dt == checkpoint.F32 {
		q = 32
	}
	return dt, rule, 32 * (1 + int(sel/6)%2), q * (1 + int(sel/12)%2)
}

func FuzzPruneAmpere(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 5))
	for sel := range 24 {
		dt, _, rows, cols := fuzzAmpereShape(byte(sel))
		f.Add(randMatrix(rng, dt, rows, cols)[:256], byte(sel))
	}
	f.Add([]byte{0x01, 0x7C, 0, 0, 0, 0, 0, 0}, byte(0))                         // F16 NaN
	f.Add([]byte{0x7F, 0x7F, 0x7F, 0x7F, 0x80, 0x7F, 0, 0x80}, byte(1))          // BF16 large, Inf, -0
	f.Add([]byte{0xFF, 0xFF, 0x7F, 0x7F, 0, 0, 0x80, 0x7F, 1, 0, 0, 0}, byte(2)) // F32 large, Inf, subnormal
	f.Add([]byte{1, 2, 3}, byte(24))                                             // wrong length
	f.Fuzz(func(t *testing.T, data []byte, sel byte) {
		dt, rule, rows, cols := fuzzAmpereShape(sel)
		src := data
		if sel/24%2 == 0 { // else the bytes as they are, mostly the wrong length
			src = fit(data[:min(len(data), 512)], rows*cols*dt.Size())
		}
		pb, mb := AmpereSizes(dt, rows, cols)
		packed, meta := garbage(pb), garbage(mb)
		st, err := PruneAmpere(packed, meta, src, dt, rows, cols, 3, rule)
		if len(src) != rows*cols*dt.Size() {
			if !errors.Is(err, ErrShape) {
				t.Fatalf("%d bytes: error %v, want ErrShape", len(src), err)
			}
			return
		}
		wantP, wantM, wantSt, wantErr := twoStepAmpere(src, dt, rows, cols, 3, rule)
		if !reflect.DeepEqual(err, wantErr) {
			t.Fatalf("PruneAmpere error %v, Prune+PackAmpere %v", err, wantErr)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(packed, wantP) || !bytes.Equal(meta, wantM) {
			t.Fatalf("PruneAmpere differs from Prune+PackAmpere")
		}
		if !close(st.Kept, wantSt.Kept) || !close(st.Total, wantSt.Total) {
			t.Fatalf("stats %+v, Prune %+v", st, wantSt)
		}
	})
}

func FuzzPruneBitmask(f *testing.F) {
	rng := rand.New(rand.NewPCG(6, 6))
	for sel := range 12 {
		dt := allDTypes[sel%3]
		f.Add(randMatrix(rng, dt, 2, 36), byte(sel))
	}
	f.Add([]byte{0x01, 0x7C, 0, 0, 0, 0, 0, 0}, byte(0))
	f.Add([]byte{1, 2, 3}, byte(96))
	f.Fuzz(func(t *testing.T, data []byte, sel byte) {
		dt, rows, cols := allDTypes[sel%3], 1+int(sel/3)%4, 4*(1+int(sel/12)%40)
		src := data
		if sel >= 160 {
			src = fit(data[:min(len(data), 512)], rows*cols*dt.Size())
		} else if sel%2 == 0 {
			src = fit(data, rows*cols*dt.Size())
		}
		cb, bb := BitmaskSizes(dt, rows, cols)
		comp, mask := garbage(cb), garbage(bb)
		st, err := PruneBitmask(comp, mask, src, dt, rows, cols, 3, Rule24)
		if len(src) != rows*cols*dt.Size() {
			if !errors.Is(err, ErrShape) {
				t.Fatalf("%d bytes: error %v, want ErrShape", len(src), err)
			}
			return
		}
		wantC, wantB, wantSt, wantErr := twoStepBitmask(src, dt, rows, cols, 3)
		if !reflect.DeepEqual(err, wantErr) {
			t.Fatalf("PruneBitmask error %v, Prune+PackBitmask %v", err, wantErr)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(comp, wantC) || !bytes.Equal(mask, wantB) {
			t.Fatalf("PruneBitmask differs from Prune+PackBitmask")
		}
		if !close(st.Kept, wantSt.Kept) || !close(st.Total, wantSt.Total) {
			t.Fatalf("stats %+v, Prune %+v", st, wantSt)
		}
	})
}
