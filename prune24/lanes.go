package prune24

// SIMD-within-a-register helpers. A group of 4 16-bit elements is one
// little-endian uint64 (element i in bits 16i..16i+15); a pair of F32
// elements is one uint64 (element i in bits 32i..32i+31). Magnitudes are
// the bits without the sign bit: for non-NaN values their unsigned order is
// the order of |x|.

const (
	mag16  = 0x7FFF_7FFF_7FFF_7FFF // magnitude bits of 4 16-bit lanes
	sign16 = 0x8000_8000_8000_8000 // sign bits of 4 16-bit lanes
	mag32  = 0x7FFF_FFFF_7FFF_FFFF // magnitude bits of 2 32-bit lanes
	sign32 = 0x8000_0000_8000_0000 // sign bits of 2 32-bit lanes

	// (m + nanAdd) & sign sets a lane's sign bit iff its magnitude m is a
	// NaN: above 0x7C00 (F16), 0x7F80 (BF16) or 0x7F80_0000 (F32). No
	// lane carries into the next, since m < 0x8000 (0x8000_0000).
	nanAddF16  = 0x03FF_03FF_03FF_03FF // 0x8000 - 0x7C01 per lane
	nanAddBF16 = 0x007F_007F_007F_007F // 0x8000 - 0x7F81 per lane
	nanAddF32  = 0x007F_FFFF_007F_FFFF // 0x8000_0000 - 0x7F80_0001 per lane

	// gather16 multiplies lane bits at 0, 16, 32 and 48 into bits 48..51
	// (bit 16i lands at 48+i); every other partial product lands on a
	// distinct bit outside 48..51 or past bit 63, so nothing carries in.
	gather16 = 1<<48 | 1<<33 | 1<<18 | 1<<3

	// ampereNibbles holds, at nibble idx, the Ampere meta nibble i0|i1<<2
	// (formats.md §1.2) for the nonzero mask idx = m0|m1<<1|m2<<2|m3<<3.
	// In the §1.2 order m0m1m2m3 the table is E E E E 9 D 9 D 8 C 8 C 4 4 4 4.
	ampereNibbles = 0x4DCE_4DCE_498E_498E

	// over2 has bit idx set for the nonzero masks with more than 2 bits.
	over2 = 1<<7 | 1<<11 | 1<<13 | 1<<14 | 1<<15

	// validNibbles has bit n set for the 6 nibbles n = i0|i1<<2 with
	// i0 < i1: 0x4, 0x8, 0x9, 0xC, 0xD and 0xE.
	validNibbles = 1<<0x4 | 1<<0x8 | 1<<0x9 | 1<<0xC | 1<<0xD | 1<<0xE

	// bitmaskPairs holds, at nibble idx, the kept pair k0|k1<<2 of the
	// sparse-24-bitmask selection for the nonzero mask idx with at most 2
	// bits: the nonzeros plus the lowest-index zeros to make 2 (0 where
	// idx has more than 2 bits).
	bitmaskPairs = 0x000E_0DCC_0988_4444

	// maskPairs holds, at nibble b, the pair k0|k1<<2 of the two set bits
	// of the 4-bit mask b, or 0 unless b has exactly 2 bits set.
	maskPairs = 0x000E_0DC0_0980_4000
)

// nonzero16 returns the lanes of v whose magnitude is nonzero, as their
// sign bits: -0.0 counts as zero, NaN as nonzero (IEEE x != 0).
func nonzero16(v uint64) uint64 {
	return ((v & mag16) + mag16) & sign16
}

// nonzero32 is nonzero16 for 2 F32 lanes.
func nonzero32(v uint64) uint64 {
	return ((v & mag32) + mag32) & sign32
}

// laneMask16 returns the 4-bit mask (lane i at bit i) of the sign bits s,
// as nonzero16 returns them.
func laneMask16(s uint64) uint64 {
	return ((s >> 15) * gather16) >> 48 & 0xF
}

// laneMask32 returns the 4-bit mask of 4 F32 lanes from the sign bits of
// lanes 0, 1 (s0) and 2, 3 (s1), as nonzero32 returns them.
func laneMask32(s0, s1 uint64) uint64 {
	return s0>>31&1 | s0>>62&2 | s1>>29&4 | s1>>60&8
}

// nibble returns nibble i of the table t.
func nibble(t, i uint64) uint64 {
	return t >> (4 * i) & 0xF
}

// keep24 reports, as 0 or 1 each, which of the magnitudes a0..a3 (each
// below 2^63) Rule24 keeps: the 2 largest, ties to the lower index. For
// i < j, cij is 1 when j outranks i (aj > ai) and 0 when i outranks j, and
// an element is kept when fewer than 2 others outrank it.
func keep24(a0, a1, a2, a3 uint64) (k0, k1, k2, k3 uint64) {
	c01 := (a0 - a1) >> 63
	c02 := (a0 - a2) >> 63
	c03 := (a0 - a3) >> 63
	c12 := (a1 - a2) >> 63
	c13 := (a1 - a3) >> 63
	c23 := (a2 - a3) >> 63
	// Outranked counts: 0 by c01+c02+c03, 1 by (1-c01)+c12+c13,
	// 2 by (1-c02)+(1-c12)+c23, 3 by 3-c03-c13-c23; keep when count-2 < 0.
	k0 = (c01 + c02 + c03 - 2) >> 63
	k1 = (c12 + c13 - c01 - 1) >> 63
	k2 = (c23 - c02 - c12) >> 63
	k3 = (1 - c03 - c13 - c23) >> 63
	return k0, k1, k2, k3
}

// keep12 is keep24 for Rule12: the larger of (a0, a1) and of (a2, a3),
// ties to the lower index.
func keep12(a0, a1, a2, a3 uint64) (k0, k1, k2, k3 uint64) {
	c01 := (a0 - a1) >> 63
	c23 := (a2 - a3) >> 63
	return c01 ^ 1, c01, c23 ^ 1, c23
}
