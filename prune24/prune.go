package prune24

import (
	"encoding/binary"
	"math"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// Prune writes to dst the matrix src pruned by rule, and returns the
// magnitude sums of the elements kept and of all elements (to the
// accuracy that [Stats] states).
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
func Prune(dst, src []byte, dt checkpoint.DType, cols int, rowBase int, rule Rule) (Stats, error) {
	e, err := elemOf(dt)
	if err != nil {
		return Stats{}, err
	}
	return prune(dst, src, e, cols, rowBase, rule)
}

// prune is Prune for an elem.
func prune(dst, src []byte, dt elem, cols int, rowBase int, rule Rule) (Stats, error) {
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
		sums sums
		nan  int
	)
	if dt == elemF32 {
		nan = prune32(&sums, dst, src, rule)
	} else {
		nan = prune16(&sums, dst, src, dt, rule)
	}
	if nan >= 0 {
		return Stats{}, nanError(nan, dt, cols, rowBase)
	}
	return sums.stats(dt), nil
}

// nanError returns the NaNError of the element at byte offset off of a
// matrix of cols-column rows of dt whose first row is rowBase.
func nanError(off int, dt elem, cols, rowBase int) error {
	e := off / dt.size()
	return &NaNError{Row: rowBase + e/cols, Col: e % cols}
}

// blockBytes is the unit of work of the kernels: 128 bytes of a row, that
// is 16 groups of 4 16-bit elements, or 8 groups (16 pairs) of F32
// elements. A block's float32 partial sums have at most 16 terms each.
const blockBytes = 128

// sums accumulates the magnitude sums of a prune: the float32 partial
// sums of the blocks, added up in float64, and apart from them (in wide)
// the exact float64 sums of the groups that the float32 sums cannot take.
// For F16 the block sums are in units of 2^-112 (see f16Bits).
type sums struct {
	kept, total float64
	wide        Stats
}

// add adds the partial sums of a block.
func (s *sums) add(kept, total float64) {
	s.kept += kept
	s.total += total
}

// stats returns the sums as Stats.
func (s *sums) stats(dt elem) Stats {
	st := Stats{Kept: s.kept, Total: s.total}
	if dt == elemF16 {
		st = Stats{Kept: s.kept * 0x1p112, Total: s.total * 0x1p112}
	}
	st.Add(s.wide)
	return st
}

// f16Bits masks an F16 magnitude shifted left by 13, which as F32 bits
// is its value times 2^-112 exactly (F16 subnormals become F32
// subnormals); so the F16 block sums are in units of 2^-112. A BF16
// magnitude shifted left by 16 is its value as F32 bits. Of the two lanes
// of a uint32 l, the kernels take the F32 bits l<<16 and l&^0xFFFF
// (BF16), or l<<13&f16Bits and l>>3&f16Bits (F16).
const f16Bits = 0x7FFF << 13

// slowAdd16 is the slow-path addend of the 16-bit kernels: (m +
// slowAdd16) & sign16 sets the sign bit of every lane of magnitude 0x7C00
// or more, which the float32 block sums cannot take: F16 infinities, BF16
// magnitudes from 2^121 on (16 pairs of them could overflow a float32
// sum), and NaN. No lane carries into the next.
const slowAdd16 = 0x0400_0400_0400_0400 // 0x8000 - 0x7C00 per lane

// slow16 takes a group of 16-bit magnitudes m of dt (mk of those kept)
// that the float32 block sums cannot take. It returns the byte offset in
// the group of its first NaN, or -1 after adding the group's float64
// sums to wide.
func slow16(wide *Stats, m, mk uint64, dt elem) int {
	nanAdd := uint64(nanAddBF16)
	if dt == elemF16 {
		nanAdd = nanAddF16
	}
	if s := (m + nanAdd) & sign16; s != 0 {
		return nanLane16(s)
	}
	wide.Add(Stats{Kept: sum16(mk, dt), Total: sum16(m, dt)})
	return -1
}

// sum16 returns the float64 sum of 4 16-bit magnitudes m of dt, none a
// NaN.
func sum16(m uint64, dt elem) float64 {
	s := 0.0
	for i := 0; i < 4; i++ {
		s += dt.float64(m >> (16 * i))
	}
	return s
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

// forBlocks calls fn for every blockBytes block of src and the block of
// dst at the same offset (dst is at least as long as src), and for the
// rest of src, shorter than a block, through zero-padded copies. It
// returns the byte offset that fn reports for a NaN, or -1. fn gets src's
// block before it writes dst's, so dst may be src.
func forBlocks(dst, src []byte, fn func(d, s *[blockBytes]byte) int) int {
	off := 0
	for ; off+blockBytes <= len(src) && off+blockBytes <= len(dst); off += blockBytes {
		if nan := fn((*[blockBytes]byte)(dst[off:]), (*[blockBytes]byte)(src[off:])); nan >= 0 {
			return off + nan
		}
	}
	if off < len(src) {
		var s, d [blockBytes]byte
		n := copy(s[:], src[off:])
		if nan := fn(&d, &s); nan >= 0 {
			return off + nan
		}
		copy(dst[off:], d[:n])
	}
	return -1
}

// prune16 prunes F16 or BF16 src into dst (as long as src, a multiple of
// 8 bytes) and returns the byte offset of the first NaN, or -1.
func prune16(s *sums, dst, src []byte, dt elem, rule Rule) int {
	if rule == Rule12 {
		return prune16Rule12(s, dst, src, dt)
	}
	f16 := dt == elemF16
	return forBlocks(dst, src, func(d, b *[blockBytes]byte) int {
		for from := uint(0); ; {
			kept, total, stop, m, mk := pruneBlock16(d, b, from, f16)
			s.add(kept, total)
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

// pruneBlock16 prunes by Rule24 the groups from from on of the block s of
// F16 (f16) or BF16 elements into d (which may be s). It returns the
// float32 sums of the magnitudes kept and of all, up to the group stop
// that needs the slow path (pruned, but not in the sums), or the end of
// the block (stop 16); and the magnitudes m of group stop, and mk of
// those it kept.
//
// This and the other kernels are written out for the compiler: the block
// is an array so that no index needs a bounds check, the loop body calls
// only helpers that inline (the slow path is the caller's, so that
// nothing is spilled around a call), the float32 conversions are spelled
// out, and F16 and BF16 have a loop each rather than a branch in one.
func pruneBlock16(d, s *[blockBytes]byte, from uint, f16 bool) (kept, total float64, stop uint, m, mk uint64) {
	_, _ = d[0], s[0] // the nil checks, out of the loop
	var k0, k1, t0, t1 float32
	i := from
	if f16 {
		for ; i < blockBytes/8; i++ {
			v := binary.LittleEndian.Uint64(s[8*i:])
			var nz uint64
			m, nz = keptNonzero16(v)
			out := v & lanes16(nz)
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
			var nz uint64
			m, nz = keptNonzero16(v)
			out := v & lanes16(nz)
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

// keptNonzero16 returns the magnitudes m of the group v of 16-bit
// elements, and the sign bits of the lanes that Rule24 keeps and that are
// nonzero (a kept -0.0 is dropped, becoming +0.0).
func keptNonzero16(v uint64) (m, nz uint64) {
	m = v & mag16
	return m, kept24(m) & (m + mag16)
}

// prune16Rule12 is prune16 for Rule12, a rare choice for 16-bit data,
// kept simple: every group through slow16, for float64 sums.
func prune16Rule12(s *sums, dst, src []byte, dt elem) int {
	return forBlocks(dst, src, func(d, b *[blockBytes]byte) int {
		for i := range blockBytes / 8 {
			v := binary.LittleEndian.Uint64(b[8*i:])
			m := v & mag16
			out := v & lanes16(kept12(m)&(m+mag16))
			binary.LittleEndian.PutUint64(d[8*i:], out)
			if nan := slow16(&s.wide, m, out&mag16, dt); nan >= 0 {
				return 8*i + nan
			}
		}
		return -1
	})
}
