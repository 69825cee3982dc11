package prune24

import (
	"encoding/binary"
	"math"
)

// Prune writes to dst the matrix src pruned by rule, and returns the
// magnitude sums of the elements kept and of all elements.
//
// src holds whole rows of cols elements of type dt; cols must be a
// multiple of 4 and dst as long as src. Rule24 keeps, in every group of 4
// consecutive elements of a row, the 2 of largest magnitude; Rule12 keeps
// the larger of every pair. Magnitudes compare as the unsigned bits without
// the sign bit, so +Inf ranks above every finite value; ties go to the
// lower index. Pruned elements become +0.0 (all bits zero). Kept elements
// are copied bit for bit, except that -0.0 becomes +0.0.
//
// A NaN anywhere in src is an error: a [*NaNError] for the first NaN in
// row-major order, with Row counted from rowBase. On any error the content
// of dst is unspecified.
//
// dst may be src itself, to prune in place; otherwise the two must not
// overlap.
func Prune(dst, src []byte, dt DType, cols int, rowBase int, rule Rule) (Stats, error) {
	if err := checkDType(dt); err != nil {
		return Stats{}, err
	}
	if err := checkRule(rule); err != nil {
		return Stats{}, err
	}
	if _, err := wholeRows(len(src), dt, cols); err != nil {
		return Stats{}, err
	}
	if err := checkLen("dst", len(dst), len(src)); err != nil {
		return Stats{}, err
	}
	var (
		st  Stats
		nan int
	)
	switch dt {
	case BF16:
		st, nan = pruneBF16(dst, src, rule)
	case F16:
		st, nan = pruneF16(dst, src, rule)
	default:
		st, nan = pruneF32(dst, src, rule)
	}
	if nan >= 0 {
		e := nan / dt.Size()
		return st, &NaNError{Row: rowBase + e/cols, Col: e % cols}
	}
	return st, nil
}

// select16 returns the group v of 4 16-bit elements, with magnitudes m,
// pruned by rule.
func select16(v, m uint64, rule Rule) uint64 {
	a0, a1, a2, a3 := m&0xFFFF, m>>16&0xFFFF, m>>32&0xFFFF, m>>48
	var k0, k1, k2, k3 uint64
	if rule == Rule12 {
		k0, k1, k2, k3 = keep12(a0, a1, a2, a3)
	} else {
		k0, k1, k2, k3 = keep24(a0, a1, a2, a3)
	}
	keep := (k0 | k1<<16 | k2<<32 | k3<<48) * 0xFFFF
	// Keep a sign bit only where the magnitude is nonzero: -0.0 → +0.0.
	return v & keep & (mag16 | (m+mag16)&sign16)
}

// pruneBF16 prunes BF16 src into dst (same length, a multiple of 8) and
// returns the stats so far and the byte offset of the first NaN's group,
// or -1.
func pruneBF16(dst, src []byte, rule Rule) (Stats, int) {
	var kept, total float64
	for off := 0; off+8 <= len(src) && off+8 <= len(dst); off += 8 {
		v := binary.LittleEndian.Uint64(src[off:])
		m := v & mag16
		if (m+nanAddBF16)&sign16 != 0 {
			return Stats{kept, total}, off + nanLane16(m+nanAddBF16)
		}
		out := select16(v, m, rule)
		binary.LittleEndian.PutUint64(dst[off:], out)
		total += sumBF16(m)
		kept += sumBF16(out & mag16)
	}
	return Stats{kept, total}, -1
}

// pruneF16 is pruneBF16 for F16.
func pruneF16(dst, src []byte, rule Rule) (Stats, int) {
	var kept, total float64
	for off := 0; off+8 <= len(src) && off+8 <= len(dst); off += 8 {
		v := binary.LittleEndian.Uint64(src[off:])
		m := v & mag16
		if (m+nanAddF16)&sign16 != 0 {
			return Stats{kept, total}, off + nanLane16(m+nanAddF16)
		}
		out := select16(v, m, rule)
		binary.LittleEndian.PutUint64(dst[off:], out)
		total += sumF16(m)
		kept += sumF16(out & mag16)
	}
	return Stats{kept, total}, -1
}

// nanLane16 returns the byte offset in its group of the first lane whose
// sign bit is set in s.
func nanLane16(s uint64) int {
	for i := 0; i < 4; i++ {
		if s>>(16*i+15)&1 != 0 {
			return 2 * i
		}
	}
	return 0
}

// sumBF16 returns the sum of 4 BF16 magnitudes m.
func sumBF16(m uint64) float64 {
	lo, hi := uint32(m), uint32(m>>32)
	return float64(math.Float32frombits(lo<<16)) + float64(math.Float32frombits(lo&0xFFFF0000)) +
		float64(math.Float32frombits(hi<<16)) + float64(math.Float32frombits(hi&0xFFFF0000))
}

// sumF16 returns the sum of 4 F16 magnitudes m, none a NaN.
func sumF16(m uint64) float64 {
	return f16Mag(m&0xFFFF) + f16Mag(m>>16&0xFFFF) + f16Mag(m>>32&0xFFFF) + f16Mag(m>>48)
}

// sumF32 returns the sum of 2 F32 magnitudes m.
func sumF32(m uint64) float64 {
	return float64(math.Float32frombits(uint32(m))) + float64(math.Float32frombits(uint32(m>>32)))
}

// pruneF32 is pruneBF16 for F32: a group of 4 is two uint64 words.
func pruneF32(dst, src []byte, rule Rule) (Stats, int) {
	var kept, total float64
	for off := 0; off+16 <= len(src) && off+16 <= len(dst); off += 16 {
		v0 := binary.LittleEndian.Uint64(src[off:])
		v1 := binary.LittleEndian.Uint64(src[off+8:])
		m0, m1 := v0&mag32, v1&mag32
		if ((m0+nanAddF32)|(m1+nanAddF32))&sign32 != 0 {
			return Stats{kept, total}, off + nanLane32(m0+nanAddF32, m1+nanAddF32)
		}
		a0, a1, a2, a3 := m0&0x7FFFFFFF, m0>>32, m1&0x7FFFFFFF, m1>>32
		var k0, k1, k2, k3 uint64
		if rule == Rule12 {
			k0, k1, k2, k3 = keep12(a0, a1, a2, a3)
		} else {
			k0, k1, k2, k3 = keep24(a0, a1, a2, a3)
		}
		keep0 := (k0 | k1<<32) * 0xFFFFFFFF
		keep1 := (k2 | k3<<32) * 0xFFFFFFFF
		out0 := v0 & keep0 & (mag32 | (m0+mag32)&sign32)
		out1 := v1 & keep1 & (mag32 | (m1+mag32)&sign32)
		binary.LittleEndian.PutUint64(dst[off:], out0)
		binary.LittleEndian.PutUint64(dst[off+8:], out1)
		total += sumF32(m0) + sumF32(m1)
		kept += sumF32(m0&keep0) + sumF32(m1&keep1)
	}
	return Stats{kept, total}, -1
}

// nanLane32 returns the byte offset in its group of the first F32 lane
// whose sign bit is set in s0 (lanes 0, 1) or s1 (lanes 2, 3).
func nanLane32(s0, s1 uint64) int {
	switch {
	case s0&(1<<31) != 0:
		return 0
	case s0&(1<<63) != 0:
		return 4
	case s1&(1<<31) != 0:
		return 8
	}
	return 12
}
