package prune24

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// nibbleTable is the full table of docs/formats.md §1.2: the nonzero mask
// m0m1m2m3 of a group and the index pair (i0, i1) with its nibble.
var nibbleTable = []struct {
	mask   string
	i0, i1 int
	nib    byte
}{
	{"0000", 2, 3, 0xE}, {"0001", 2, 3, 0xE}, {"0010", 2, 3, 0xE}, {"0011", 2, 3, 0xE},
	{"0100", 1, 2, 0x9}, {"0101", 1, 3, 0xD}, {"0110", 1, 2, 0x9}, {"0111", 1, 3, 0xD},
	{"1000", 0, 2, 0x8}, {"1001", 0, 3, 0xC}, {"1010", 0, 2, 0x8}, {"1011", 0, 3, 0xC},
	{"1100", 0, 1, 0x4}, {"1101", 0, 1, 0x4}, {"1110", 0, 1, 0x4}, {"1111", 0, 1, 0x4},
}

// maskBits returns the lane mask (lane i at bit i) of a string m0m1m2m3.
func maskBits(s string) uint64 {
	var idx uint64
	for i := range 4 {
		if s[i] == '1' {
			idx |= 1 << i
		}
	}
	return idx
}

func TestNibbleTable(t *testing.T) {
	for _, tt := range nibbleTable {
		idx := maskBits(tt.mask)
		if int(tt.nib) != tt.i0|tt.i1<<2 {
			t.Fatalf("table row %s: nibble %#x is not i0|i1<<2", tt.mask, tt.nib)
		}
		// The boolean form of §1.2.
		if i0, i1 := refNibble(idx&1 != 0, idx&2 != 0, idx&4 != 0, idx&8 != 0); i0 != tt.i0 || i1 != tt.i1 {
			t.Errorf("refNibble(%s) = (%d, %d), want (%d, %d)", tt.mask, i0, i1, tt.i0, tt.i1)
		}
		// The constant the fast code uses.
		if got := nibble(ampereNibbles, idx); got != uint64(tt.nib) {
			t.Errorf("ampereNibbles[%s] = %#x, want %#x", tt.mask, got, tt.nib)
		}
		if got, want := over2>>idx&1 != 0, countOnes(tt.mask) > 2; got != want {
			t.Errorf("over2[%s] = %v, want %v", tt.mask, got, want)
		}
	}
}

func countOnes(s string) int {
	n := 0
	for _, c := range s {
		if c == '1' {
			n++
		}
	}
	return n
}

// TestNibbleTablePacked checks the §1.2 table through PackAmpere: the
// group at row 0, column 0 of a 32×64 F16 matrix has the row's mask (with
// -0.0 and +0.0 as zeros), and its nibble is the low nibble of the first
// stored meta word.
func TestNibbleTablePacked(t *testing.T) {
	const rows, cols = 32, 64
	for _, tt := range nibbleTable {
		d := make([]byte, rows*cols*2)
		vals := []uint32{0x3C00, 0xC000, 0x4200, 0x4400} // 1, -2, 3, 4
		for i := range 4 {
			if tt.mask[i] == '1' {
				putBits(d, i, checkpoint.F16, vals[i])
			} else if i%2 == 1 {
				putBits(d, i, checkpoint.F16, 0x8000)
			}
		}
		pb, mb := AmpereSizes(checkpoint.F16, rows, cols)
		packed, meta := make([]byte, pb), make([]byte, mb)
		err := PackAmpere(packed, meta, d, checkpoint.F16, rows, cols)
		if n := countOnes(tt.mask); n > 2 {
			var se *StructureError
			if !errors.As(err, &se) || se.Row != 0 || se.Col != 0 || se.Nonzero != n || !errors.Is(err, ErrNot24) {
				t.Errorf("mask %s: PackAmpere error %v, want a StructureError at row 0, column 0 with %d nonzeros", tt.mask, err, n)
			}
			continue
		}
		if err != nil {
			t.Fatalf("mask %s: %v", tt.mask, err)
		}
		if got := meta[0] & 0xF; got != tt.nib {
			t.Errorf("mask %s: nibble %#x, want %#x", tt.mask, got, tt.nib)
		}
		if p0, p1 := getBits(packed, 0, checkpoint.F16), getBits(packed, 1, checkpoint.F16); p0 != getBits(d, tt.i0, checkpoint.F16) || p1 != getBits(d, tt.i1, checkpoint.F16) {
			t.Errorf("mask %s: packed (%#x, %#x), want elements %d and %d", tt.mask, p0, p1, tt.i0, tt.i1)
		}
	}
}

func TestNibbleConstants(t *testing.T) {
	for idx := uint64(0); idx < 16; idx++ {
		ones := 0
		var set []uint64
		for i := uint64(0); i < 4; i++ {
			if idx>>i&1 != 0 {
				ones++
				set = append(set, i)
			}
		}
		// maskPairs: the pair of the 2 set bits.
		want := uint64(0)
		if ones == 2 {
			want = set[0] | set[1]<<2
		}
		if got := nibble(maskPairs, idx); got != want {
			t.Errorf("maskPairs[%04b] = %#x, want %#x", idx, got, want)
		}
		// bitmaskPairs: nonzeros plus the lowest zeros to make 2.
		want = 0
		if ones <= 2 {
			keep := idx
			for i := uint64(0); i < 4 && ones < 2; i++ {
				if keep>>i&1 == 0 {
					keep |= 1 << i
					ones++
				}
			}
			want = nibble(maskPairs, keep)
		}
		if got := nibble(bitmaskPairs, idx); got != want {
			t.Errorf("bitmaskPairs[%04b] = %#x, want %#x", idx, got, want)
		}
	}
	for n := uint64(0); n < 16; n++ {
		want := n == 0x4 || n == 0x8 || n == 0x9 || n == 0xC || n == 0xD || n == 0xE
		if got := validNibbles>>n&1 != 0; got != want {
			t.Errorf("validNibbles[%#x] = %v, want %v", n, got, want)
		}
	}
}

func TestLaneMask(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		v, w := rng.Uint64(), rng.Uint64()
		if rng.IntN(2) == 0 {
			v &= 0x8000_8000_8000_8000 | rng.Uint64()&0x0001_0001_0001_0001
		}
		var want uint64
		for i := range 4 {
			if v>>(16*i)&0x7FFF != 0 {
				want |= 1 << i
			}
		}
		if got := laneMask16(nonzero16(v)); got != want {
			t.Fatalf("laneMask16(nonzero16(%#x)) = %04b, want %04b", v, got, want)
		}
		want = 0
		for i, x := range []uint64{v, v >> 32, w, w >> 32} {
			if x&0x7FFF_FFFF != 0 {
				want |= 1 << i
			}
		}
		if got := laneMask32(nonzero32(v), nonzero32(w)); got != want {
			t.Fatalf("laneMask32(%#x, %#x) = %04b, want %04b", v, w, got, want)
		}
	}
}

// TestPruneSmallExhaustive prunes every group of 4 magnitudes from a
// small set with many ties (and, separately, from the top of the range:
// the largest finite value and infinity), under every sign pattern of a
// group, and compares with the sorting reference.
func TestPruneSmallExhaustive(t *testing.T) {
	for _, dt := range allDTypes {
		sp := specials(dt)
		for _, mags := range [][]uint32{
			{0, fromFloat32(1, dt), fromFloat32(2, dt), fromFloat32(3, dt)},
			{sp[4], sp[6], sp[8], sp[2]}, // least subnormal, largest subnormal, largest finite, +Inf
		} {
			src := make([]byte, 256*16*4*dt.Size())
			e := 0
			for code := range 256 {
				for signs := range 16 {
					for i := range 4 {
						b := mags[code>>(2*i)&3]
						if signs>>i&1 != 0 {
							b |= negZeroBits(dt)
						}
						putBits(src, e, dt, b)
						e++
					}
				}
			}
			for _, rule := range []Rule{Rule24, Rule12} {
				want, wantSt, err := refPrune(src, dt, 4, 0, rule)
				if err != nil {
					t.Fatal(err)
				}
				dst := make([]byte, len(src))
				st, err := Prune(dst, src, dt, 4, 0, rule)
				if err != nil {
					t.Fatal(err)
				}
				if i := firstDiff(dst, want, dt); i >= 0 {
					t.Errorf("%v %v: group % x pruned to % x, want % x", dt, rule, src[i/4*4*dt.Size():][:4*dt.Size()],
						dst[i/4*4*dt.Size():][:4*dt.Size()], want[i/4*4*dt.Size():][:4*dt.Size()])
				}
				if !close(st.Kept, wantSt.Kept) || !close(st.Total, wantSt.Total) {
					t.Errorf("%v %v: stats %+v, want %+v", dt, rule, st, wantSt)
				}
			}
		}
	}
}
