package checkpoint

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strconv"
)

// metadataKey is the header key of the free-form string map.
const metadataKey = "__metadata__"

// The fields of a tensor entry, spelled exactly as the specification does.
const (
	fieldDType   = "dtype"
	fieldShape   = "shape"
	fieldOffsets = "data_offsets"
)

// headerBase is the file offset of the first header byte, after the
// 8-byte length prefix.
const headerBase = 8

// ReadHeader reads and validates the header of a safetensors file of size
// bytes read through r: the little-endian uint64 length N, then N bytes of
// JSON, which [ParseHeader] checks against the data section that follows.
// It reads nothing past the header. The returned Header has DataOffset
// set to 8+N.
//
// Errors are *[Error] values with an empty File, wrapping
// [ErrHeaderTooSmall] when size < 8, [ErrHeaderTooLarge] when N exceeds
// [MaxHeaderLen], [ErrInvalidHeaderLen] when 8+N exceeds size, one of the
// classes of ParseHeader, or the error of r.
func ReadHeader(r io.ReaderAt, size int64) (*Header, error) {
	if size < headerBase {
		return nil, newError("", 0, ErrHeaderTooSmall, fmt.Sprintf("file has %d bytes", size))
	}
	var lenBuf [headerBase]byte
	if err := readFullAt(r, lenBuf[:], 0); err != nil {
		return nil, newError("", 0, err, "reading the header length")
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderLen {
		return nil, newError("", 0, ErrHeaderTooLarge, fmt.Sprintf("header length is %d", n))
	}
	if n > uint64(size-headerBase) {
		return nil, newError("", 0, ErrInvalidHeaderLen,
			fmt.Sprintf("header length %d, but only %d bytes follow it", n, size-headerBase))
	}
	b, err := readAt(r, headerBase, int(n))
	if err != nil {
		return nil, newError("", headerBase, err, "reading the header")
	}
	return ParseHeader(b, size-headerBase-int64(n))
}

// readChunk bounds the memory readAt commits to before the reader has
// shown that the bytes exist.
const readChunk = 1 << 20

// readAt reads n bytes at off, growing the buffer as the bytes arrive so
// that a length claimed by a short reader does not allocate n up front.
func readAt(r io.ReaderAt, off int64, n int) ([]byte, error) {
	b := make([]byte, 0, min(n, readChunk))
	for len(b) < n {
		c := min(n-len(b), readChunk)
		b = slices.Grow(b, c)
		if err := readFullAt(r, b[len(b):len(b)+c], off+int64(len(b))); err != nil {
			return nil, err
		}
		b = b[:len(b)+c]
	}
	return b, nil
}

// readFullAt fills p from r at off. A short read is io.ErrUnexpectedEOF.
func readFullAt(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// ParseHeader parses and validates the JSON header b of a safetensors
// file whose data section, which follows the header, is dataLen bytes
// long. It is stricter than the reference implementation:
//
//   - b must be valid UTF-8 holding one JSON object, optionally surrounded
//     by JSON whitespace (writers pad the header with spaces); escaped
//     lone surrogates are rejected;
//   - no key may repeat, at the top level, inside a tensor entry or inside
//     __metadata__;
//   - every entry other than __metadata__ is a tensor with exactly the
//     fields "dtype", "shape" and "data_offsets", spelled in this case;
//   - shape elements and offsets are non-negative integers that fit in an
//     int64, dtype a type of the specification, and the data_offsets span
//     exactly the tensor's size, numel×bits/8, which must be whole bytes;
//   - sorted by offset, the tensors tile the data section [0, dataLen)
//     with neither holes nor overlaps (zero-size tensors take an empty
//     range anywhere in the tiling);
//   - __metadata__, when present, maps strings to strings.
//
// The tensors are returned in offset order, zero-size ones sharing an
// offset ordered by name; DataOffset is 8+len(b). Errors are *[Error]
// values with an empty File, naming the tensor and the absolute file
// offset (8 + position in the header for JSON problems, DataOffset + data
// offset for tiling problems) and wrapping one of [ErrInvalidHeader],
// [ErrDuplicateKey], [ErrUnknownField], [ErrUnknownDType],
// [ErrInvalidOffset], [ErrTensorInvalidInfo], [ErrOverflow],
// [ErrMisaligned], [ErrIncompleteBuffer] or [ErrInvalidMetadata].
// ParseHeader allocates in proportion to len(b) only.
func ParseHeader(b []byte, dataLen int64) (*Header, error) {
	if dataLen < 0 {
		return nil, newError("", -1, ErrInvalidHeaderLen, fmt.Sprintf("negative data section length %d", dataLen))
	}
	w, err := newJSONWalker(b, headerBase, ErrInvalidHeader)
	if err != nil {
		return nil, err
	}
	h := &Header{DataOffset: headerBase + int64(len(b))}
	top := objectRules{what: "header", class: ErrInvalidHeader, endClass: ErrInvalidHeader,
		duplicate: func(name string, off int64) error {
			return newError(name, off, ErrDuplicateKey, "the name appears twice at the top level")
		}}
	err = w.document(top, func(name string, off int64) error {
		if name == metadataKey {
			var err error
			h.Metadata, err = w.metadata()
			return err
		}
		t, err := w.tensor(name)
		if err != nil {
			return err
		}
		if err := checkSize(t); err != nil {
			err.Off = off
			return err
		}
		h.Tensors = append(h.Tensors, t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(h.Tensors, func(a, b TensorInfo) int {
		return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End), cmp.Compare(a.Name, b.Name))
	})
	if err := checkTiling(h.Tensors, h.DataOffset, dataLen); err != nil {
		return nil, err
	}
	return h, nil
}

// checkSize checks one tensor's data_offsets against its dtype and shape.
// The returned error has no offset yet.
func checkSize(t TensorInfo) *Error {
	if t.End < t.Begin {
		return newError(t.Name, -1, ErrInvalidOffset,
			fmt.Sprintf("data_offsets [%d, %d] end before they begin", t.Begin, t.End))
	}
	numel := uint64(1)
	for _, d := range t.Shape {
		hi, lo := bits.Mul64(numel, uint64(d))
		if hi != 0 {
			return newError(t.Name, -1, ErrOverflow, fmt.Sprintf("shape %v has more than 2^64 elements", t.Shape))
		}
		numel = lo
	}
	hi, nbits := bits.Mul64(numel, uint64(t.DType.Bits()))
	if hi != 0 {
		return newError(t.Name, -1, ErrOverflow, fmt.Sprintf("%s %v has more than 2^64 bits", t.DType, t.Shape))
	}
	if nbits%8 != 0 {
		return newError(t.Name, -1, ErrMisaligned, fmt.Sprintf("%s %v is %d bits", t.DType, t.Shape, nbits))
	}
	if span := uint64(t.End - t.Begin); nbits/8 != span {
		return newError(t.Name, -1, ErrTensorInvalidInfo,
			fmt.Sprintf("%s %v is %d bytes, data_offsets [%d, %d] span %d", t.DType, t.Shape, nbits/8, t.Begin, t.End, span))
	}
	return nil
}

// checkTiling checks that ts, sorted by offset, cover [0, dataLen) exactly.
func checkTiling(ts []TensorInfo, dataOff, dataLen int64) error {
	var pos int64
	prev := ""
	for _, t := range ts {
		switch {
		case t.Begin > pos:
			return newError(t.Name, addOff(dataOff, pos), ErrInvalidOffset,
				fmt.Sprintf("hole of %d bytes before data_offsets [%d, %d]", t.Begin-pos, t.Begin, t.End))
		case t.Begin < pos:
			return newError(t.Name, addOff(dataOff, t.Begin), ErrInvalidOffset,
				fmt.Sprintf("data_offsets [%d, %d] overlap tensor %q, which ends at %d", t.Begin, t.End, prev, pos))
		}
		if t.End > pos {
			prev = t.Name
		}
		pos = t.End
	}
	if pos != dataLen {
		return newError("", addOff(dataOff, min(pos, dataLen)), ErrIncompleteBuffer,
			fmt.Sprintf("tensors end at %d, the data section has %d bytes", pos, dataLen))
	}
	return nil
}

// addOff adds two non-negative offsets, saturating instead of wrapping.
func addOff(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}

// newError returns an *Error without a file name.
func newError(tensor string, off int64, class error, detail string) *Error {
	return &Error{Tensor: tensor, Off: off, Err: class, Detail: detail}
}

// metadata reads the value of __metadata__: an object of strings.
func (w *jsonWalker) metadata() (map[string]string, error) {
	m := make(map[string]string)
	rules := objectRules{tensor: metadataKey, what: "__metadata__", class: ErrInvalidMetadata, endClass: ErrInvalidHeader,
		duplicate: func(k string, off int64) error {
			return newError(metadataKey, off, ErrDuplicateKey, fmt.Sprintf("key %s appears twice", clip(k)))
		}}
	err := w.object(rules, func(k string, _ int64) error {
		off := w.off()
		tok, err := w.token(metadataKey, ErrInvalidHeader)
		if err != nil {
			return err
		}
		v, ok := tok.(string)
		if !ok {
			return newError(metadataKey, off, ErrInvalidMetadata,
				fmt.Sprintf("the value of %s is %s, not a string", clip(k), kindOf(tok)))
		}
		m[k] = v
		return nil
	})
	return m, err
}

// tensor reads the entry of the tensor called name.
func (w *jsonWalker) tensor(name string) (TensorInfo, error) {
	t := TensorInfo{Name: name}
	var have struct{ dtype, shape, offsets bool }
	rules := objectRules{tensor: name, what: "a tensor entry", class: ErrInvalidHeader, endClass: ErrInvalidHeader,
		duplicate: func(field string, off int64) error {
			return newError(name, off, ErrDuplicateKey, fmt.Sprintf("field %q appears twice", field))
		}}
	err := w.object(rules, func(field string, off int64) error {
		var err error
		switch field {
		case fieldDType:
			have.dtype = true
			t.DType, err = w.dtype(name)
		case fieldShape:
			have.shape = true
			t.Shape, err = w.ints(name, fieldShape, []int64{}, -1)
		case fieldOffsets:
			have.offsets = true
			var o []int64
			if o, err = w.ints(name, fieldOffsets, make([]int64, 0, 2), 2); err == nil {
				t.Begin, t.End = o[0], o[1]
			}
		default:
			// An unknown field fails here, where it first appears, so
			// only a known field can be reported as repeated.
			err = newError(name, off, ErrUnknownField,
				fmt.Sprintf("field %s (want %q, %q and %q)", clip(field), fieldDType, fieldShape, fieldOffsets))
		}
		return err
	})
	if err != nil {
		return t, err
	}
	for _, f := range []struct {
		have bool
		name string
	}{{have.dtype, fieldDType}, {have.shape, fieldShape}, {have.offsets, fieldOffsets}} {
		if !f.have {
			return t, newError(name, w.off(), ErrUnknownField, fmt.Sprintf("missing field %q", f.name))
		}
	}
	return t, nil
}

// dtype reads a dtype value.
func (w *jsonWalker) dtype(name string) (DType, error) {
	off := w.off()
	tok, err := w.token(name, ErrInvalidHeader)
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", newError(name, off, ErrInvalidHeader, fmt.Sprintf("dtype is %s, not a string", kindOf(tok)))
	}
	if d := DType(s); d.Valid() {
		return d, nil
	}
	return "", newError(name, off, ErrUnknownDType, fmt.Sprintf("dtype %s", clip(s)))
}

// ints reads an array of non-negative integers into dst; n >= 0 requires
// exactly n of them.
func (w *jsonWalker) ints(name, field string, dst []int64, n int) ([]int64, error) {
	if err := w.delim(json.Delim('['), name, ErrInvalidHeader, field); err != nil {
		return nil, err
	}
	for w.more() {
		off := w.off()
		tok, err := w.token(name, ErrInvalidHeader)
		if err != nil {
			return nil, err
		}
		if n >= 0 && len(dst) == n {
			return nil, newError(name, off, ErrInvalidHeader, fmt.Sprintf("%s has more than %d elements", field, n))
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, newError(name, off, ErrInvalidHeader,
				fmt.Sprintf("%s element is %s, not an integer", field, kindOf(tok)))
		}
		u, err := strconv.ParseUint(string(num), 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange) || err == nil && u > math.MaxInt64:
			return nil, newError(name, off, ErrOverflow, fmt.Sprintf("%s element %s exceeds 2^63-1", field, clip(string(num))))
		case err != nil:
			return nil, newError(name, off, ErrInvalidHeader,
				fmt.Sprintf("%s element %s is not a non-negative integer", field, clip(string(num))))
		}
		dst = append(dst, int64(u))
	}
	off := w.off()
	if err := w.delim(json.Delim(']'), name, ErrInvalidHeader, field+"'s end"); err != nil {
		return nil, err
	}
	if n >= 0 && len(dst) != n {
		return nil, newError(name, off, ErrInvalidHeader, fmt.Sprintf("%s has %d of its %d elements", field, len(dst), n))
	}
	return dst, nil
}
