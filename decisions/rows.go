package decisions

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/prune24"
)

// Decision is what a decisions file decides for one target weight: its
// mask and, for sparsegpt, its updated values. Its methods read and
// validate them a chunk of rows at a time.
type Decision struct {
	// Weight is the target's name, DType its element type, Rows × Cols
	// its shape.
	Weight     string
	DType      checkpoint.DType
	Rows, Cols int

	file         *File
	mask, update checkpoint.TensorInfo
	updates      bool
}

// Updates reports whether the decision holds updated values of the kept
// weights (sparsegpt), which replace the original's.
func (x *Decision) Updates() bool { return x.updates }

// MaskName returns the name of the decision's mask tensor.
func (x *Decision) MaskName() string { return x.mask.Name }

// MaskRowBytes returns the bytes of one row of the mask, ceil(Cols/8).
func (x *Decision) MaskRowBytes() int { return (x.Cols + 7) / 8 }

// ReadMask reads rows [r0, r0+n) of the mask into dst (n·MaskRowBytes
// bytes, through the file descriptor, not the mapping) and validates
// them: exactly 2 bits set in every group of 4 columns, none past column
// Cols-1. A violation is an [*Error] naming the mask, the row and the
// columns.
func (x *Decision) ReadMask(dst []byte, r0, n int) error {
	if err := x.read(dst, x.mask, r0, n, x.MaskRowBytes()); err != nil {
		return err
	}
	err := prune24.CheckMask(dst, x.Cols)
	if err == nil {
		return nil
	}
	var be *prune24.BitmaskError
	if !errors.As(err, &be) {
		return fmt.Errorf("%s: tensor %q: %w", x.file.path, x.mask.Name, err)
	}
	detail := fmt.Sprintf("row %d, columns %d-%d: %d kept, want 2 of every 4", r0+be.Row, 4*be.Group, 4*be.Group+3, be.Bits)
	if be.Padding {
		detail = fmt.Sprintf("row %d: %d of the bits past the last column (%d) set, want none", r0+be.Row, be.Bits, x.Cols-1)
	}
	return &Error{File: x.file.path, Tensor: x.mask.Name, Detail: detail, Err: prune24.OffsetRows(err, r0)}
}

// ReadUpdate reads rows [r0, r0+n) of the updated weight into dst (n·Cols
// elements) and validates them against mask, the same rows of the mask
// as ReadMask gives them: every element finite, and ±0 wherever the mask
// prunes. A violation is an [*Error] naming the update, the row and the
// column. It is an error to call it for a decision without updates.
func (x *Decision) ReadUpdate(dst, mask []byte, r0, n int) error {
	if !x.updates {
		return fmt.Errorf("%s: %s: %s decisions hold no updated weights", x.file.path, x.Weight, x.file.Meta.Method)
	}
	if len(mask) != n*x.MaskRowBytes() {
		return fmt.Errorf("%s: %s: %d mask bytes for %d rows", x.file.path, x.Weight, len(mask), n)
	}
	size := x.DType.Size()
	if err := x.read(dst, x.update, r0, n, x.Cols*size); err != nil {
		return err
	}
	expMask, magMask := uint32(0x7C00), uint32(0x7FFF)
	switch x.DType {
	case checkpoint.BF16:
		expMask = 0x7F80
	case checkpoint.F32:
		expMask, magMask = 0x7F80_0000, 0x7FFF_FFFF
	}
	mb := x.MaskRowBytes()
	for r := range n {
		row, mrow := dst[r*x.Cols*size:(r+1)*x.Cols*size], mask[r*mb:(r+1)*mb]
		for c := range x.Cols {
			var b uint32
			if size == 4 {
				b = binary.LittleEndian.Uint32(row[4*c:])
			} else {
				b = uint32(binary.LittleEndian.Uint16(row[2*c:]))
			}
			kept := mrow[c/8]>>(c%8)&1 != 0
			if b&expMask == expMask || (!kept && b&magMask != 0) {
				return x.updateError(b, r0+r, c, kept)
			}
		}
	}
	return nil
}

// updateError describes the element of bits b at row r, column c of the
// update that ReadUpdate refuses.
func (x *Decision) updateError(b uint32, r, c int, kept bool) error {
	var v float64
	switch x.DType {
	case checkpoint.F16:
		v = prune24.F16ToFloat64(uint16(b))
	case checkpoint.BF16:
		v = prune24.BF16ToFloat64(uint16(b))
	default:
		v = prune24.F32ToFloat64(b)
	}
	detail := fmt.Sprintf("row %d, column %d: %g where the mask prunes, want ±0", r, c, v)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		detail = fmt.Sprintf("row %d, column %d: %v: an updated weight must be finite", r, c, v)
	}
	return &Error{File: x.file.path, Tensor: x.update.Name, Detail: detail}
}

// read reads rows [r0, r0+n) of tensor t, of rowBytes each, into dst.
func (x *Decision) read(dst []byte, t checkpoint.TensorInfo, r0, n, rowBytes int) error {
	if r0 < 0 || n < 0 || r0+n > x.Rows || len(dst) != n*rowBytes {
		return fmt.Errorf("%s: tensor %q: rows [%d, %d) into %d bytes do not fit its %d rows of %d bytes",
			x.file.path, t.Name, r0, r0+n, len(dst), x.Rows, rowBytes)
	}
	if x.file.f == nil {
		return fmt.Errorf("%s: not open", x.file.path)
	}
	if _, err := x.file.f.ReadAt(dst, x.file.f.DataOffset+t.Begin+int64(r0)*int64(rowBytes)); err != nil {
		return fmt.Errorf("%s: tensor %q: reading rows %d+: %w", x.file.path, t.Name, r0, err)
	}
	return nil
}
