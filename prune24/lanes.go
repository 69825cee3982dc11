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
	// (docs/formats.md §1.2) for the nonzero mask idx = m0|m1<<1|m2<<2|m3<<3.
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
	lanes02 = 0x0000_8000_0000_8000 // sign bits of lanes 0 and 2
	lanes13 = 0x8000_0000_8000_0000 // sign bits of lanes 1 and 3
)

// The selection compares lanes with SWAR subtractions. With h = m|sign16,
// lane i of rot - (m + strict), where rot is h rotated so that lane i
// holds lane (i+k)%4 and strict has 1 in the lanes where i+k < 4, is
// rot_i - m_i - strict_i + 0x8000: it never borrows from the next lane
// (every magnitude is below 0x8000), and its bit 15 is set exactly when
// lane (i+k)%4 outranks lane i (strictly larger when i+k < 4, ties going
// to the lower index, otherwise at least as large). The other bits are
// garbage that the callers mask off.

// kept24 returns the sign bits of the lanes Rule24 keeps of the 4 16-bit
// magnitudes m: the lanes outranked by fewer than 2 of the other 3.
//
// o1 and o2 compare every lane with the next one and the one after; the
// third comparison, with the previous lane, is the negation of o1 for
// that lane (the order is total), so it is o1 negated and rotated back.
// A lane is dropped when at least 2 of the 3 say it is outranked: the
// majority of o1, o2 and o3.
func kept24(m uint64) uint64 {
	h := m | sign16
	o1 := bits.RotateLeft64(h, -16) - (m + strict1)
	o2 := bits.RotateLeft64(h, 32) - (m + strict2)
	o3 := bits.RotateLeft64(^o1, 16)
	return ^(o1&o2 | o3&(o1|o2)) & sign16
}

// kept12 is kept24 for Rule12: lane 0 against lane 1 and lane 2 against
// lane 3.
func kept12(m uint64) uint64 {
	o1 := bits.RotateLeft64(m|sign16, -16) - (m + strict1)
	o3 := bits.RotateLeft64(^o1, 16)
	return ^(o1&lanes02 | o3&lanes13) & sign16
}

// lanes16 widens the sign bits s (as kept24 returns them) to whole lanes:
// 0xFFFF in every lane whose sign bit is set. Per lane it is 2·0x8000 -
// 1; the top lane's 0x10000 wraps to 0, leaving 0 - 1.
func lanes16(s uint64) uint64 {
	return s<<1 - s>>15
}

// gatherSigns multiplies the sign bits of 4 16-bit lanes (bits 15, 31, 47
// and 63) into bits 60..63 (lane i at bit 60+i); every other partial
// product lands on a distinct bit below 48 or past bit 63, so nothing
// carries in. idx = s*gatherSigns>>60 is the lane mask of s.
const gatherSigns = 1<<45 | 1<<30 | 1<<15 | 1

// pairTable maps the 4-bit lane mask idx of a group (lane i at bit i) to
// the two lanes i0 < i1 that a packed format stores for it, in two forms:
//
//   - mul[idx] moves lane i0 to bits 32..47 and lane i1 to bits 48..63
//     of the product x*mul[idx], for a group x whose lanes other than i0
//     and i1 are zero. It is 1<<(32-16·i0) | 1<<(48-16·i1) (a single bit
//     when i1 = i0+1). The unwanted partial products are those of lane i0
//     at 48-16·(i1-i0), below bit 32 when i1 > i0+1, and of lane i1 at
//     32+16·(i1-i0), past bit 63; no two terms overlap, so none carries.
//   - nib[idx] is the nibble the format records for the group, shifted
//     to bits 60..63.
//
// Masks that do not occur have zeros.
type pairTable struct {
	mul [16]uint64
	nib [16]uint64
}

// pairMul returns the pairTable multiplier of lanes i0 < i1.
func pairMul(i0, i1 uint64) uint64 {
	return 1<<(32-16*i0) | 1<<(48-16*i1)
}

// ampereTable returns the pairTable of the Ampere layout (F16 and BF16),
// indexed by the nonzero mask of a pruned group: the §1.2 pair and
// nibble.
func ampereTable() pairTable {
	var t pairTable
	for idx := range uint64(16) {
		if over2>>idx&1 != 0 {
			continue
		}
		nib := nibble(ampereNibbles, idx)
		t.mul[idx] = pairMul(nib&3, nib>>2)
		t.nib[idx] = nib << 60
	}
	return t
}

// bitmaskTable returns the pairTable of the bitmask layout, indexed by the
// mask of the 2 lanes kept: those lanes, and the mask itself as the
// nibble.
func bitmaskTable() pairTable {
	var t pairTable
	for idx := range uint64(16) {
		if pair := nibble(maskPairs, idx); pair != 0 {
			t.mul[idx] = pairMul(pair&3, pair>>2)
			t.nib[idx] = idx << 60
		}
	}
	return t
}
