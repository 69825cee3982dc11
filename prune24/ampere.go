package prune24

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// The Ampere layout is PyTorch's CUTLASS form of a 2:4 matrix
// (torch.sparse.to_sparse_semi_structured; docs/formats.md §1):
//
//   - packed, [rows][cols/2] of dt: the 2 selected values of every group
//     of 4, row-major;
//   - meta, [rows][cols/16] int16 (F32: [rows][cols/8]): one nibble
//     i0|i1<<2 per group naming the selected slots, 4 groups per logical
//     word (the first group in the lowest nibble), stored in CUTLASS's
//     ColumnMajorInterleaved<2> order with a 2×2 swizzle.
//
// F32 is 1:2 sparse: every pair (a, b) is a group of 4 half-words
// (a, a, b, b), so its nibble is 0x4 (keep a) or 0xE (keep b), a meta word
// covers 8 columns and packed holds one value per pair.

// ampereCols returns the dense columns one Ampere meta word covers.
func ampereCols(dt elem) int {
	if dt == elemF32 {
		return 8
	}
	return 16
}

// AmpereShapeError returns nil if a rows×cols matrix of dt fits the Ampere
// layout, and otherwise an error wrapping ErrShape (or ErrDType) that says
// why. PyTorch requires rows to be a multiple of 32 and cols a multiple of
// 64 for F16 and BF16, and of 32 for F32; both must be positive here.
func AmpereShapeError(dt checkpoint.DType, rows, cols int) error {
	e, err := elemOf(dt)
	if err != nil {
		return err
	}
	return ampereShape(e, rows, cols)
}

// ampereShape is AmpereShapeError for an elem.
func ampereShape(dt elem, rows, cols int) error {
	colQ := 64
	if dt == elemF32 {
		colQ = 32
	}
	if rows <= 0 || cols <= 0 || rows%32 != 0 || cols%colQ != 0 {
		return fmt.Errorf("%w: %v %d×%d matrix: the Ampere layout needs rows a positive multiple of 32 and columns a positive multiple of %d",
			ErrShape, dt, rows, cols, colQ)
	}
	_, err := mulBytes(rows, cols, dt.size())
	return err
}

// AmpereSizes returns the lengths in bytes of the packed and meta buffers
// of a rows×cols matrix of dt in the Ampere layout, or 0, 0 when
// [AmpereShapeError] reports the shape unfit.
func AmpereSizes(dt checkpoint.DType, rows, cols int) (packedBytes, metaBytes int) {
	e, err := elemOf(dt)
	if err != nil {
		return 0, 0
	}
	return ampereSizes(e, rows, cols)
}

// ampereSizes is AmpereSizes for an elem.
func ampereSizes(dt elem, rows, cols int) (packedBytes, metaBytes int) {
	if ampereShape(dt, rows, cols) != nil {
		return 0, 0
	}
	return rows * cols / 2 * dt.size(), rows * (cols / ampereCols(dt)) * 2
}

// checkAmpere validates the shape and the lengths of the dense, packed and
// meta buffers of an Ampere conversion.
func checkAmpere(dense, packed, meta []byte, dt elem, rows, cols int) error {
	if err := ampereShape(dt, rows, cols); err != nil {
		return err
	}
	pb, mb := ampereSizes(dt, rows, cols)
	if err := checkLen("dense matrix", len(dense), rows*cols*dt.size()); err != nil {
		return err
	}
	if err := checkLen("packed", len(packed), pb); err != nil {
		return err
	}
	return checkLen("meta", len(meta), mb)
}

// metaBase returns the index, in meta read as uint16 words, of row r's
// logical word 0. By the closed form of docs/formats.md §1.5, logical word c of
// row r is stored at metaBase(r) + 2·(c/2)·rows + 2·(c%2).
func metaBase(r int) int {
	b, rr := r/32, r%32
	return 2*(32*b+4*(rr%8)+2*(rr/16)) + rr%16/8
}

// PackAmpere writes the Ampere layout of pruned, a rows×cols matrix of dt,
// to packed and meta (see [AmpereSizes]), byte for byte as PyTorch does.
//
// pruned must already be sparse: at most 2 nonzeros in every group of 4
// for F16 and BF16, at most 1 in every pair for F32 (-0.0 counts as zero,
// NaN as nonzero); otherwise the first violation is a [*StructureError].
// A group with fewer nonzeros selects zero slots as PyTorch does (an
// all-zero group selects slots 2 and 3), and their bits are copied as they
// are. On error, the content of packed and meta is unspecified.
func PackAmpere(packed, meta, pruned []byte, dt checkpoint.DType, rows, cols int) error {
	e, err := elemOf(dt)
	if err != nil {
		return err
	}
	return packAmpere(packed, meta, pruned, e, rows, cols)
}

// packAmpere is PackAmpere for an elem.
func packAmpere(packed, meta, pruned []byte, dt elem, rows, cols int) error {
	if err := checkAmpere(pruned, packed, meta, dt, rows, cols); err != nil {
		return err
	}
	if dt == elemF32 {
		return packAmpere32(packed, meta, pruned, rows, cols)
	}
	return packAmpere16(packed, meta, pruned, rows, cols)
}

// packAmpere16 is PackAmpere for F16 and BF16, buffers validated. One
// column pair p of meta words covers 32 columns: 8 groups, 64 bytes of a
// dense row, 32 bytes of a packed row.
func packAmpere16(packed, meta, pruned []byte, rows, cols int) error {
	for r := 0; r < rows; r++ {
		src := pruned[r*cols*2 : (r+1)*cols*2]
		dst := packed[r*cols : (r+1)*cols]
		base := metaBase(r)
		for g0 := 0; g0+8 <= cols/4; g0 += 8 {
			var word [2]uint64
			for t := 0; t < 8; t++ {
				g := g0 + t
				v := binary.LittleEndian.Uint64(src[8*g:])
				idx := laneMask16(nonzero16(v))
				if over2>>idx&1 != 0 {
					return &StructureError{Row: r, Col: 4 * g, Rule: Rule24, Nonzero: bits.OnesCount64(idx)}
				}
				nib := nibble(ampereNibbles, idx)
				i0, i1 := 16*(nib&3), 16*(nib>>2)
				binary.LittleEndian.PutUint32(dst[4*g:], uint32(v>>i0)&0xFFFF|uint32(v>>i1)<<16)
				word[t/4] |= nib << (4 * (t % 4))
			}
			at := 2 * (base + 2*(g0/8)*rows)
			binary.LittleEndian.PutUint16(meta[at:], uint16(word[0]))
			binary.LittleEndian.PutUint16(meta[at+4:], uint16(word[1]))
		}
	}
	return nil
}

// packAmpere32 is PackAmpere for F32, buffers validated. One column pair
// p of meta words covers 16 columns: 8 pairs, 64 bytes of a dense row, 32
// bytes of a packed row.
func packAmpere32(packed, meta, pruned []byte, rows, cols int) error {
	for r := 0; r < rows; r++ {
		src := pruned[r*cols*4 : (r+1)*cols*4]
		dst := packed[r*cols*2 : (r+1)*cols*2]
		base := metaBase(r)
		for g0 := 0; g0+8 <= cols/2; g0 += 8 {
			var word [2]uint64
			for t := 0; t < 8; t++ {
				g := g0 + t
				v := binary.LittleEndian.Uint64(src[8*g:])
				nz := nonzero32(v)
				if nz == sign32 {
					return &StructureError{Row: r, Col: 2 * g, Rule: Rule12, Nonzero: 2}
				}
				// Keep b (nibble 0xE) unless a is nonzero (nibble 0x4).
				b := nz>>31&1 ^ 1
				binary.LittleEndian.PutUint32(dst[4*g:], uint32(v>>(32*b)))
				word[t/4] |= (0x4 + 0xA*b) << (4 * (t % 4))
			}
			at := 2 * (base + 2*(g0/8)*rows)
			binary.LittleEndian.PutUint16(meta[at:], uint16(word[0]))
			binary.LittleEndian.PutUint16(meta[at+4:], uint16(word[1]))
		}
	}
	return nil
}

// UnpackAmpere writes to dense, a rows×cols matrix of dt, the matrix that
// packed and meta hold in the Ampere layout: the inverse of [PackAmpere].
// Selected slots get the packed values, every other slot +0.0.
//
// Every meta nibble must be one PyTorch writes: 0x4, 0x8, 0x9, 0xC, 0xD or
// 0xE for F16 and BF16, 0x4 or 0xE for F32; the first other one is a
// [*MetaError]. On error, the content of dense is unspecified.
func UnpackAmpere(dense, packed, meta []byte, dt checkpoint.DType, rows, cols int) error {
	e, err := elemOf(dt)
	if err != nil {
		return err
	}
	if err := checkAmpere(dense, packed, meta, e, rows, cols); err != nil {
		return err
	}
	if e == elemF32 {
		return unpackAmpere32(dense, packed, meta, rows, cols)
	}
	return unpackAmpere16(dense, packed, meta, rows, cols)
}

// unpackAmpere16 is UnpackAmpere for F16 and BF16, buffers validated.
func unpackAmpere16(dense, packed, meta []byte, rows, cols int) error {
	for r := 0; r < rows; r++ {
		dst := dense[r*cols*2 : (r+1)*cols*2]
		src := packed[r*cols : (r+1)*cols]
		base := metaBase(r)
		for g0 := 0; g0+8 <= cols/4; g0 += 8 {
			at := 2 * (base + 2*(g0/8)*rows)
			word := uint64(binary.LittleEndian.Uint16(meta[at:])) |
				uint64(binary.LittleEndian.Uint16(meta[at+4:]))<<16
			for t := 0; t < 8; t++ {
				g := g0 + t
				nib := word >> (4 * t) & 0xF
				if validNibbles>>nib&1 == 0 {
					return &MetaError{Row: r, Group: g, Nibble: byte(nib), Rule: Rule24}
				}
				pv := binary.LittleEndian.Uint32(src[4*g:])
				out := uint64(pv&0xFFFF)<<(16*(nib&3)) | uint64(pv>>16)<<(16*(nib>>2))
				binary.LittleEndian.PutUint64(dst[8*g:], out)
			}
		}
	}
	return nil
}

// unpackAmpere32 is UnpackAmpere for F32, buffers validated.
func unpackAmpere32(dense, packed, meta []byte, rows, cols int) error {
	for r := 0; r < rows; r++ {
		dst := dense[r*cols*4 : (r+1)*cols*4]
		src := packed[r*cols*2 : (r+1)*cols*2]
		base := metaBase(r)
		for g0 := 0; g0+8 <= cols/2; g0 += 8 {
			at := 2 * (base + 2*(g0/8)*rows)
			word := uint64(binary.LittleEndian.Uint16(meta[at:])) |
				uint64(binary.LittleEndian.Uint16(meta[at+4:]))<<16
			for t := 0; t < 8; t++ {
				g := g0 + t
				nib := word >> (4 * t) & 0xF
				if (1<<0x4|1<<0xE)>>nib&1 == 0 {
					return &MetaError{Row: r, Group: g, Nibble: byte(nib), Rule: Rule12}
				}
				// 0x4 keeps a (shift 0), 0xE keeps b (bit 3 set: shift 32).
				pv := binary.LittleEndian.Uint32(src[4*g:])
				binary.LittleEndian.PutUint64(dst[8*g:], uint64(pv)<<(nib&8<<2))
			}
		}
	}
	return nil
}
