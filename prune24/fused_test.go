package prune24

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// twoStepAmpere is what PruneAmpere must equal: Prune, then PackAmpere.
func twoStepAmpere(src []byte, dt checkpoint.DType, rows, cols, rowBase int, rule Rule) (packed, meta []byte, st Stats, err error) {
	pruned := make([]byte, len(src))
	st, err = Prune(pruned, src, dt, cols, rowBase, rule)
	if err != nil {
		return nil, nil, Stats{}, err
	}
	pb, mb := AmpereSizes(dt, rows, cols)
	packed, meta = make([]byte, pb), make([]byte, mb)
	if err := PackAmpere(packed, meta, pruned, dt, rows, cols); err != nil {
		return nil, nil, Stats{}, err
	}
	return packed, meta, st, nil
}

// twoStepBitmask is what PruneBitmask must equal: Prune, then
// PackBitmask.
func twoStepBitmask(src []byte, dt checkpoint.DType, rows, cols, rowBase int) (comp, mask []byte, st Stats, err error) {
	pruned := make([]byte, len(src))
	st, err = Prune(pruned, src, dt, cols, rowBase, Rule24)
	if err != nil {
		return nil, nil, Stats{}, err
	}
	cb, bb := BitmaskSizes(dt, rows, cols)
	comp, mask = make([]byte, cb), make([]byte, bb)
	if err := PackBitmask(comp, mask, pruned, dt, rows, cols); err != nil {
		return nil, nil, Stats{}, err
	}
	return comp, mask, st, nil
}

// garbage returns n bytes of 0xA5, so that a byte a function fails to
// write shows.
func garbage(n int) []byte {
	return bytes.Repeat([]byte{0xA5}, n)
}

// spoil plants, by the choice c, NaNs, large values or infinities in the
// matrix b of dt.
func spoil(rng *rand.Rand, b []byte, dt checkpoint.DType, c int) {
	n := len(b) / dt.Size()
	big := map[checkpoint.DType][]uint32{
		checkpoint.F16:  {0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7A00},
		checkpoint.BF16: {0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7C00, 0x7BFF},
		checkpoint.F32:  {0x7F7F_FFFF, 0xFF7F_FFFF, 0x7F80_0000, 0xFF80_0000, 0x7C00_0000, 0x7BFF_FFFF},
	}[dt]
	switch c {
	case 1: // NaNs
		for range 1 + rng.IntN(3) {
			putBits(b, rng.IntN(n), dt, nanBits(rng, dt))
		}
	case 2: // the largest finite values, infinities, the float32 slow-path threshold
		for range 1 + rng.IntN(n/4+1) {
			putBits(b, rng.IntN(n), dt, big[rng.IntN(len(big))])
		}
	}
}

func TestPruneAmpereProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 4))
	for iter := range 400 {
		dt := allDTypes[iter%3]
		rule := ampereRule(dt)
		if iter%5 == 4 { // the other rule: the fallback, and F32's StructureError
			rule = Rule24 + Rule12 - rule
		}
		rows, cols := randAmpereShape(rng, dt)
		src := randMatrix(rng, dt, rows, cols)
		spoil(rng, src, dt, iter/3%3)
		rowBase := rng.IntN(1000)
		name := fmt.Sprintf("%v %v %d×%d", dt, rule, rows, cols)

		wantP, wantM, wantSt, wantErr := twoStepAmpere(src, dt, rows, cols, rowBase, rule)
		pb, mb := AmpereSizes(dt, rows, cols)
		packed, meta := garbage(pb), garbage(mb)
		srcCopy := bytes.Clone(src)
		st, err := PruneAmpere(packed, meta, src, dt, rows, cols, rowBase, rule)
		if !bytes.Equal(src, srcCopy) {
			t.Fatalf("%s: PruneAmpere changed src", name)
		}
		if !reflect.DeepEqual(err, wantErr) {
			t.Fatalf("%s: error %v, Prune+PackAmpere %v", name, err, wantErr)
		}
		if err != nil {
			continue
		}
		if !bytes.Equal(packed, wantP) {
			t.Fatalf("%s: packed differs from Prune+PackAmpere at element %d", name, firstDiff(packed, wantP, dt))
		}
		if !bytes.Equal(meta, wantM) {
			t.Fatalf("%s: meta differs from Prune+PackAmpere at byte %d", name, 2*firstDiff(meta, wantM, checkpoint.F16))
		}
		_, refSt, _ := refPrune(src, dt, cols, rowBase, rule)
		if !close(st.Kept, refSt.Kept) || !close(st.Total, refSt.Total) || !close(st.Kept, wantSt.Kept) || !close(st.Total, wantSt.Total) {
			t.Fatalf("%s: stats %+v, Prune %+v, exact %+v", name, st, wantSt, refSt)
		}
	}
}

// randBitmaskShape returns a random shape for the bitmask layout: rows
// of up to 3 blocks and a partial one, with cols%8 == 4 now and then.
func randBitmaskShape(rng *rand.Rand) (rows, cols int) {
	return 1 + rng.IntN(6), 4 * (1 + rng.IntN(60))
}

func TestPruneBitmaskProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(32, 5))
	for iter := range 600 {
		dt := allDTypes[iter%3]
		rows, cols := randBitmaskShape(rng)
		src := randMatrix(rng, dt, rows, cols)
		spoil(rng, src, dt, iter/3%3)
		rowBase := rng.IntN(1000)
		name := fmt.Sprintf("%v %d×%d", dt, rows, cols)

		wantC, wantB, wantSt, wantErr := twoStepBitmask(src, dt, rows, cols, rowBase)
		cb, bb := BitmaskSizes(dt, rows, cols)
		comp, mask := garbage(cb), garbage(bb)
		srcCopy := bytes.Clone(src)
		st, err := PruneBitmask(comp, mask, src, dt, rows, cols, rowBase, Rule24)
		if !bytes.Equal(src, srcCopy) {
			t.Fatalf("%s: PruneBitmask changed src", name)
		}
		if !reflect.DeepEqual(err, wantErr) {
			t.Fatalf("%s: error %v, Prune+PackBitmask %v", name, err, wantErr)
		}
		if err != nil {
			continue
		}
		if !bytes.Equal(comp, wantC) {
			t.Fatalf("%s: compressed differs from Prune+PackBitmask at element %d", name, firstDiff(comp, wantC, dt))
		}
		if !bytes.Equal(mask, wantB) {
			t.Fatalf("%s: bitmask % x, Prune+PackBitmask % x", name, mask, wantB)
		}
		_, refSt, _ := refPrune(src, dt, cols, rowBase, Rule24)
		if !close(st.Kept, refSt.Kept) || !close(st.Total, refSt.Total) || !close(st.Kept, wantSt.Kept) || !close(st.Total, wantSt.Total) {
			t.Fatalf("%s: stats %+v, Prune %+v, exact %+v", name, st, wantSt, refSt)
		}
	}
}

// TestFusedNaN checks the location of the first NaN, which the fused
// functions find in a single pass, against the two-step reference.
func TestFusedNaN(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 6))
	for iter := range 300 {
		dt := allDTypes[iter%3]
		rows, cols := randAmpereShape(rng, dt)
		src := randMatrix(rng, dt, rows, cols)
		first := rng.IntN(rows * cols)
		putBits(src, first, dt, nanBits(rng, dt))
		for range rng.IntN(3) {
			putBits(src, first+rng.IntN(rows*cols-first), dt, nanBits(rng, dt))
		}
		rowBase := rng.IntN(1000)
		want := &NaNError{Row: rowBase + first/cols, Col: first % cols}
		pb, mb := AmpereSizes(dt, rows, cols)
		for _, rule := range []Rule{Rule24, Rule12} {
			_, err := PruneAmpere(make([]byte, pb), make([]byte, mb), src, dt, rows, cols, rowBase, rule)
			var ne *NaNError
			if !errors.As(err, &ne) || !errors.Is(err, ErrNaN) || *ne != *want {
				t.Fatalf("%v %v: PruneAmpere error %v, want %v", dt, rule, err, want)
			}
		}
		cb, bb := BitmaskSizes(dt, rows, cols)
		_, err := PruneBitmask(make([]byte, cb), make([]byte, bb), src, dt, rows, cols, rowBase, Rule24)
		var ne *NaNError
		if !errors.As(err, &ne) || *ne != *want {
			t.Fatalf("%v: PruneBitmask error %v, want %v", dt, err, want)
		}
	}
}

// TestPruneAmpereRule24F32 checks the StructureError of F32 pruned by
// Rule24 into the 1:2 layout: a pair that keeps 2 nonzeros.
func TestPruneAmpereRule24F32(t *testing.T) {
	const rows, cols = 64, 32
	src := make([]byte, rows*cols*4)
	putBits(src, 40*cols+8, checkpoint.F32, math.Float32bits(1))
	putBits(src, 40*cols+9, checkpoint.F32, math.Float32bits(-2))
	pb, mb := AmpereSizes(checkpoint.F32, rows, cols)
	_, err := PruneAmpere(make([]byte, pb), make([]byte, mb), src, checkpoint.F32, rows, cols, 7, Rule24)
	var se *StructureError
	if !errors.As(err, &se) || !errors.Is(err, ErrNot24) {
		t.Fatalf("PruneAmpere = %v, want a StructureError", err)
	}
	if want := (StructureError{Row: 40, Col: 8, Rule: Rule12, Nonzero: 2}); *se != want {
		t.Fatalf("%+v, want %+v", *se, want)
	}
	// A NaN in a later row comes first, as with Prune of the whole matrix.
	putBits(src, 50*cols+3, checkpoint.F32, 0x7FC0_0000)
	_, err = PruneAmpere(make([]byte, pb), make([]byte, mb), src, checkpoint.F32, rows, cols, 7, Rule24)
	if want := (&NaNError{Row: 57, Col: 3}); !reflect.DeepEqual(err, error(want)) {
		t.Fatalf("PruneAmpere = %v, want %v", err, want)
	}
}

func TestFusedErrors(t *testing.T) {
	pb, mb := AmpereSizes(checkpoint.BF16, 32, 64)
	dn := 32 * 64 * 2
	cb, bb := BitmaskSizes(checkpoint.BF16, 2, 12)
	tests := []struct {
		name       string
		a, b, src  int
		dt         checkpoint.DType
		rows, cols int
		rule       Rule
		want       error
	}{
		{"ampere ok", pb, mb, dn, checkpoint.BF16, 32, 64, Rule24, nil},
		{"ampere bad dtype", pb, mb, dn, checkpoint.DType("I8"), 32, 64, Rule24, ErrDType},
		{"ampere bad rule", pb, mb, dn, checkpoint.BF16, 32, 64, Rule(5), ErrInvalidRule},
		{"ampere rows", pb, mb, dn, checkpoint.BF16, 16, 128, Rule24, ErrShape},
		{"ampere cols", pb, mb, dn, checkpoint.BF16, 64, 32, Rule24, ErrShape},
		{"ampere src short", pb, mb, dn - 2, checkpoint.BF16, 32, 64, Rule24, ErrShape},
		{"ampere src long", pb, mb, dn + 128, checkpoint.BF16, 32, 64, Rule24, ErrShape},
		{"ampere packed", pb - 2, mb, dn, checkpoint.BF16, 32, 64, Rule24, ErrShape},
		{"ampere meta", pb, mb + 2, dn, checkpoint.BF16, 32, 64, Rule24, ErrShape},
		{"ampere negative", 0, 0, 0, checkpoint.BF16, -32, 64, Rule24, ErrShape},
		{"ampere huge", 0, 0, 0, checkpoint.F32, 1 << 62, 1 << 62, Rule12, ErrShape},
		{"bitmask ok", cb, bb, 2 * 12 * 2, checkpoint.BF16, 2, 12, Rule24, nil},
		{"bitmask empty", 0, 0, 0, checkpoint.F16, 0, 8, Rule24, nil},
		{"bitmask no columns", 0, 0, 0, checkpoint.F32, 3, 0, Rule24, nil},
		{"bitmask Rule12", cb, bb, 2 * 12 * 2, checkpoint.BF16, 2, 12, Rule12, ErrInvalidRule},
		{"bitmask bad rule", cb, bb, 2 * 12 * 2, checkpoint.BF16, 2, 12, Rule(-1), ErrInvalidRule},
		{"bitmask bad dtype", cb, bb, 2 * 12 * 2, checkpoint.DType("I8"), 2, 12, Rule24, ErrDType},
		{"bitmask cols", cb, bb, 2 * 12 * 2, checkpoint.BF16, 4, 6, Rule24, ErrShape},
		{"bitmask src", cb, bb, 2*12*2 + 2, checkpoint.BF16, 2, 12, Rule24, ErrShape},
		{"bitmask compressed", cb + 2, bb, 2 * 12 * 2, checkpoint.BF16, 2, 12, Rule24, ErrShape},
		{"bitmask mask", cb, bb - 1, 2 * 12 * 2, checkpoint.BF16, 2, 12, Rule24, ErrShape},
		{"bitmask negative", 0, 0, 0, checkpoint.BF16, -2, 12, Rule24, ErrShape},
		{"bitmask huge", 0, 0, 0, checkpoint.F32, 1 << 40, 1 << 40, Rule24, ErrShape},
	}
	for _, tt := range tests {
		a, b, src := make([]byte, tt.a), make([]byte, tt.b), make([]byte, tt.src)
		var err error
		if tt.name[0] == 'a' {
			_, err = PruneAmpere(a, b, src, tt.dt, tt.rows, tt.cols, 0, tt.rule)
		} else {
			_, err = PruneBitmask(a, b, src, tt.dt, tt.rows, tt.cols, 0, tt.rule)
		}
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%s: error %v, want %v", tt.name, err, tt.want)
		}
	}
}

// exactSum returns Σ|x| over the elements of b (finite), correctly
// rounded.
func exactSum(b []byte, dt checkpoint.DType) float64 {
	s := new(big.Float).SetPrec(1024)
	for i := 0; i < len(b)/dt.Size(); i++ {
		s.Add(s, big.NewFloat(math.Abs(slowValue(getBits(b, i, dt), dt))))
	}
	f, _ := s.Float64()
	return f
}

// TestStatsAccuracy checks the sums against exact ones on data made to
// round badly in float32: in every 16 groups, a 1 in lanes 0 and 2 and
// then values a little above half an ulp of the running sum, so that
// every addition rounds up by almost half an ulp. The relative error
// comes close to the documented 2^-20, and must stay under 1e-6; it also
// checks that magnitudes near the float32 range do not overflow.
func TestStatsAccuracy(t *testing.T) {
	// one, and x whose pairs are a little over half an ulp of one.
	adversarial := map[checkpoint.DType][2]float64{
		checkpoint.F16:  {0x1p14, 0x1p-11 * (1 + 0x1p-10)},
		checkpoint.BF16: {1, 0x1p-25 * (1 + 0x1p-7)},
		checkpoint.F32:  {1, 0x1p-25 * (1 + 0x1p-23)},
	}
	huge := map[checkpoint.DType][]uint32{
		checkpoint.F16:  {0x7BFF},                                // the largest finite
		checkpoint.BF16: {0x7F7F, 0x7DFF, 0x7BFF},                // the largest finite, one whose float32 sums would overflow, the largest the float32 sums take
		checkpoint.F32:  {0x7F7F_FFFF, 0x7DFF_FFFF, 0x7BFF_FFFF}, // the same
	}
	const rows, cols = 64, 128
	for _, dt := range allDTypes {
		var inputs [][]byte
		ax, perBlock := adversarial[dt], blockBytes/dt.Size()
		b := make([]byte, rows*cols*dt.Size())
		for e := 0; e < rows*cols; e++ {
			v := ax[1]
			if e%perBlock == 0 || e%perBlock == 2 {
				v = ax[0]
			}
			putBits(b, e, dt, f64Bits(v, dt))
		}
		inputs = append(inputs, b)
		for _, h := range huge[dt] {
			b := make([]byte, rows*cols*dt.Size())
			for e := 0; e < rows*cols; e++ {
				putBits(b, e, dt, h)
			}
			inputs = append(inputs, b)
		}
		for k, src := range inputs {
			name := fmt.Sprintf("%v input %d", dt, k)
			pruned := make([]byte, len(src))
			rule := ampereRule(dt)
			check := func(fn string, st Stats) {
				t.Helper()
				kept, total := exactSum(pruned, dt), exactSum(src, dt)
				if math.IsInf(st.Total, 0) || !close(st.Kept, kept) || !close(st.Total, total) {
					t.Errorf("%s: %s stats %+v, exact {Kept:%v Total:%v}", name, fn, st, kept, total)
				}
			}
			st, err := Prune(pruned, src, dt, cols, 0, rule)
			if err != nil {
				t.Fatal(err)
			}
			check("Prune", st)
			pb, mb := AmpereSizes(dt, rows, cols)
			st, err = PruneAmpere(make([]byte, pb), make([]byte, mb), src, dt, rows, cols, 0, rule)
			if err != nil {
				t.Fatal(err)
			}
			check("PruneAmpere", st)
			if _, err := Prune(pruned, src, dt, cols, 0, Rule24); err != nil {
				t.Fatal(err)
			}
			cb, bb := BitmaskSizes(dt, rows, cols)
			st, err = PruneBitmask(make([]byte, cb), make([]byte, bb), src, dt, rows, cols, 0, Rule24)
			if err != nil {
				t.Fatal(err)
			}
			check("PruneBitmask", st)
		}
	}
}

// f64Bits returns the bits in dt of v, which must be exact in dt.
func f64Bits(v float64, dt checkpoint.DType) uint32 {
	switch dt {
	case checkpoint.F16:
		return f16FromFloat64(v)
	case checkpoint.BF16:
		return math.Float32bits(float32(v)) >> 16
	}
	return math.Float32bits(float32(v))
}
