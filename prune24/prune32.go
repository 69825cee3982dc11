package prune24

import (
	"encoding/binary"
	"math"
)

// F32 kernels. A group of 4 F32 elements is two uint64 words of 2 lanes
// each (lanes 0, 1 in the first); a block holds 8 groups, 16 pairs.

// slowAdd32 is the slow-path addend of F32: (m + slowAdd32) & sign32 sets
// the sign bit of every lane from 2^121 on, which the float32 block sums
// cannot take (16 pairs of them could overflow), infinities and NaN
// included.
const slowAdd32 = 0x0400_0000_0400_0000 // 0x8000_0000 - 0x7C00_0000 per lane

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

// The selection of F32 groups is scalar. The magnitudes a0..a3 are
// below 2^31, so the top bit of a difference is its sign. For i < j, cij
// is 1 when j outranks i (aj > ai) and 0 when i outranks j (ties to the
// lower index). Rule24 keeps an element outranked fewer than 2 times: 0
// is outranked c01+c02+c03 times, 1 (1-c01)+c12+c13, 2 (1-c02)+(1-c12)+c23
// and 3 3-c03-c13-c23 times; ki, 1 for a kept lane, is the sign bit of
// that count minus 2. Rule12 keeps lane 1 when c01 and lane 3 when c23.
// The kernels spell this out: as a function it would not inline.

// lanes32 widens the kept flags (1 or 0) of the lanes of two pairs to
// all-ones lanes.
func lanes32(k0, k1, k2, k3 uint64) (keep0, keep1 uint64) {
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
		for from := uint(0); ; {
			kept, total, stop, g := pruneBlock32(d, b, from, rule)
			s.add(kept, total)
			if stop >= blockBytes/16 {
				return -1
			}
			if nan := g.slow(&s.wide); nan >= 0 {
				return 16*int(stop) + nan
			}
			from = stop + 1
		}
	})
}

// group32 is a group of 4 F32 magnitudes m0 (lanes 0, 1) and m1 (lanes 2,
// 3), and those kept, mk0 and mk1.
type group32 struct{ m0, m1, mk0, mk1 uint64 }

// slow takes a group that needs the slow path. It returns the byte offset
// in the group of its first NaN, or -1 after adding its exact sums to
// wide.
func (g group32) slow(wide *Stats) int {
	if nan := slow32(wide, g.m0, g.mk0); nan >= 0 {
		return nan
	}
	if nan := slow32(wide, g.m1, g.mk1); nan >= 0 {
		return 8 + nan
	}
	return -1
}

// pruneBlock32 is pruneBlock16 for F32 and rule (see the selection
// above); it returns the group
// that needs the slow path as a group32.
func pruneBlock32(d, s *[blockBytes]byte, from uint, rule Rule) (kept, total float64, stop uint, g group32) {
	_, _ = d[0], s[0] // the nil checks, out of the loop
	var sk0, sk1, st0, st1 float32
	i := from
	for ; i < blockBytes/16; i++ {
		v0 := binary.LittleEndian.Uint64(s[16*i:])
		v1 := binary.LittleEndian.Uint64(s[16*i+8:])
		m0, m1 := v0&mag32, v1&mag32
		a0, a1, a2, a3 := m0&0x7FFFFFFF, m0>>32, m1&0x7FFFFFFF, m1>>32
		c01, c23 := (a0-a1)>>63, (a2-a3)>>63
		k0, k1, k2, k3 := c01^1, c01, c23^1, c23
		if rule == Rule24 {
			c02, c03, c12, c13 := (a0-a2)>>63, (a0-a3)>>63, (a1-a2)>>63, (a1-a3)>>63
			k0, k1 = (c01+c02+c03-2)>>63, (c12+c13-c01-1)>>63
			k2, k3 = (c23-c02-c12)>>63, (1-c03-c13-c23)>>63
		}
		keep0, keep1 := lanes32(k0, k1, k2, k3)
		out0, out1 := pruned32(v0, m0, keep0), pruned32(v1, m1, keep1)
		binary.LittleEndian.PutUint64(d[16*i:], out0)
		binary.LittleEndian.PutUint64(d[16*i+8:], out1)
		mk0, mk1 := out0&mag32, out1&mag32
		if ((m0+slowAdd32)|(m1+slowAdd32))&sign32 != 0 {
			g = group32{m0, m1, mk0, mk1}
			break
		}
		st0 += math.Float32frombits(uint32(m0)) + math.Float32frombits(uint32(m0>>32))
		st1 += math.Float32frombits(uint32(m1)) + math.Float32frombits(uint32(m1>>32))
		sk0 += math.Float32frombits(uint32(mk0)) + math.Float32frombits(uint32(mk0>>32))
		sk1 += math.Float32frombits(uint32(mk1)) + math.Float32frombits(uint32(mk1>>32))
	}
	return float64(sk0) + float64(sk1), float64(st0) + float64(st1), i, g
}
