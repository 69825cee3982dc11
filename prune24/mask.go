package prune24

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// Selection by a mask. The calibrated methods (Wanda, RIA, SparseGPT)
// decide elsewhere which 2 of every 4 weights to keep and hand the
// decision over as a mask in the bitmask layout (docs/formats.md §3.2):
// rows of ceil(cols/8) bytes, column c of a row at bit c%8 of byte c/8,
// exactly 2 bits set in every group of 4, no bit set past the last
// column. [PruneMask] applies such a mask; the packers then take its
// output as they take [Prune]'s.

// MaskBytes returns the length in bytes of the mask of a rows×cols
// matrix: rows·ceil(cols/8).
func MaskBytes(rows, cols int) int {
	return rows * ((cols + 7) / 8)
}

// CheckMask returns nil if mask, whole rows of ceil(cols/8) bytes, keeps
// exactly 2 of every group of 4 and sets no bit past column cols-1.
// Otherwise it returns a [*BitmaskError] for the first violation in
// row-major order (rows counted from 0), or an error wrapping ErrShape
// when cols is not a multiple of 4 or mask is not whole rows.
func CheckMask(mask []byte, cols int) error {
	_, err := maskRows(mask, cols)
	if err != nil {
		return err
	}
	return checkMask(mask, cols)
}

// maskRows returns how many rows of a cols-column mask mask holds, or an
// error wrapping ErrShape.
func maskRows(mask []byte, cols int) (int, error) {
	if cols < 0 || cols%4 != 0 {
		return 0, fmt.Errorf("%w: %d columns is not a multiple of 4", ErrShape, cols)
	}
	mb := (cols + 7) / 8
	if mb == 0 {
		if len(mask) != 0 {
			return 0, fmt.Errorf("%w: %d mask bytes of 0-column rows", ErrShape, len(mask))
		}
		return 0, nil
	}
	if len(mask)%mb != 0 {
		return 0, fmt.Errorf("%w: %d mask bytes is not a whole number of %d-byte rows", ErrShape, len(mask), mb)
	}
	return len(mask) / mb, nil
}

// Nibble counts: for x holding 16 mask nibbles, twoPerNibble(x) is zero
// exactly when every nibble has 2 bits set.
const (
	nib55 = 0x5555_5555_5555_5555
	nib33 = 0x3333_3333_3333_3333
	nib22 = 0x2222_2222_2222_2222
)

// twoPerNibble returns, per nibble of x, its bit count XOR 2.
func twoPerNibble(x uint64) uint64 {
	x -= x >> 1 & nib55
	return (x&nib33 + x>>2&nib33) ^ nib22
}

// checkMask is CheckMask for a mask of whole rows.
func checkMask(mask []byte, cols int) error {
	mb, groups := (cols+7)/8, cols/4
	full := groups / 16 // 8-byte words of whole groups in a row
	for r := 0; mb > 0 && r < len(mask)/mb; r++ {
		row := mask[r*mb : (r+1)*mb]
		ok := true
		for w := range full {
			if twoPerNibble(binary.LittleEndian.Uint64(row[8*w:])) != 0 {
				ok = false
				break
			}
		}
		for g := 16 * full; ok && g < groups; g++ {
			ok = bits.OnesCount8(row[g/2]>>(4*(g%2))&0xF) == 2
		}
		if groups%2 == 1 && row[mb-1]>>4 != 0 {
			ok = false
		}
		if ok {
			continue
		}
		for g := range groups {
			if n := bits.OnesCount8(row[g/2] >> (4 * (g % 2)) & 0xF); n != 2 {
				return &BitmaskError{Row: r, Group: g, Bits: n}
			}
		}
		return &BitmaskError{Row: r, Group: groups, Bits: bits.OnesCount8(row[mb-1] >> 4), Padding: true}
	}
	return nil
}

// PruneMask writes to dst the matrix src with the elements that mask
// keeps, and +0.0 in every other place, and returns the magnitude sums of
// the elements kept and of all (to the accuracy [Stats] states).
//
// src holds whole rows of cols elements of type dt (cols a multiple of
// 4), dst is as long as src, and mask holds the same rows in the bitmask
// layout ([MaskBytes]). A mask that [CheckMask] refuses is a
// [*BitmaskError], and a NaN anywhere in src a [*NaNError] for the first
// NaN in row-major order, both with Row counted from rowBase. Kept
// elements are copied bit for bit, except that -0.0 becomes +0.0, as
// [Prune] does. With the mask of the set Prune keeps (what [MaskOf] gives
// of Prune's output), dst and the Stats are exactly Prune's by Rule24.
//
// dst may be src itself, to prune in place; otherwise the two must not
// overlap. On error the content of dst is unspecified.
func PruneMask(dst, src, mask []byte, dt checkpoint.DType, cols, rowBase int) (Stats, error) {
	e, err := elemOf(dt)
	if err != nil {
		return Stats{}, err
	}
	rows, err := wholeRows(len(src), e, cols)
	if err != nil {
		return Stats{}, err
	}
	if err := checkLen("dst", len(dst), len(src)); err != nil {
		return Stats{}, err
	}
	if err := checkLen("mask", len(mask), MaskBytes(rows, cols)); err != nil {
		return Stats{}, err
	}
	if err := checkMask(mask, cols); err != nil {
		return Stats{}, OffsetRows(err, rowBase)
	}
	var s sums
	var nan int
	if e == elemF32 {
		nan = pruneMask32(&s, dst, src, mask, cols)
	} else {
		nan = pruneMask16(&s, dst, src, mask, e, cols)
	}
	if nan >= 0 {
		return Stats{}, nanError(nan, e, cols, rowBase)
	}
	return s.stats(e), nil
}

// blockNibbles returns the mask nibbles of count consecutive groups of a
// matrix from group g0 on, counting groups in row-major order, the first
// in the low bits; groups from total on (the zero padding of a short
// last block) get 0. gpr is the groups of a row, mb a mask row's bytes.
func blockNibbles(mask []byte, g0, count, gpr, mb, total int) uint64 {
	r, g := g0/gpr, g0%gpr
	at := r*mb + g/2
	if g%2 == 0 && g+count <= gpr && count%2 == 0 && at+count/2 <= len(mask) {
		// A whole run of bytes of one row: the common case of rows of a
		// multiple of 64 16-bit (32 F32) columns.
		var b [8]byte
		copy(b[:], mask[at:at+count/2])
		return binary.LittleEndian.Uint64(b[:])
	}
	var w uint64
	for i := 0; i < count && g0+i < total; i++ {
		w |= uint64(mask[r*mb+g/2]>>(4*(g%2))&0xF) << (4 * i)
		if g++; g == gpr {
			r, g = r+1, 0
		}
	}
	return w
}

// keep16 returns the sign bits of the 16-bit lanes that the mask nibble
// n keeps (bit i of n for lane i).
func keep16(n uint64) uint64 {
	return n&1<<15 | n&2<<30 | n&4<<45 | n&8<<60
}

// pruneMask16 is PruneMask for F16 and BF16 src (a multiple of 8 bytes),
// mask validated, block by block as prune16 goes: it returns the byte
// offset of the first NaN, or -1.
func pruneMask16(s *sums, dst, src, mask []byte, dt elem, cols int) int {
	f16 := dt == elemF16
	gpr, mb, total := cols/4, (cols+7)/8, len(src)/8
	blk := 0
	return forBlocks(dst, src, func(d, b *[blockBytes]byte) int {
		nibs := blockNibbles(mask, blk*blockBytes/8, blockBytes/8, gpr, mb, total)
		blk++
		for from := uint(0); ; {
			kept, sum, stop, m, mk := pruneMaskBlock16(d, b, nibs, from, f16)
			s.add(kept, sum)
			if stop >= blockBytes/8 {
				return -1
			}
			if nan := slow16(&s.wide, m, mk, dt); nan >= 0 {
				return 8*int(stop) + nan
			}
			from = stop + 1
		}
	})
}

// pruneMaskBlock16 is pruneBlock16 with the lanes kept named by the mask
// nibbles nibs (group i's in bits 4i..4i+3) instead of chosen by
// magnitude; everything else, the order of the float32 sums included, is
// pruneBlock16's, so that the Stats agree with Prune's bit for bit.
func pruneMaskBlock16(d, s *[blockBytes]byte, nibs uint64, from uint, f16 bool) (kept, total float64, stop uint, m, mk uint64) {
	_, _ = d[0], s[0] // the nil checks, out of the loop
	var k0, k1, t0, t1 float32
	i := from
	if f16 {
		for ; i < blockBytes/8; i++ {
			v := binary.LittleEndian.Uint64(s[8*i:])
			m = v & mag16
			out := v & lanes16(keep16(nibs>>(4*i)&0xF)&(m+mag16))
			binary.LittleEndian.PutUint64(d[8*i:], out)
			if mk = out & mag16; (m+slowAdd16)&sign16 != 0 {
				break
			}
			ml, mh, kl, kh := uint32(m), uint32(m>>32), uint32(mk), uint32(mk>>32)
			t0 += math.Float32frombits(ml<<13&f16Bits) + math.Float32frombits(ml>>3&f16Bits)
			t1 += math.Float32frombits(mh<<13&f16Bits) + math.Float32frombits(mh>>3&f16Bits)
			k0 += math.Float32frombits(kl<<13&f16Bits) + math.Float32frombits(kl>>3&f16Bits)
			k1 += math.Float32frombits(kh<<13&f16Bits) + math.Float32frombits(kh>>3&f16Bits)
		}
	} else {
		for ; i < blockBytes/8; i++ {
			v := binary.LittleEndian.Uint64(s[8*i:])
			m = v & mag16
			out := v & lanes16(keep16(nibs>>(4*i)&0xF)&(m+mag16))
			binary.LittleEndian.PutUint64(d[8*i:], out)
			if mk = out & mag16; (m+slowAdd16)&sign16 != 0 {
				break
			}
			ml, mh, kl, kh := uint32(m), uint32(m>>32), uint32(mk), uint32(mk>>32)
			t0 += math.Float32frombits(ml<<16) + math.Float32frombits(ml&^0xFFFF)
			t1 += math.Float32frombits(mh<<16) + math.Float32frombits(mh&^0xFFFF)
			k0 += math.Float32frombits(kl<<16) + math.Float32frombits(kl&^0xFFFF)
			k1 += math.Float32frombits(kh<<16) + math.Float32frombits(kh&^0xFFFF)
		}
	}
	return float64(k0) + float64(k1), float64(t0) + float64(t1), i, m, mk
}

// pruneMask32 is pruneMask16 for F32 (src a multiple of 16 bytes).
func pruneMask32(s *sums, dst, src, mask []byte, cols int) int {
	gpr, mb, total := cols/4, (cols+7)/8, len(src)/16
	blk := 0
	return forBlocks(dst, src, func(d, b *[blockBytes]byte) int {
		nibs := blockNibbles(mask, blk*blockBytes/16, blockBytes/16, gpr, mb, total)
		blk++
		for from := uint(0); ; {
			kept, sum, stop, g := pruneMaskBlock32(d, b, nibs, from)
			s.add(kept, sum)
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

// pruneMaskBlock32 is pruneBlock32 with the lanes kept named by the mask
// nibbles nibs, as pruneMaskBlock16 is pruneBlock16's.
func pruneMaskBlock32(d, s *[blockBytes]byte, nibs uint64, from uint) (kept, total float64, stop uint, g group32) {
	_, _ = d[0], s[0] // the nil checks, out of the loop
	var sk0, sk1, st0, st1 float32
	i := from
	for ; i < blockBytes/16; i++ {
		v0 := binary.LittleEndian.Uint64(s[16*i:])
		v1 := binary.LittleEndian.Uint64(s[16*i+8:])
		m0, m1 := v0&mag32, v1&mag32
		n := nibs >> (4 * i)
		keep0, keep1 := lanes32(n&1, n>>1&1, n>>2&1, n>>3&1)
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

// MaskOf writes to mask the mask that pruned, whole rows of cols elements
// of dt that are 2:4 sparse, shows: in every group its nonzeros (-0.0
// counts as zero, NaN as nonzero) and, where it has fewer than 2, its
// lowest-index zeros to make 2 — the set [Prune] keeps, and the bitmask
// [PackBitmask] writes. mask must be [MaskBytes] long. A group with more
// than 2 nonzeros is a [*StructureError]. A matrix stores values, not a
// mask, so a mask that keeps a zero above a pruned place is not what
// MaskOf gives back of the matrix it selects: the two differ in that
// group.
func MaskOf(mask, pruned []byte, dt checkpoint.DType, cols int) error {
	e, err := elemOf(dt)
	if err != nil {
		return err
	}
	rows, err := wholeRows(len(pruned), e, cols)
	if err != nil {
		return err
	}
	if err := checkLen("mask", len(mask), MaskBytes(rows, cols)); err != nil {
		return err
	}
	mb, rowBytes := (cols+7)/8, cols*e.size()
	for r := range rows {
		src, mrow := pruned[r*rowBytes:(r+1)*rowBytes], mask[r*mb:(r+1)*mb]
		for g := range cols / 4 {
			var idx uint64
			if e == elemF32 {
				idx = laneMask32(nonzero32(binary.LittleEndian.Uint64(src[16*g:])), nonzero32(binary.LittleEndian.Uint64(src[16*g+8:])))
			} else {
				idx = laneMask16(nonzero16(binary.LittleEndian.Uint64(src[8*g:])))
			}
			pair := nibble(bitmaskPairs, idx)
			if pair == 0 {
				return &StructureError{Row: r, Col: 4 * g, Rule: Rule24, Nonzero: bits.OnesCount64(idx)}
			}
			setMaskNibble(mrow, g, byte(1<<(pair&3)|1<<(pair>>2)))
		}
	}
	return nil
}

// CheckMasked returns nil if pruned is bit for bit what [PruneMask] makes
// of original and mask with the same dt and cols. Otherwise it returns a
// [*RuleError] for the first differing element, or PruneMask's
// [*BitmaskError] for an invalid mask or [*NaNError] for a NaN in
// original.
func CheckMasked(pruned, original, mask []byte, dt checkpoint.DType, cols int) error {
	e, err := elemOf(dt)
	if err != nil {
		return err
	}
	rows, err := wholeRows(len(original), e, cols)
	if err != nil {
		return err
	}
	if err := checkLen("pruned", len(pruned), len(original)); err != nil {
		return err
	}
	if err := checkLen("mask", len(mask), MaskBytes(rows, cols)); err != nil {
		return err
	}
	if rows == 0 {
		return nil
	}
	rowBytes, mb := cols*e.size(), (cols+7)/8
	step := max(checkRuleChunk/rowBytes, 1)
	buf := make([]byte, min(step, rows)*rowBytes)
	for r0 := 0; r0 < rows; r0 += step {
		n := min(step, rows-r0)
		want := buf[:n*rowBytes]
		if _, err := PruneMask(want, original[r0*rowBytes:(r0+n)*rowBytes], mask[r0*mb:(r0+n)*mb], dt, cols, r0); err != nil {
			return err
		}
		got := pruned[r0*rowBytes : (r0+n)*rowBytes]
		if bytes.Equal(got, want) {
			continue
		}
		for i := 0; i < n*cols; i++ {
			if g, w := elemBits(got, i, e), elemBits(want, i, e); g != w {
				return &RuleError{Row: r0 + i/cols, Col: i % cols, Got: g, Want: w}
			}
		}
	}
	return nil
}
