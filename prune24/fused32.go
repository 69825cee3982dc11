package prune24

import (
	"encoding/binary"
	"math"
)

// ampere32 is PruneAmpere for F32 with Rule12, buffers validated. A block
// is 32 columns of a row: 16 pairs, 64 bytes of a packed row and 4 meta
// words. It returns the byte offset in src of the first NaN, or -1.
func ampere32(s *sums, packed, meta, src []byte, rows, cols int) int {
	rowBytes := 4 * cols
	for r := range rows {
		srow := src[r*rowBytes : (r+1)*rowBytes]
		prow := packed[r*2*cols : (r+1)*2*cols]
		for b := range rowBytes / blockBytes {
			p, in := (*[blockBytes / 2]byte)(prow[64*b:]), (*[blockBytes]byte)(srow[blockBytes*b:])
			var w uint64
			for from := uint(0); ; {
				var (
					kept, total float64
					stop        uint
					m, mk       uint64
				)
				w, kept, total, stop, m, mk = ampereBlock32(p, in, from, w)
				s.add(kept, total)
				if stop >= blockBytes/8 {
					break
				}
				if nan := slow32(&s.wide, m, mk); nan >= 0 {
					return r*rowBytes + blockBytes*b + 8*int(stop) + nan
				}
				from = stop + 1
			}
			putMeta(meta, w, r, b, rows)
		}
	}
	return -1
}

// ampereBlock32 prunes by Rule12 the pairs from from on of the block s of
// F32 elements and writes their Ampere form: the kept value of every pair
// (a, b) to p, and the meta nibbles shifted into w from the top. The rest
// is as for pruneBlock16, for pairs: it returns the magnitudes m of pair
// stop, and mk of the one it kept.
//
// The pruned pair is (a, 0) or (0, b), and PackAmpere's nibble is 0x4
// (slot a) when its a is nonzero, else 0xE (slot b, which holds b or, if
// both are zero, +0.0).
func ampereBlock32(p *[blockBytes / 2]byte, s *[blockBytes]byte, from uint, w uint64) (_ uint64, kept, total float64, stop uint, m, mk uint64) {
	_, _ = p[0], s[0] // the nil checks, out of the loop
	var k0, t0 float32
	i := from
	for ; i < blockBytes/8; i++ {
		v := binary.LittleEndian.Uint64(s[8*i:])
		m = v & mag32
		a, b := m&0x7FFFFFFF, m>>32
		keepB := (a - b) >> 63 // b outranks a
		// The kept lane, without a branch (which the data would make
		// unpredictable).
		pv, kp := uint32(v>>(32*keepB)), uint32(m>>(32*keepB))&0x7FFFFFFF
		nz := (uint64(kp) + 0x7FFFFFFF) >> 31 // the kept value is nonzero
		pv &= uint32(-nz)                     // -0.0 becomes +0.0
		binary.LittleEndian.PutUint32(p[4*i:], pv)
		w = w>>4 | (0xE-0xA*(nz&^keepB))<<60
		if (m+slowAdd32)&sign32 != 0 {
			mk = uint64(kp) << (32 * keepB)
			break
		}
		t0 += math.Float32frombits(uint32(a)) + math.Float32frombits(uint32(b))
		k0 += math.Float32frombits(kp)
	}
	return w, float64(k0), float64(t0), i, m, mk
}

// bitmaskBlock32 prunes by Rule24 the groups from from on of the block s
// of F32 elements and writes their bitmask form: the 2 kept values of
// every group to c, and the mask nibbles shifted into w from the top
// (after the block's 8 groups, the first is in bits 32..35). The rest is
// as for pruneBlock32, whose selection it shares.
func bitmaskBlock32(c *[blockBytes / 2]byte, s *[blockBytes]byte, from uint, w uint64) (_ uint64, kept, total float64, stop uint, g group32) {
	_, _ = c[0], s[0] // the nil checks, out of the loop
	var sk0, st0, st1 float32
	i := from
	for ; i < blockBytes/16; i++ {
		v0 := binary.LittleEndian.Uint64(s[16*i:])
		v1 := binary.LittleEndian.Uint64(s[16*i+8:])
		m0, m1 := v0&mag32, v1&mag32
		a0, a1, a2, a3 := m0&0x7FFFFFFF, m0>>32, m1&0x7FFFFFFF, m1>>32
		c01, c02, c03 := (a0-a1)>>63, (a0-a2)>>63, (a0-a3)>>63
		c12, c13, c23 := (a1-a2)>>63, (a1-a3)>>63, (a2-a3)>>63
		k0, k1 := (c01+c02+c03-2)>>63, (c12+c13-c01-1)>>63
		k2, k3 := (c23-c02-c12)>>63, (1-c03-c13-c23)>>63
		keep0, keep1 := lanes32(k0, k1, k2, k3)
		x0, x1 := pruned32(v0, m0, keep0), pruned32(v1, m1, keep1)
		// The kept lanes of the 4: the first is lane 0, 1 or 2, the
		// second lane 3, 2 or 1.
		l0, l1, l2, l3 := uint32(x0), uint32(x0>>32), uint32(x1), uint32(x1>>32)
		first, second := l2, l1
		if k1 != 0 {
			first = l1
		}
		if k0 != 0 {
			first = l0
		}
		if k2 != 0 {
			second = l2
		}
		if k3 != 0 {
			second = l3
		}
		binary.LittleEndian.PutUint32(c[8*i:], first)
		binary.LittleEndian.PutUint32(c[8*i+4:], second)
		w = w>>4 | (k0|k1<<1|k2<<2|k3<<3)<<60
		if ((m0+slowAdd32)|(m1+slowAdd32))&sign32 != 0 {
			g = group32{m0, m1, x0 & mag32, x1 & mag32}
			break
		}
		st0 += math.Float32frombits(uint32(m0)) + math.Float32frombits(uint32(m0>>32))
		st1 += math.Float32frombits(uint32(m1)) + math.Float32frombits(uint32(m1>>32))
		sk0 += math.Float32frombits(first&0x7FFFFFFF) + math.Float32frombits(second&0x7FFFFFFF)
	}
	return w, float64(sk0), float64(st0) + float64(st1), i, g
}
