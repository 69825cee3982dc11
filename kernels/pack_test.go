package kernels

import (
	"math"
	"math/rand/v2"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// This file is a small test-only implementation of PyTorch's CUTLASS 2:4
// layout (docs/formats.md §1), written from the spec, to generate
// inputs for the GPU tests. Package prune24 holds the production code.

// nonzero reports whether 16-bit bits are not ±0 (IEEE compare: -0.0 is
// zero, NaN is not), for BF16 and F16 alike.
func nonzero(bits uint16) bool { return bits&0x7fff != 0 }

// nibble returns the 4-bit metadata of one group (§1.2, boolean form).
func nibble(x0, x1, x2, x3 uint16) uint16 {
	b := func(v bool) uint16 {
		if v {
			return 1
		}
		return 0
	}
	m0, m1, m3 := nonzero(x0), nonzero(x1), nonzero(x3)
	_ = x2
	e0 := m0 && m1
	e1 := !m0 && m1
	e2 := !m0 && !m1
	i0 := b(e1) | b(e2)<<1
	i1 := b(e0 || e2 || m3) | b(e1 || !m1)<<1
	return i0 | i1<<2
}

// metaIndex returns the int16 index of logical meta word M[r][j] in the
// stored meta of a weight with n rows (closed form of §1.5).
func metaIndex(r, j, n int) int {
	rr := r % 32
	upper := rr / 16
	jj := rr % 8
	half := (rr / 8) % 2
	t := 2*upper + j%2
	return 2*((j/2)*n+(r/32)*32+jj*4+t) + half
}

// metaIndexLoop is the same index from the §1.5 reorder loop, as a
// cross-check of metaIndex.
func metaIndexLoop(r, c, m int) int {
	const g, w = 32, 4
	rr := (r/g)*g + (r%8)*w + (r%g)/8
	cc := c
	if rr%2 == 0 && cc%2 == 1 {
		rr++
		cc--
	} else if rr%2 == 1 && cc%2 == 0 {
		rr--
		cc++
	}
	return (cc/2)*2*m + 2*rr + cc%2
}

// packAmpere encodes a pruned dense weight [n][k] (at most 2 nonzeros per
// group of 4) into packed [n][k/2] and stored meta [n·k/16].
func packAmpere(dense []uint16, n, k int) (packed, meta []uint16) {
	packed = make([]uint16, n*k/2)
	meta = make([]uint16, n*k/16)
	for r := 0; r < n; r++ {
		row := dense[r*k : (r+1)*k]
		for j := 0; j < k/16; j++ {
			var word uint16
			for q := 0; q < 4; q++ {
				g := 4*j + q
				x := row[4*g : 4*g+4]
				nib := nibble(x[0], x[1], x[2], x[3])
				word |= nib << (4 * q)
				packed[r*k/2+2*g] = x[nib&3]
				packed[r*k/2+2*g+1] = x[nib>>2]
			}
			meta[metaIndex(r, j, n)] = word
		}
	}
	return packed, meta
}

// unpackAmpere decodes packed + stored meta back to the dense weight.
func unpackAmpere(packed, meta []uint16, n, k int) []uint16 {
	dense := make([]uint16, n*k)
	for r := 0; r < n; r++ {
		for j := 0; j < k/16; j++ {
			word := meta[metaIndex(r, j, n)]
			for q := 0; q < 4; q++ {
				g := 4*j + q
				nib := (word >> (4 * q)) & 0xf
				dense[r*k+4*g+int(nib&3)] = packed[r*k/2+2*g]
				dense[r*k+4*g+int(nib>>2)] = packed[r*k/2+2*g+1]
			}
		}
	}
	return dense
}

// randValue returns random nonzero 16-bit bits of dt with magnitude in
// [2^-5, 2^2), random sign and mantissa.
func randValue(rng *rand.Rand, dt checkpoint.DType) uint16 {
	sign := uint16(rng.IntN(2)) << 15
	if dt == checkpoint.BF16 {
		return sign | uint16(122+rng.IntN(7))<<7 | uint16(rng.IntN(1<<7))
	}
	return sign | uint16(10+rng.IntN(7))<<10 | uint16(rng.IntN(1<<10))
}

// randPruned returns a random 2:4-pruned weight [n][k]: most groups keep 2
// values at random positions, some keep 1 and some none (degenerate groups).
func randPruned(rng *rand.Rand, dt checkpoint.DType, n, k int) []uint16 {
	w := make([]uint16, n*k)
	for g := 0; g < n*k/4; g++ {
		switch u := rng.IntN(20); {
		case u < 2: // all zero
		case u < 4: // one nonzero
			w[4*g+rng.IntN(4)] = randValue(rng, dt)
		default:
			a := rng.IntN(4)
			b := (a + 1 + rng.IntN(3)) % 4
			w[4*g+a] = randValue(rng, dt)
			w[4*g+b] = randValue(rng, dt)
		}
	}
	return w
}

// randDense returns random 16-bit values (activations), all nonzero.
func randDense(rng *rand.Rand, dt checkpoint.DType, count int) []uint16 {
	x := make([]uint16, count)
	for i := range x {
		x[i] = randValue(rng, dt)
	}
	return x
}

// toFloat64 widens 16-bit bits of dt.
func toFloat64(dt checkpoint.DType, v uint16) float64 {
	if dt == checkpoint.BF16 {
		return float64(math.Float32frombits(uint32(v) << 16))
	}
	sign := 1.0
	if v&0x8000 != 0 {
		sign = -1
	}
	exp := int(v>>10) & 0x1f
	man := float64(v & 0x3ff)
	switch exp {
	case 0:
		return sign * man * math.Ldexp(1, -24)
	case 0x1f:
		if man == 0 {
			return sign * math.Inf(1)
		}
		return math.NaN()
	}
	return sign * (1 + man/1024) * math.Ldexp(1, exp-15)
}

// lut returns the float64 value of every 16-bit pattern of dt.
func lut(dt checkpoint.DType) []float64 {
	t := make([]float64, 1<<16)
	for i := range t {
		t[i] = toFloat64(dt, uint16(i))
	}
	return t
}
