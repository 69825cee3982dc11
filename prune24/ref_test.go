package prune24

// Slow, obvious reference implementations that the fast code is tested
// against. They decode values to float64 and follow docs/formats.md literally.

import (
	"math"
	"math/rand/v2"
	"sort"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// slowF16 decodes binary16 bits by the definition of the format.
func slowF16(h uint32) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e := int(h>>10) & 0x1F
	m := float64(h & 0x3FF)
	switch e {
	case 0:
		return s * math.Ldexp(m/1024, -14)
	case 31:
		if m != 0 {
			return math.NaN()
		}
		return s * math.Inf(1)
	}
	return s * math.Ldexp(1+m/1024, e-15)
}

// slowValue decodes the bits of an element of dt.
func slowValue(bits uint32, dt checkpoint.DType) float64 {
	switch dt {
	case checkpoint.F16:
		return slowF16(bits)
	case checkpoint.BF16:
		return float64(math.Float32frombits(bits << 16))
	}
	return float64(math.Float32frombits(bits))
}

// groupOf returns the group size of rule.
func groupOf(rule Rule) int {
	if rule == Rule12 {
		return 2
	}
	return 4
}

// refSelect returns the indices, within the group vals, that rule keeps:
// sorted by |x| as float64, descending, stable so ties go to the lower
// index; -0 and +0 compare equal.
func refSelect(vals []float64) []int {
	idx := make([]int, len(vals))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return math.Abs(vals[idx[a]]) > math.Abs(vals[idx[b]]) })
	return idx[:len(vals)/2]
}

// refPrune is Prune the slow way.
func refPrune(src []byte, dt checkpoint.DType, cols, rowBase int, rule Rule) ([]byte, Stats, error) {
	n := len(src) / dt.Size()
	for i := 0; i < n; i++ {
		if math.IsNaN(slowValue(getBits(src, i, dt), dt)) {
			return nil, Stats{}, &NaNError{Row: rowBase + i/cols, Col: i % cols}
		}
	}
	dst := make([]byte, len(src))
	var st Stats
	g := groupOf(rule)
	for e := 0; e < n; e += g {
		vals := make([]float64, g)
		for i := range vals {
			vals[i] = slowValue(getBits(src, e+i, dt), dt)
			st.Total += math.Abs(vals[i])
		}
		for _, i := range refSelect(vals) {
			st.Kept += math.Abs(vals[i])
			if vals[i] != 0 {
				putBits(dst, e+i, dt, getBits(src, e+i, dt))
			}
		}
	}
	return dst, st, nil
}

// refNonzero reports whether an element is nonzero by IEEE compare.
func refNonzero(b []byte, i int, dt checkpoint.DType) bool {
	return slowValue(getBits(b, i, dt), dt) != 0
}

// refNibble is the boolean form of docs/formats.md §1.2.
func refNibble(m0, m1, m2, m3 bool) (i0, i1 int) {
	b := func(x bool) int {
		if x {
			return 1
		}
		return 0
	}
	e0 := m0 && m1
	e1 := !m0 && m1
	e2 := !m0 && !m1
	i0 = b(e1) | b(e2)<<1
	i1 = b(e0 || e2 || m3) | b(e1 || !m1)<<1
	return i0, i1
}

// refLogicalMeta computes the packed values and logical meta words
// M[r][c] of docs/formats.md §1.2–§1.4.
func refLogicalMeta(d []byte, dt checkpoint.DType, rows, cols int) (packed []byte, M [][]uint16, err error) {
	packed = make([]byte, rows*cols/2*dt.Size())
	M = make([][]uint16, rows)
	per := 4 // elements per group
	if dt == checkpoint.F32 {
		per = 2
	}
	for r := 0; r < rows; r++ {
		M[r] = make([]uint16, cols/per/4)
		for g := 0; g < cols/per; g++ {
			e := r*cols + per*g
			var m [4]bool
			n := 0
			for i := 0; i < per; i++ {
				if refNonzero(d, e+i, dt) {
					n++
				}
			}
			if dt == checkpoint.F32 {
				a, b := refNonzero(d, e, dt), refNonzero(d, e+1, dt)
				m = [4]bool{a, a, b, b}
				if n > 1 {
					return nil, nil, &StructureError{Row: r, Col: per * g, Rule: Rule12, Nonzero: n}
				}
			} else {
				for i := range m {
					m[i] = refNonzero(d, e+i, dt)
				}
				if n > 2 {
					return nil, nil, &StructureError{Row: r, Col: per * g, Rule: Rule24, Nonzero: n}
				}
			}
			i0, i1 := refNibble(m[0], m[1], m[2], m[3])
			M[r][g/4] |= uint16(i0|i1<<2) << (4 * (g % 4))
			if dt == checkpoint.F32 {
				putBits(packed, r*cols/2+g, dt, getBits(d, e+i0/2, dt))
			} else {
				putBits(packed, r*cols/2+2*g, dt, getBits(d, e+i0, dt))
				putBits(packed, r*cols/2+2*g+1, dt, getBits(d, e+i1, dt))
			}
		}
	}
	return packed, M, nil
}

// refMetaOffset is the literal scatter offset of docs/formats.md §1.5 for int16
// meta: logical word M[r][c] goes to R[refMetaOffset(r, c, m)].
func refMetaOffset(r, c, m int) int {
	const G, W = 32, 4
	rr := (r/G)*G + (r%8)*W + (r%G)/8
	cc := c
	if rr%2 == 0 && cc%2 == 1 {
		rr++
		cc--
	} else if rr%2 == 1 && cc%2 == 0 {
		rr--
		cc++
	}
	return (cc/2)*2*m + 2*rr + (cc % 2)
}

// refPackAmpere is PackAmpere the slow way: logical words, then the
// literal scatter loop of §1.5.
func refPackAmpere(d []byte, dt checkpoint.DType, rows, cols int) (packed, meta []byte, err error) {
	packed, M, err := refLogicalMeta(d, dt, rows, cols)
	if err != nil {
		return nil, nil, err
	}
	mc := len(M[0])
	R := make([]uint16, rows*mc)
	for r := 0; r < rows; r++ {
		for c := 0; c < mc; c++ {
			R[refMetaOffset(r, c, rows)] = M[r][c]
		}
	}
	meta = make([]byte, 2*len(R))
	for i, w := range R {
		meta[2*i], meta[2*i+1] = byte(w), byte(w>>8)
	}
	return packed, meta, nil
}

// refUnpackAmpere is UnpackAmpere the slow way: gather with the §1.5
// offsets, then scatter the packed values by the nibbles.
func refUnpackAmpere(packed, meta []byte, dt checkpoint.DType, rows, cols int) ([]byte, error) {
	per := 4
	if dt == checkpoint.F32 {
		per = 2
	}
	mc := cols / per / 4
	dense := make([]byte, rows*cols*dt.Size())
	for r := 0; r < rows; r++ {
		for c := 0; c < mc; c++ {
			o := refMetaOffset(r, c, rows)
			w := int(meta[2*o]) | int(meta[2*o+1])<<8
			for t := 0; t < 4; t++ {
				g := 4*c + t
				nib := w >> (4 * t) & 0xF
				i0, i1 := nib&3, nib>>2
				if dt == checkpoint.F32 {
					if nib != 0x4 && nib != 0xE {
						return nil, &MetaError{Row: r, Group: g, Nibble: byte(nib), Rule: Rule12}
					}
					putBits(dense, r*cols+2*g+i0/2, dt, getBits(packed, r*cols/2+g, dt))
					continue
				}
				switch nib {
				case 0x4, 0x8, 0x9, 0xC, 0xD, 0xE:
				default:
					return nil, &MetaError{Row: r, Group: g, Nibble: byte(nib), Rule: Rule24}
				}
				putBits(dense, r*cols+4*g+i0, dt, getBits(packed, r*cols/2+2*g, dt))
				putBits(dense, r*cols+4*g+i1, dt, getBits(packed, r*cols/2+2*g+1, dt))
			}
		}
	}
	return dense, nil
}

// refPackBitmask is PackBitmask the slow way: a bool mask by the prune
// rule's selection, numpy.packbits(bitorder="little"), a boolean gather.
func refPackBitmask(d []byte, dt checkpoint.DType, rows, cols int) (compressed, bitmask []byte, err error) {
	mask := make([]bool, rows*cols)
	for e := 0; e < rows*cols; e += 4 {
		vals := make([]float64, 4)
		n := 0
		for i := range vals {
			vals[i] = slowValue(getBits(d, e+i, dt), dt)
			if vals[i] != 0 {
				n++
			}
		}
		if n > 2 {
			return nil, nil, &StructureError{Row: e / cols, Col: e % cols, Rule: Rule24, Nonzero: n}
		}
		for _, i := range refSelect(vals) {
			mask[e+i] = true
		}
	}
	nb := (cols + 7) / 8
	bitmask = make([]byte, rows*nb)
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			if mask[r*cols+c] {
				bitmask[r*nb+c/8] |= 1 << (c % 8)
			}
		}
	}
	compressed = make([]byte, len(d)/2)
	k := 0
	for i, m := range mask {
		if m {
			putBits(compressed, k, dt, getBits(d, i, dt))
			k++
		}
	}
	return compressed, bitmask, nil
}

// refUnpackBitmask is UnpackBitmask the slow way: dense[mask] = compressed.
func refUnpackBitmask(compressed, bitmask []byte, dt checkpoint.DType, rows, cols int) ([]byte, error) {
	nb := (cols + 7) / 8
	dense := make([]byte, rows*cols*dt.Size())
	k := 0
	for r := 0; r < rows; r++ {
		for g := 0; g < cols/4; g++ {
			n := 0
			for c := 4 * g; c < 4*g+4; c++ {
				if bitmask[r*nb+c/8]>>(c%8)&1 != 0 {
					n++
				}
			}
			if n != 2 {
				return nil, &BitmaskError{Row: r, Group: g, Bits: n}
			}
		}
		n := 0
		for c := cols; c < 8*nb; c++ {
			if bitmask[r*nb+c/8]>>(c%8)&1 != 0 {
				n++
			}
		}
		if n != 0 {
			return nil, &BitmaskError{Row: r, Group: cols / 4, Bits: n, Padding: true}
		}
		for c := 0; c < cols; c++ {
			if bitmask[r*nb+c/8]>>(c%8)&1 != 0 {
				putBits(dense, r*cols+c, dt, getBits(compressed, k, dt))
				k++
			}
		}
	}
	return dense, nil
}

// specials returns interesting bit patterns of dt: zeros, infinities,
// subnormals, extremes and small integers that tie.
func specials(dt checkpoint.DType) []uint32 {
	switch dt {
	case checkpoint.F16:
		return []uint32{0x0000, 0x8000, 0x7C00, 0xFC00, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00, 0x4000}
	case checkpoint.BF16:
		return []uint32{0x0000, 0x8000, 0x7F80, 0xFF80, 0x0001, 0x8001, 0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x3F80, 0xBF80, 0x4000}
	}
	return []uint32{0, 0x8000_0000, 0x7F80_0000, 0xFF80_0000, 1, 0x8000_0001, 0x007F_FFFF, 0x0080_0000,
		0x7F7F_FFFF, 0xFF7F_FFFF, 0x3F80_0000, 0xBF80_0000, 0x4000_0000}
}

// randFinite returns random non-NaN bits of dt.
func randFinite(rng *rand.Rand, dt checkpoint.DType) uint32 {
	for {
		var b uint32
		if dt == checkpoint.F32 {
			b = rng.Uint32()
		} else {
			b = rng.Uint32() & 0xFFFF
		}
		if !math.IsNaN(slowValue(b, dt)) {
			return b
		}
	}
}

// randElem returns one element of a random group: mostly random finite
// bits, often a special value or a small tying integer.
func randElem(rng *rand.Rand, dt checkpoint.DType) uint32 {
	switch rng.IntN(4) {
	case 0:
		sp := specials(dt)
		return sp[rng.IntN(len(sp))]
	case 1: // ±1, ±2, ±3: frequent ties
		f := float32(1 + rng.IntN(3))
		if rng.IntN(2) == 0 {
			f = -f
		}
		return fromFloat32(f, dt)
	}
	return randFinite(rng, dt)
}

// randZero returns +0.0 or -0.0.
func randZero(rng *rand.Rand, dt checkpoint.DType) uint32 {
	if rng.IntN(2) == 0 {
		return 0
	}
	if dt == checkpoint.F32 {
		return 0x8000_0000
	}
	return 0x8000
}

// randMatrix returns rows×cols random elements of dt, group by group: 0
// to 4 nonzeros (the rest ±0), and groups of one repeated value.
func randMatrix(rng *rand.Rand, dt checkpoint.DType, rows, cols int) []byte {
	b := make([]byte, rows*cols*dt.Size())
	for e := 0; e < rows*cols; e += 4 {
		switch k := rng.IntN(7); k {
		case 5: // all the same magnitude, random signs
			v := randElem(rng, dt)
			for i := 0; i < 4; i++ {
				x := v
				if rng.IntN(2) == 0 {
					x ^= uint32(1) << (8*dt.Size() - 1)
				}
				putBits(b, e+i, dt, x)
			}
		default: // k nonzeros at random places (k = 6: 4 of anything)
			for i := 0; i < 4; i++ {
				putBits(b, e+i, dt, randZero(rng, dt))
			}
			if k == 6 {
				k = 4
			}
			for _, i := range rng.Perm(4)[:min(k, 4)] {
				putBits(b, e+i, dt, randElem(rng, dt))
			}
		}
	}
	return b
}
