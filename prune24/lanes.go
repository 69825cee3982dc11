package prune24

import "math/bits"

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

// Lane constants of the SWAR selection: lanes where lane i+k of a group
// is still in the group (i+k < 4), which must outrank lane i strictly.
const (
	strict1 = 0x0000_0001_0001_0001 // lanes 0, 1, 2 against lanes 1, 2, 3
	strict2 = 0x0000_0000_0001_0001 // lanes 0, 1 against lanes 2, 3
	strict3 = 0x0000_0000_0000_0001 // lane 0 against lane 3
	lanes02 = 0x0000_8000_0000_8000 // sign bits of lanes 0 and 2
	lanes13 = 0x8000_0000_8000_0000 // sign bits of lanes 1 and 3
	bit1x4  = 0x0002_0002_0002_0002 // bit 1 of every lane
)

// outranked16 returns, as the sign bit of every lane, where lane (i+k)%4
// of the magnitudes m outranks lane i: when i+k < 4, the later lane must
// be strictly larger (ties go to the lower index), otherwise at least as
// large. rot is m rotated so that lane i holds lane (i+k)%4, and strict
// has 1 in the lanes where i+k < 4.
//
// Per lane, (rot | 0x8000) - (m + strict) is rot - m - strict + 0x8000,
// which never borrows from the next lane (it is at least 0 since every
// magnitude is below 0x8000) and has its bit 15 set exactly when
// rot >= m + strict.
func outranked16(m, rot, strict uint64) uint64 {
	return ((rot | sign16) - (m + strict)) & sign16
}

// keep24x16 returns the lanes Rule24 keeps of the 4 16-bit magnitudes m,
// as a mask of all-ones lanes: every lane outranked by fewer than 2 of
// the other 3 (the count is 0..3, so bit 1 clear means below 2).
func keep24x16(m uint64) uint64 {
	n := outranked16(m, bits.RotateLeft64(m, -16), strict1)>>15 +
		outranked16(m, bits.RotateLeft64(m, -32), strict2)>>15 +
		outranked16(m, bits.RotateLeft64(m, -48), strict3)>>15
	return (^n & bit1x4) >> 1 * 0xFFFF
}

// keep12x16 is keep24x16 for Rule12: lane 0 against lane 1 and lane 2
// against lane 3.
func keep12x16(m uint64) uint64 {
	out := outranked16(m, bits.RotateLeft64(m, -16), strict1)&lanes02 |
		outranked16(m, bits.RotateLeft64(m, -48), strict3)&lanes13
	return (^out & sign16) >> 15 * 0xFFFF
}
