package prune24

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// The bitmask layout is compressed-tensors' sparse-24-bitmask form of a
// 2:4 matrix (docs/formats.md §3):
//
//   - compressed, [rows][cols/2] of dt: the 2 kept values of every group of
//     4, in ascending column order;
//   - bitmask, [rows][ceil(cols/8)] bytes: column c of row r is bit c%8 of
//     byte [r][c/8] (numpy.packbits with bitorder="little"), and every
//     group has exactly 2 bits set.

// BitmaskShapeError returns nil if a rows×cols matrix fits what vLLM
// loads in the sparse-24-bitmask format (rows and cols positive multiples
// of 8), and otherwise an error wrapping ErrShape. [PackBitmask] and
// [UnpackBitmask] themselves accept any rows and any cols that is a
// multiple of 4.
func BitmaskShapeError(rows, cols int) error {
	if rows <= 0 || cols <= 0 || rows%8 != 0 || cols%8 != 0 {
		return fmt.Errorf("%w: %d×%d matrix: the bitmask format needs rows and columns positive multiples of 8", ErrShape, rows, cols)
	}
	return nil
}

// BitmaskSizes returns the lengths in bytes of the compressed and bitmask
// buffers of a rows×cols matrix of dt in the bitmask layout, or 0, 0 when
// dt is invalid, a dimension negative, cols not a multiple of 4 or the
// size overflows.
func BitmaskSizes(dt checkpoint.DType, rows, cols int) (compressedBytes, bitmaskBytes int) {
	e, err := elemOf(dt)
	if err != nil {
		return 0, 0
	}
	return bitmaskSizes(e, rows, cols)
}

// bitmaskSizes is BitmaskSizes for an elem.
func bitmaskSizes(dt elem, rows, cols int) (compressedBytes, bitmaskBytes int) {
	n, err := matrixBytes(dt, rows, cols)
	if err != nil {
		return 0, 0
	}
	return n / 2, rows * ((cols + 7) / 8)
}

// checkBitmask validates the shape and the lengths of the dense,
// compressed and bitmask buffers of a bitmask conversion.
func checkBitmask(dense, compressed, bitmask []byte, dt elem, rows, cols int) error {
	n, err := matrixBytes(dt, rows, cols)
	if err != nil {
		return err
	}
	cb, bb := bitmaskSizes(dt, rows, cols)
	if err := checkLen("dense matrix", len(dense), n); err != nil {
		return err
	}
	if err := checkLen("compressed", len(compressed), cb); err != nil {
		return err
	}
	return checkLen("bitmask", len(bitmask), bb)
}

// PackBitmask writes the bitmask layout of pruned, a rows×cols matrix of
// dt, to compressed and bitmask (see [BitmaskSizes]).
//
// The mask of a group is what [Prune] keeps of it: its nonzeros (-0.0
// counts as zero) plus its lowest-index zeros to make exactly 2. A group
// with more than 2 nonzeros is a [*StructureError]. Values are copied bit
// for bit. On error, the content of compressed and bitmask is unspecified.
func PackBitmask(compressed, bitmask, pruned []byte, dt checkpoint.DType, rows, cols int) error {
	e, err := elemOf(dt)
	if err != nil {
		return err
	}
	if err := checkBitmask(pruned, compressed, bitmask, e, rows, cols); err != nil {
		return err
	}
	f32 := e == elemF32
	maskBytes := (cols + 7) / 8
	for r := 0; r < rows; r++ {
		mrow := bitmask[r*maskBytes : (r+1)*maskBytes]
		var err error
		if f32 {
			err = packBitmaskRow32(compressed[r*cols*2:(r+1)*cols*2], mrow, pruned[r*cols*4:(r+1)*cols*4], r)
		} else {
			err = packBitmaskRow16(compressed[r*cols:(r+1)*cols], mrow, pruned[r*cols*2:(r+1)*cols*2], r)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// packBitmaskRow16 packs row r of 16-bit elements.
func packBitmaskRow16(comp, mask, src []byte, r int) error {
	for g := 0; 8*g+8 <= len(src); g++ {
		v := binary.LittleEndian.Uint64(src[8*g:])
		idx := laneMask16(nonzero16(v))
		pair := nibble(bitmaskPairs, idx)
		if pair == 0 {
			return &StructureError{Row: r, Col: 4 * g, Rule: Rule24, Nonzero: bits.OnesCount64(idx)}
		}
		k0, k1 := pair&3, pair>>2
		binary.LittleEndian.PutUint32(comp[4*g:], uint32(v>>(16*k0))&0xFFFF|uint32(v>>(16*k1))<<16)
		setMaskNibble(mask, g, byte(1<<k0|1<<k1))
	}
	return nil
}

// packBitmaskRow32 packs row r of F32 elements.
func packBitmaskRow32(comp, mask, src []byte, r int) error {
	for g := 0; 16*g+16 <= len(src); g++ {
		v0 := binary.LittleEndian.Uint64(src[16*g:])
		v1 := binary.LittleEndian.Uint64(src[16*g+8:])
		idx := laneMask32(nonzero32(v0), nonzero32(v1))
		pair := nibble(bitmaskPairs, idx)
		if pair == 0 {
			return &StructureError{Row: r, Col: 4 * g, Rule: Rule24, Nonzero: bits.OnesCount64(idx)}
		}
		k0, k1 := pair&3, pair>>2
		binary.LittleEndian.PutUint32(comp[8*g:], lane32(v0, v1, k0))
		binary.LittleEndian.PutUint32(comp[8*g+4:], lane32(v0, v1, k1))
		setMaskNibble(mask, g, byte(1<<k0|1<<k1))
	}
	return nil
}

// lane32 returns F32 lane k (0..3) of the group v0 (lanes 0, 1), v1
// (lanes 2, 3).
func lane32(v0, v1, k uint64) uint32 {
	v := v0
	if k >= 2 {
		v = v1
	}
	return uint32(v >> (32 * (k & 1)))
}

// setMaskNibble stores the 4 mask bits of group g of a row: the low
// nibble of byte g/2 for an even g, the high nibble for an odd g. An even
// g clears the high nibble, so a row's padding ends up zero.
func setMaskNibble(mask []byte, g int, b byte) {
	if g%2 == 0 {
		mask[g/2] = b
	} else {
		mask[g/2] |= b << 4
	}
}

// UnpackBitmask writes to dense, a rows×cols matrix of dt, the matrix that
// compressed and bitmask hold in the bitmask layout: the kept values at
// the mask's set bits, in ascending column order, and +0.0 elsewhere.
//
// Every group must have exactly 2 mask bits set, and the padding bits past
// column cols (when cols is not a multiple of 8) must be clear; otherwise
// the first violation is a [*BitmaskError]. On error, the content of dense
// is unspecified.
func UnpackBitmask(dense, compressed, bitmask []byte, dt checkpoint.DType, rows, cols int) error {
	e, err := elemOf(dt)
	if err != nil {
		return err
	}
	if err := checkBitmask(dense, compressed, bitmask, e, rows, cols); err != nil {
		return err
	}
	f32 := e == elemF32
	maskBytes := (cols + 7) / 8
	for r := 0; r < rows; r++ {
		mrow := bitmask[r*maskBytes : (r+1)*maskBytes]
		var err error
		if f32 {
			err = unpackBitmaskRow32(dense[r*cols*4:(r+1)*cols*4], compressed[r*cols*2:(r+1)*cols*2], mrow, r)
		} else {
			err = unpackBitmaskRow16(dense[r*cols*2:(r+1)*cols*2], compressed[r*cols:(r+1)*cols], mrow, r)
		}
		if err != nil {
			return err
		}
		if cols%8 != 0 {
			if pad := mrow[maskBytes-1] >> 4; pad != 0 {
				return &BitmaskError{Row: r, Group: cols / 4, Bits: bits.OnesCount8(pad), Padding: true}
			}
		}
	}
	return nil
}

// maskNibble returns the 4 mask bits of group g of a row.
func maskNibble(mask []byte, g int) uint64 {
	return uint64(mask[g/2]>>(4*(g%2))) & 0xF
}

// unpackBitmaskRow16 unpacks row r of 16-bit elements.
func unpackBitmaskRow16(dst, comp, mask []byte, r int) error {
	for g := 0; 8*g+8 <= len(dst); g++ {
		b := maskNibble(mask, g)
		pair := nibble(maskPairs, b)
		if pair == 0 {
			return &BitmaskError{Row: r, Group: g, Bits: bits.OnesCount64(b)}
		}
		pv := binary.LittleEndian.Uint32(comp[4*g:])
		out := uint64(pv&0xFFFF)<<(16*(pair&3)) | uint64(pv>>16)<<(16*(pair>>2))
		binary.LittleEndian.PutUint64(dst[8*g:], out)
	}
	return nil
}

// unpackBitmaskRow32 unpacks row r of F32 elements.
func unpackBitmaskRow32(dst, comp, mask []byte, r int) error {
	for g := 0; 16*g+16 <= len(dst); g++ {
		b := maskNibble(mask, g)
		pair := nibble(maskPairs, b)
		if pair == 0 {
			return &BitmaskError{Row: r, Group: g, Bits: bits.OnesCount64(b)}
		}
		var lanes [4]uint32
		lanes[pair&3] = binary.LittleEndian.Uint32(comp[8*g:])
		lanes[pair>>2] = binary.LittleEndian.Uint32(comp[8*g+4:])
		binary.LittleEndian.PutUint64(dst[16*g:], uint64(lanes[0])|uint64(lanes[1])<<32)
		binary.LittleEndian.PutUint64(dst[16*g+8:], uint64(lanes[2])|uint64(lanes[3])<<32)
	}
	return nil
}
