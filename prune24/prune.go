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
		return Stats{}, &NaNError{Row: rowBase + e/cols, Col: e % cols}
	}
	return st, nil
}

// pruneBF16 prunes BF16 src into dst (same length, a multiple of 8) and
// returns the stats so far and the byte offset of the first NaN, or -1.
func pruneBF16(dst, src []byte, rule Rule) (Stats, int) {
	var kept, total float64
	for off := 0; off+8 <= len(src) && off+8 <= len(dst); off += 8 {
		v := binary.LittleEndian.Uint64(src[off:])
		m := v & mag16
		if (m+nanAddBF16)&sign16 != 0 {
			return Stats{kept, total}, off + nanLane16(m+nanAddBF16)
		}
		var keep uint64
		if rule == Rule12 {
			keep = keep12x16(m)
		} else {
			keep = keep24x16(m)
		}
		// Keep a sign bit only where the magnitude is nonzero: -0.0 → +0.0.
		binary.LittleEndian.PutUint64(dst[off:], v&keep&(mag16|(m+mag16)&sign16))
		total += sumBF16(m)
		kept += sumBF16(m & keep)
	}
	return Stats{kept, total}, -1
}

// pruneF16 is pruneBF16 for F16. Its sums are kept in units of 2^-112
// (see sumF16), which cannot hold an infinity: an infinity only sets a
// flag, and since it ranks first it is always kept and makes both sums
// +Inf.
func pruneF16(dst, src []byte, rule Rule) (Stats, int) {
	var kept, total float64
	inf := false
	for off := 0; off+8 <= len(src) && off+8 <= len(dst); off += 8 {
		v := binary.LittleEndian.Uint64(src[off:])
		m := v & mag16
		if (m+infAddF16)&sign16 != 0 {
			if (m+nanAddF16)&sign16 != 0 {
				return statsF16(kept, total, inf), off + nanLane16(m+nanAddF16)
			}
			inf = true // the sums below are then ignored
		}
		var keep uint64
		if rule == Rule12 {
			keep = keep12x16(m)
		} else {
			keep = keep24x16(m)
		}
		binary.LittleEndian.PutUint64(dst[off:], v&keep&(mag16|(m+mag16)&sign16))
		total += sumF16(m)
		kept += sumF16(m & keep)
	}
	return statsF16(kept, total, inf), -1
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

// infAddF16 is nanAddF16 for an F16 infinity or NaN (0x7C00 and above).
const infAddF16 = 0x0400_0400_0400_0400

// sumF16 returns the sum of 4 finite F16 magnitudes m, in units of
// 2^-112: an F16 magnitude shifted left by 13 is, as F32 bits, its value
// times 2^-112 (F16 subnormals become F32 subnormals), and scaling by a
// power of 2 is exact.
func sumF16(m uint64) float64 {
	lo, hi := uint32(m), uint32(m>>32)
	return float64(math.Float32frombits(lo&0x7FFF<<13)) + float64(math.Float32frombits(lo>>3&(0x7FFF<<13))) +
		float64(math.Float32frombits(hi&0x7FFF<<13)) + float64(math.Float32frombits(hi>>3&(0x7FFF<<13)))
}

// statsF16 returns the stats of pruneF16 from its sums in units of
// 2^-112, both +Inf if an infinity was seen.
func statsF16(kept, total float64, inf bool) Stats {
	if inf {
		return Stats{math.Inf(1), math.Inf(1)}
	}
	return Stats{kept * 0x1p112, total * 0x1p112}
}

// sumF32 returns the sum of 2 F32 magnitudes m.
func sumF32(m uint64) float64 {
	return float64(math.Float32frombits(uint32(m))) + float64(math.Float32frombits(uint32(m>>32)))
}

// pruneF32 is pruneBF16 for F32: a group of 4 is two uint64 words, and
// the selection compares the 4 magnitudes as scalars.
func pruneF32(dst, src []byte, rule Rule) (Stats, int) {
	var kept, total float64
	for off := 0; off+16 <= len(src) && off+16 <= len(dst); off += 16 {
		v0 := binary.LittleEndian.Uint64(src[off:])
		v1 := binary.LittleEndian.Uint64(src[off+8:])
		m0, m1 := v0&mag32, v1&mag32
		if ((m0+nanAddF32)|(m1+nanAddF32))&sign32 != 0 {
			return Stats{kept, total}, off + nanLane32(m0+nanAddF32, m1+nanAddF32)
		}
		// The magnitudes a0..a3 are below 2^31, so the top bit of a
		// difference is its sign. For i < j, cij is 1 when j outranks i
		// (aj > ai) and 0 when i outranks j (ties to the lower index).
		// Rule24 keeps an element outranked fewer than 2 times: 0 is
		// outranked c01+c02+c03 times, 1 (1-c01)+c12+c13, 2
		// (1-c02)+(1-c12)+c23 and 3 3-c03-c13-c23 times; ki is the sign
		// bit of that count minus 2.
		a0, a1, a2, a3 := m0&0x7FFFFFFF, m0>>32, m1&0x7FFFFFFF, m1>>32
		c01 := (a0 - a1) >> 63
		c23 := (a2 - a3) >> 63
		var k0, k1, k2, k3 uint64
		if rule == Rule12 {
			k0, k1, k2, k3 = c01^1, c01, c23^1, c23
		} else {
			c02 := (a0 - a2) >> 63
			c03 := (a0 - a3) >> 63
			c12 := (a1 - a2) >> 63
			c13 := (a1 - a3) >> 63
			k0 = (c01 + c02 + c03 - 2) >> 63
			k1 = (c12 + c13 - c01 - 1) >> 63
			k2 = (c23 - c02 - c12) >> 63
			k3 = (1 - c03 - c13 - c23) >> 63
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
