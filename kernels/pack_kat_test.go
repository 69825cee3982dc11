package kernels

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// f16Int returns the F16 bits of a small positive integer.
func f16Int(v int) uint16 {
	e := 0
	for 1<<(e+1) <= v {
		e++
	}
	return uint16(e+15)<<10 | uint16((v-1<<e)<<(10-e))
}

func le16(s []uint16) []byte {
	b := make([]byte, 2*len(s))
	for i, v := range s {
		binary.LittleEndian.PutUint16(b[2*i:], v)
	}
	return b
}

// TestPackKAT checks the test packer against the known answer of
// formats.md §1.6 (verified against torch 2.11).
func TestPackKAT(t *testing.T) {
	pat := [8][4]bool{
		{true, true, false, false}, {true, false, true, false}, {true, false, false, true}, {false, true, true, false},
		{false, true, false, true}, {false, false, true, true}, {false, false, false, false}, {false, false, false, true},
	}
	const n, k = 32, 64
	dense := make([]uint16, n*k)
	for i := 0; i < n; i++ {
		for q := 0; q < k/4; q++ {
			for tt := 0; tt < 4; tt++ {
				if pat[(i+q)%8][tt] {
					dense[i*k+4*q+tt] = f16Int(1 + (64*i+4*q+tt)%13)
				}
			}
		}
	}
	if got := f16Int(13); got != 0x4a80 {
		t.Fatalf("f16Int(13) = %#x, want 0x4a80", got)
	}
	packed, meta := packAmpere(dense, n, k)
	want16 := []uint16{40068, 40068, 61165, 61165, 40068, 40068, 61165, 61165,
		55752, 55752, 20206, 20206, 55752, 55752, 20206, 20206}
	if !slices.Equal(meta[:16], want16) {
		t.Errorf("first stored meta = %v, want %v", meta[:16], want16)
	}
	for j, want := range []uint16{0x9c84, 0xeeed, 0x9c84, 0xeeed} {
		if got := meta[metaIndex(0, j, n)]; got != want {
			t.Errorf("M[0][%d] = %#x, want %#x", j, got, want)
		}
	}
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	if got, want := sum(le16(meta)), "0fd3409c07f0952af575e20ae3eddf77b77b0ebbefebac67341273f39e1eea20"; got != want {
		t.Errorf("sha256(meta) = %s, want %s", got, want)
	}
	if got, want := sum(le16(packed)), "52749a4d3ac061b6b22f666294f0217aa4e15eb37c3eb0c40e7d056d20c4d286"; got != want {
		t.Errorf("sha256(packed) = %s, want %s", got, want)
	}
}

// TestMetaIndexClosedForm checks the closed form against the reorder loop
// of §1.5 and that it is a bijection.
func TestMetaIndexClosedForm(t *testing.T) {
	for _, n := range []int{32, 64, 96, 160} {
		for _, k := range []int{64, 128, 192} {
			mc := k / 16
			seen := make([]bool, n*mc)
			for r := 0; r < n; r++ {
				for c := 0; c < mc; c++ {
					got, want := metaIndex(r, c, n), metaIndexLoop(r, c, n)
					if got != want {
						t.Fatalf("n=%d k=%d: metaIndex(%d,%d) = %d, loop gives %d", n, k, r, c, got, want)
					}
					if seen[got] {
						t.Fatalf("n=%d k=%d: index %d used twice", n, k, got)
					}
					seen[got] = true
				}
			}
		}
	}
}

// TestPackRoundTrip checks unpack(pack(W)) == W on random pruned weights,
// degenerate groups included.
func TestPackRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
		const n, k = 96, 192
		w := randPruned(rng, dt, n, k)
		packed, meta := packAmpere(w, n, k)
		if got := unpackAmpere(packed, meta, n, k); !slices.Equal(got, w) {
			t.Fatalf("%v: round trip differs", dt)
		}
		for i, m := range meta {
			for q := 0; q < 4; q++ {
				switch (m >> (4 * q)) & 0xf {
				case 0x4, 0x8, 0x9, 0xc, 0xd, 0xe:
				default:
					t.Fatalf("%v: meta[%d] = %#x has an invalid nibble", dt, i, m)
				}
			}
		}
	}
}

func TestToFloat64(t *testing.T) {
	for _, c := range []struct {
		dt   checkpoint.DType
		bits uint16
		want float64
	}{
		{checkpoint.F16, 0x3c00, 1}, {checkpoint.F16, 0xc000, -2}, {checkpoint.F16, 0x0001, 5.960464477539063e-08}, {checkpoint.F16, 0x7bff, 65504},
		{checkpoint.BF16, 0x3f80, 1}, {checkpoint.BF16, 0xc040, -3}, {checkpoint.BF16, 0x3e00, 0.125},
	} {
		if got := toFloat64(c.dt, c.bits); got != c.want {
			t.Errorf("toFloat64(%v, %#x) = %v, want %v", c.dt, c.bits, got, c.want)
		}
	}
}
