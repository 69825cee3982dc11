package prune24

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// PruneAmpere prunes src, a rows×cols matrix of dt, by rule and writes the
// result straight into the Ampere layout: packed and meta end up byte for
// byte as [Prune] followed by [PackAmpere] leave them, and the Stats are
// Prune's. With the rule of the layout (Rule24 for F16 and BF16, Rule12
// for F32) it reads src once and materialises no pruned matrix; the other
// combinations go 32 rows at a time through Prune and PackAmpere.
//
// The shape must fit the layout ([AmpereShapeError]) and the buffers be
// the lengths [AmpereSizes] gives, and src rows·cols elements; these are
// checked before any data is read. A NaN in src is a [*NaNError] for the
// first NaN in row-major order, with Row counted from rowBase. The layout
// of F32 is 1:2 sparse: pruned by Rule24, a pair that keeps 2 nonzeros is
// the [*StructureError] PackAmpere would report, with Row counted from
// the matrix's first row (but any NaN in src is reported first, as Prune
// would). On error, the content of packed and meta is unspecified.
//
// src must not overlap packed or meta.
func PruneAmpere(packed, meta, src []byte, dt checkpoint.DType, rows, cols, rowBase int, rule Rule) (Stats, error) {
	e, err := elemOf(dt)
	if err != nil {
		return Stats{}, err
	}
	return pruneAmpere(packed, meta, src, e, rows, cols, rowBase, rule)
}

// pruneAmpere is PruneAmpere for an elem.
func pruneAmpere(packed, meta, src []byte, dt elem, rows, cols, rowBase int, rule Rule) (Stats, error) {
	if err := checkRule(rule); err != nil {
		return Stats{}, err
	}
	if err := checkAmpere(src, packed, meta, dt, rows, cols); err != nil {
		return Stats{}, err
	}
	var (
		s   sums
		nan int
	)
	switch {
	case dt == elemF32 && rule == Rule12:
		nan = ampere32(&s, packed, meta, src, rows, cols)
	case dt != elemF32 && rule == Rule24:
		nan = ampere16(&s, packed, meta, src, dt, rows, cols)
	default:
		return pruneAmpereRows(packed, meta, src, dt, rows, cols, rowBase, rule)
	}
	if nan >= 0 {
		return Stats{}, nanError(nan, dt, cols, rowBase)
	}
	return s.stats(dt), nil
}

// putMeta stores the 4 logical meta words of row r held in w (the first
// in the low 16 bits) for column pairs 2b and 2b+1, where the closed form
// of docs/formats.md §1.5 puts them: word c of row r at uint16 index
// metaBase(r) + 2·(c/2)·rows + 2·(c%2).
func putMeta(meta []byte, w uint64, r, b, rows int) {
	at := 2 * (metaBase(r) + 4*b*rows)
	binary.LittleEndian.PutUint16(meta[at:], uint16(w))
	binary.LittleEndian.PutUint16(meta[at+4:], uint16(w>>16))
	at += 4 * rows
	binary.LittleEndian.PutUint16(meta[at:], uint16(w>>32))
	binary.LittleEndian.PutUint16(meta[at+4:], uint16(w>>48))
}

// ampere16 is PruneAmpere for F16 and BF16 with Rule24, buffers
// validated. A block is 64 columns of a row: 16 groups, 32 bytes of a
// packed row and 4 meta words. It returns the byte offset in src of the
// first NaN, or -1.
func ampere16(s *sums, packed, meta, src []byte, dt elem, rows, cols int) int {
	f16 := dt == elemF16
	tab := ampereTable()
	rowBytes := 2 * cols
	for r := range rows {
		srow := src[r*rowBytes : (r+1)*rowBytes]
		prow := packed[r*cols : (r+1)*cols]
		for b := range rowBytes / blockBytes {
			p, in := (*[blockBytes / 2]byte)(prow[64*b:]), (*[blockBytes]byte)(srow[blockBytes*b:])
			var w uint64
			for from := uint(0); ; {
				var (
					kept, total float64
					stop        uint
					m, mk       uint64
				)
				w, kept, total, stop, m, mk = ampereBlock16(p, in, from, w, f16, &tab)
				s.add(kept, total)
				if stop >= blockBytes/8 {
					break
				}
				if nan := slow16(&s.wide, m, mk, dt); nan >= 0 {
					return r*rowBytes + blockBytes*b + 8*int(stop) + nan
				}
				from = stop + 1
			}
			putMeta(meta, w, r, b, rows)
		}
	}
	return -1
}

// ampereBlock16 prunes by Rule24 the groups from from on of the block s
// of F16 (f16) or BF16 elements and writes their Ampere form: the packed
// values to p, and the meta nibbles shifted into w from the top (after
// the block's 16 groups, the first is in the low bits). tab is
// ampereTable(). The rest is as for pruneBlock16.
//
// The nibble and the slots i0, i1 of a group come from the nonzero mask of
// the pruned group, through tab; x*tab.mul moves slots i0 and i1 of the
// pruned group x to the top half, which is its packed pair (the other
// lanes of x are zero).
func ampereBlock16(p *[blockBytes / 2]byte, s *[blockBytes]byte, from uint, w uint64, f16 bool, tab *pairTable) (_ uint64, kept, total float64, stop uint, m, mk uint64) {
	_, _, _ = p[0], s[0], tab.mul[0] // the nil checks, out of the loop
	var k0, t0, t1 float32
	i := from
	if f16 {
		for ; i < blockBytes/8; i++ {
			v := binary.LittleEndian.Uint64(s[8*i:])
			var nz uint64
			m, nz = keptNonzero16(v)
			x, idx := v&lanes16(nz), nz*gatherSigns>>60
			pv := uint32(x * tab.mul[idx] >> 32)
			binary.LittleEndian.PutUint32(p[4*i:], pv)
			w = w>>4 | tab.nib[idx]
			if (m+slowAdd16)&sign16 != 0 {
				mk = x & mag16
				break
			}
			ml, mh, kp := uint32(m), uint32(m>>32), pv&0x7FFF7FFF
			t0 += math.Float32frombits(ml<<13&f16Bits) + math.Float32frombits(ml>>3&f16Bits)
			t1 += math.Float32frombits(mh<<13&f16Bits) + math.Float32frombits(mh>>3&f16Bits)
			k0 += math.Float32frombits(kp<<13&f16Bits) + math.Float32frombits(kp>>3&f16Bits)
		}
	} else {
		for ; i < blockBytes/8; i++ {
			v := binary.LittleEndian.Uint64(s[8*i:])
			var nz uint64
			m, nz = keptNonzero16(v)
			x, idx := v&lanes16(nz), nz*gatherSigns>>60
			pv := uint32(x * tab.mul[idx] >> 32)
			binary.LittleEndian.PutUint32(p[4*i:], pv)
			w = w>>4 | tab.nib[idx]
			if (m+slowAdd16)&sign16 != 0 {
				mk = x & mag16
				break
			}
			ml, mh, kp := uint32(m), uint32(m>>32), pv&0x7FFF7FFF
			t0 += math.Float32frombits(ml<<16) + math.Float32frombits(ml&^0xFFFF)
			t1 += math.Float32frombits(mh<<16) + math.Float32frombits(mh&^0xFFFF)
			k0 += math.Float32frombits(kp<<16) + math.Float32frombits(kp&^0xFFFF)
		}
	}
	return w, float64(k0), float64(t0) + float64(t1), i, m, mk
}

// pruneAmpereRows is PruneAmpere for the combinations the layout rarely
// sees (F16 and BF16 with Rule12, F32 with Rule24), done as Prune and
// PackAmpere 32 rows at a time, after a scan for NaN (which Prune of the
// whole matrix would report before any StructureError).
func pruneAmpereRows(packed, meta, src []byte, dt elem, rows, cols, rowBase int, rule Rule) (Stats, error) {
	if off := firstNaN(src, dt); off >= 0 {
		return Stats{}, nanError(off, dt, cols, rowBase)
	}
	const n = 32 // rows in a block of the layout
	rowBytes, packedRow := cols*dt.size(), cols/2*dt.size()
	pb, mb := ampereSizes(dt, n, cols)
	pruned, bp, bm := make([]byte, n*rowBytes), make([]byte, pb), make([]byte, mb)
	var st Stats
	for r0 := 0; r0 < rows; r0 += n {
		s, err := prune(pruned, src[r0*rowBytes:(r0+n)*rowBytes], dt, cols, rowBase+r0, rule)
		if err != nil {
			return Stats{}, err
		}
		st.Add(s)
		if err := packAmpere(bp, bm, pruned, dt, n, cols); err != nil {
			if se := (*StructureError)(nil); errors.As(err, &se) {
				se.Row += r0
			}
			return Stats{}, err
		}
		copy(packed[r0*packedRow:], bp)
		// The block's meta is the whole layout restricted to its rows: for
		// column pair p, its 32-bit words [32p, 32p+32) are the whole
		// one's [p·rows + r0, p·rows + r0 + 32).
		for p := 0; p < mb/(4*n); p++ {
			copy(meta[4*(p*rows+r0):], bm[4*n*p:4*n*(p+1)])
		}
	}
	return st, nil
}

// firstNaN returns the byte offset of the first NaN in src (whole
// elements of dt), or -1.
func firstNaN(src []byte, dt elem) int {
	nanAdd, sign := uint64(nanAddBF16), uint64(sign16)
	switch dt {
	case elemF16:
		nanAdd = nanAddF16
	case elemF32:
		nanAdd, sign = nanAddF32, sign32
	}
	return forBlocks(src, src, func(_, b *[blockBytes]byte) int {
		for i := range blockBytes / 8 {
			if s := (binary.LittleEndian.Uint64(b[8*i:])&^sign + nanAdd) & sign; s != 0 {
				// The lowest sign bit set is the first NaN's.
				return 8*i + bits.TrailingZeros64(s)/8
			}
		}
		return -1
	})
}

// PruneBitmask prunes src, a rows×cols matrix of dt, by Rule24 and writes
// the result straight into the sparse-24-bitmask layout: compressed and
// bitmask end up byte for byte as [Prune] followed by [PackBitmask] leave
// them, and the Stats are Prune's. It reads src once and materialises no
// pruned matrix.
//
// The mask of a group is the set Prune keeps, which is what PackBitmask
// makes of the pruned group: its nonzeros plus its lowest-index zeros to
// make 2. rule must be Rule24 (the format is 2:4); any other is an error
// wrapping ErrInvalidRule. The buffers must be the lengths [BitmaskSizes]
// gives (cols a multiple of 4), and src rows·cols elements; these are
// checked before any data is read. A NaN in src is a [*NaNError] for the
// first NaN in row-major order, with Row counted from rowBase. On error,
// the content of compressed and bitmask is unspecified.
//
// src must not overlap compressed or bitmask.
func PruneBitmask(compressed, bitmask, src []byte, dt checkpoint.DType, rows, cols, rowBase int, rule Rule) (Stats, error) {
	e, err := elemOf(dt)
	if err != nil {
		return Stats{}, err
	}
	return pruneBitmask(compressed, bitmask, src, e, rows, cols, rowBase, rule)
}

// pruneBitmask is PruneBitmask for an elem.
func pruneBitmask(compressed, bitmask, src []byte, dt elem, rows, cols, rowBase int, rule Rule) (Stats, error) {
	if err := checkRule(rule); err != nil {
		return Stats{}, err
	}
	if rule != Rule24 {
		return Stats{}, fmt.Errorf("%w: the bitmask format is %v, not %v", ErrInvalidRule, Rule24, rule)
	}
	if err := checkBitmask(src, compressed, bitmask, dt, rows, cols); err != nil {
		return Stats{}, err
	}
	var s sums
	if nan := bitmask16or32(&s, compressed, bitmask, src, dt, rows, cols); nan >= 0 {
		return Stats{}, nanError(nan, dt, cols, rowBase)
	}
	return s.stats(dt), nil
}

// bitmask16or32 is PruneBitmask, buffers validated, row by row: a block is
// 128 bytes of a row and a row's last partial block goes through
// zero-padded copies. It returns the byte offset in src of the first NaN,
// or -1.
func bitmask16or32(s *sums, compressed, bitmask, src []byte, dt elem, rows, cols int) int {
	f16 := dt == elemF16
	tab := bitmaskTable()
	// block prunes a block into c and returns its mask nibbles, the first
	// in the low bits, and the byte offset in it of the first NaN, or -1.
	block := func(c *[blockBytes / 2]byte, b *[blockBytes]byte) (w uint64, nan int) {
		if dt == elemF32 {
			for from := uint(0); ; {
				var (
					kept, total float64
					stop        uint
					g           group32
				)
				w, kept, total, stop, g = bitmaskBlock32(c, b, from, w)
				s.add(kept, total)
				if stop >= blockBytes/16 {
					return w >> 32, -1
				}
				if nan := g.slow(&s.wide); nan >= 0 {
					return 0, 16*int(stop) + nan
				}
				from = stop + 1
			}
		}
		for from := uint(0); ; {
			var (
				kept, total float64
				stop        uint
				m, mk       uint64
			)
			w, kept, total, stop, m, mk = bitmaskBlock16(c, b, from, w, f16, &tab)
			s.add(kept, total)
			if stop >= blockBytes/8 {
				return w, -1
			}
			if nan := slow16(&s.wide, m, mk, dt); nan >= 0 {
				return 0, 8*int(stop) + nan
			}
			from = stop + 1
		}
	}
	rowBytes, maskBytes := cols*dt.size(), (cols+7)/8
	full, blockMask := rowBytes/blockBytes, blockBytes/dt.size()/8 // mask bytes of a block
	for r := range rows {
		srow := src[r*rowBytes : (r+1)*rowBytes]
		crow := compressed[r*rowBytes/2 : (r+1)*rowBytes/2]
		mrow := bitmask[r*maskBytes : (r+1)*maskBytes]
		for b := range full {
			w, nan := block((*[blockBytes / 2]byte)(crow[blockBytes/2*b:]), (*[blockBytes]byte)(srow[blockBytes*b:]))
			if nan >= 0 {
				return r*rowBytes + blockBytes*b + nan
			}
			if dt == elemF32 {
				binary.LittleEndian.PutUint32(mrow[blockMask*b:], uint32(w))
			} else {
				binary.LittleEndian.PutUint64(mrow[blockMask*b:], w)
			}
		}
		if rest := rowBytes - full*blockBytes; rest > 0 {
			var in [blockBytes]byte
			var out [blockBytes / 2]byte
			copy(in[:], srow[full*blockBytes:])
			w, nan := block(&out, &in)
			if nan >= 0 {
				return r*rowBytes + full*blockBytes + nan
			}
			copy(crow[full*blockBytes/2:], out[:rest/2])
			groups := rest / dt.size() / 4
			w &= 1<<(4*groups) - 1 // the padding groups' nibbles, and a padding nibble of the row
			var wb [8]byte
			binary.LittleEndian.PutUint64(wb[:], w)
			copy(mrow[full*blockMask:], wb[:(groups+1)/2])
		}
	}
	return -1
}

// bitmaskBlock16 prunes by Rule24 the groups from from on of the block s
// of F16 (f16) or BF16 elements and writes their bitmask form: the kept
// values to c, and the mask nibbles shifted into w from the top (after
// the block's 16 groups, the first is in the low bits). tab is
// bitmaskTable(). The rest is as for pruneBlock16.
func bitmaskBlock16(c *[blockBytes / 2]byte, s *[blockBytes]byte, from uint, w uint64, f16 bool, tab *pairTable) (_ uint64, kept, total float64, stop uint, m, mk uint64) {
	_, _, _ = c[0], s[0], tab.mul[0] // the nil checks, out of the loop
	var k0, t0, t1 float32
	i := from
	if f16 {
		for ; i < blockBytes/8; i++ {
			v := binary.LittleEndian.Uint64(s[8*i:])
			m = v & mag16
			k := kept24(m)
			x, idx := v&lanes16(k&(m+mag16)), k*gatherSigns>>60
			pv := uint32(x * tab.mul[idx] >> 32)
			binary.LittleEndian.PutUint32(c[4*i:], pv)
			w = w>>4 | tab.nib[idx]
			if (m+slowAdd16)&sign16 != 0 {
				mk = x & mag16
				break
			}
			ml, mh, kp := uint32(m), uint32(m>>32), pv&0x7FFF7FFF
			t0 += math.Float32frombits(ml<<13&f16Bits) + math.Float32frombits(ml>>3&f16Bits)
			t1 += math.Float32frombits(mh<<13&f16Bits) + math.Float32frombits(mh>>3&f16Bits)
			k0 += math.Float32frombits(kp<<13&f16Bits) + math.Float32frombits(kp>>3&f16Bits)
		}
	} else {
		for ; i < blockBytes/8; i++ {
			v := binary.LittleEndian.Uint64(s[8*i:])
			m = v & mag16
			k := kept24(m)
			x, idx := v&lanes16(k&(m+mag16)), k*gatherSigns>>60
			pv := uint32(x * tab.mul[idx] >> 32)
			binary.LittleEndian.PutUint32(c[4*i:], pv)
			w = w>>4 | tab.nib[idx]
			if (m+slowAdd16)&sign16 != 0 {
				mk = x & mag16
				break
			}
			ml, mh, kp := uint32(m), uint32(m>>32), pv&0x7FFF7FFF
			t0 += math.Float32frombits(ml<<16) + math.Float32frombits(ml&^0xFFFF)
			t1 += math.Float32frombits(mh<<16) + math.Float32frombits(mh&^0xFFFF)
			k0 += math.Float32frombits(kp<<16) + math.Float32frombits(kp&^0xFFFF)
		}
	}
	return w, float64(k0), float64(t0) + float64(t1), i, m, mk
}
