package prune24

import (
	"encoding/binary"
	"math"
)

// F32 kernels. A group of 4 F32 elements is two uint64 words of 2 lanes
// each (lanes 0, 1 in the first); a block holds 8 groups, 16 pairs.

// bigAdd32 is the slow-path addend of F32: (m + bigAdd32) & sign32 sets
// the sign bit of every lane from 2^123 on (16 pairs of them could
// overflow a float32 sum), infinities and NaN included.
const bigAdd32 = 0x0300_0000_0300_0000 // 0x8000_0000 - 0x7D00_0000 per lane

// slow32 takes a pair of F32 magnitudes m (kept ones mk) that needs the
// slow path. It returns the byte offset in the pair of its first NaN, or
// -1 after adding the pair's exact sums to wide.
func slow32(wide *Stats, m, mk uint64) int {
	if s := (m + nanAddF32) & sign32; s != 0 {
		if s&(1<<31) != 0 {
			return 0
		}
		return 4
	}
	wide.Add(Stats{
		Kept:  F32ToFloat64(uint32(mk)) + F32ToFloat64(uint32(mk>>32)),
		Total: F32ToFloat64(uint32(m)) + F32ToFloat64(uint32(m>>32)),
	})
	return -1
}

// keep32 returns, as all-ones lanes, the lanes that rule keeps of the
// group of 4 F32 magnitudes m0 (lanes 0, 1) and m1 (lanes 2, 3).
//
// The magnitudes a0..a3 are below 2^31, so the top bit of a difference
// is its sign. For i < j, cij is 1 when j outranks i (aj > ai) and 0 when
// i outranks j (ties to the lower index). Rule24 keeps an element
// outranked fewer than 2 times: 0 is outranked c01+c02+c03 times, 1
// (1-c01)+c12+c13, 2 (1-c02)+(1-c12)+c23 and 3 3-c03-c13-c23 times; ki is
// the sign bit of that count minus 2.
func keep32(m0, m1 uint64, rule Rule) (keep0, keep1 uint64) {
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
	return (k0 | k1<<32) * 0xFFFFFFFF, (k2 | k3<<32) * 0xFFFFFFFF
}

// pruned32 returns the pair v (magnitudes m) with its lanes outside keep
// cleared and a kept -0.0 made +0.0.
func pruned32(v, m, keep uint64) uint64 {
	return v & keep & (mag32 | (m+mag32)&sign32)
}

// prune32 is prune16 for F32 (src a multiple of 16 bytes).
func prune32(s *sums, dst, src []byte, rule Rule) int {
	return forBlocks(dst, src, func(d, b *[blockBytes]byte) int {
		kept, total, nan := pruneBlock32(d, b, rule, &s.wide)
		s.add(kept, total)
		return nan
	})
}

// pruneBlock32 is pruneBlock16 for F32.
func pruneBlock32(d, s *[blockBytes]byte, rule Rule, wide *Stats) (kept, total float64, nan int) {
	_, _ = d[0], s[0] // the nil checks, out of the loop
	var k0, k1, t0, t1 float32
	for i := range blockBytes / 16 {
		v0 := binary.LittleEndian.Uint64(s[16*i:])
		v1 := binary.LittleEndian.Uint64(s[16*i+8:])
		m0, m1 := v0&mag32, v1&mag32
		keep0, keep1 := keep32(m0, m1, rule)
		out0, out1 := pruned32(v0, m0, keep0), pruned32(v1, m1, keep1)
		binary.LittleEndian.PutUint64(d[16*i:], out0)
		binary.LittleEndian.PutUint64(d[16*i+8:], out1)
		mk0, mk1 := out0&mag32, out1&mag32
		if ((m0+bigAdd32)|(m1+bigAdd32))&sign32 != 0 {
			if nan := slow32(wide, m0, mk0); nan >= 0 {
				return 0, 0, 16*i + nan
			}
			if nan := slow32(wide, m1, mk1); nan >= 0 {
				return 0, 0, 16*i + 8 + nan
			}
			continue
		}
		t0 += math.Float32frombits(uint32(m0)) + math.Float32frombits(uint32(m0>>32))
		t1 += math.Float32frombits(uint32(m1)) + math.Float32frombits(uint32(m1>>32))
		k0 += math.Float32frombits(uint32(mk0)) + math.Float32frombits(uint32(mk0>>32))
		k1 += math.Float32frombits(uint32(mk1)) + math.Float32frombits(uint32(mk1>>32))
	}
	return float64(k0) + float64(k1), float64(t0) + float64(t1), -1
}
