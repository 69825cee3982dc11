package checkpoint

import (
	"bytes"
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
	"unicode/utf8"
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
	if i := invalidText(b); i >= 0 {
		return nil, newError("", headerBase+int64(i), ErrInvalidHeader, "invalid UTF-8 or lone surrogate escape")
	}
	p := newJSONWalker(b, headerBase, ErrInvalidHeader)
	h := &Header{DataOffset: headerBase + int64(len(b))}
	if err := p.beginObject(ErrInvalidHeader, "header"); err != nil {
		return nil, err
	}
	seen := make(map[string]struct{})
	for p.more() {
		off := p.off()
		name, err := p.key()
		if err != nil {
			return nil, err
		}
		if _, dup := seen[name]; dup {
			return nil, newError(name, off, ErrDuplicateKey, "the name appears twice at the top level")
		}
		seen[name] = struct{}{}
		if name == metadataKey {
			if h.Metadata, err = p.metadata(); err != nil {
				return nil, err
			}
			continue
		}
		t, err := p.tensor(name)
		if err != nil {
			return nil, err
		}
		if err := checkSize(t); err != nil {
			err.Off = off
			return nil, err
		}
		h.Tensors = append(h.Tensors, t)
	}
	if err := p.endObject("", ErrInvalidHeader); err != nil {
		return nil, err
	}
	if err := p.end(); err != nil {
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

// invalidText returns the index of the first byte of b that is not valid
// UTF-8 or that starts a \u escape of a lone UTF-16 surrogate (which
// encoding/json would silently turn into U+FFFD), or -1 when there is none.
func invalidText(b []byte) int {
	if !utf8.Valid(b) {
		for i := 0; i < len(b); {
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				return i
			}
			i += n
		}
	}
	// In valid JSON every backslash begins an escape inside a string;
	// elsewhere the JSON decoder rejects the text anyway.
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 {
			return -1
		}
		i += j
		v, ok := hexEscape(b[i:])
		switch {
		case !ok:
			i += 2 // an escape of one ASCII character, or invalid JSON
		case v >= 0xD800 && v < 0xDC00:
			if w, ok := hexEscape(b[i+6:]); !ok || w < 0xDC00 || w >= 0xE000 {
				return i
			}
			i += 12
		case v >= 0xDC00 && v < 0xE000:
			return i
		default:
			i += 6
		}
		if i >= len(b) {
			return -1
		}
	}
}

// hexEscape decodes a \uXXXX escape at the start of b.
func hexEscape(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[2:6]), 16, 16)
	if err != nil {
		return 0, false
	}
	return rune(v), true
}

// jsonWalker reads a JSON text token by token, so that the parsers see
// every key (encoding/json's struct decoding keeps the last of duplicate
// keys and matches field names case-insensitively).
type jsonWalker struct {
	dec   *json.Decoder
	text  []byte
	base  int64 // absolute offset of text[0]
	class error // the class of syntax errors
}

// newJSONWalker returns a walker over b, which starts at file offset base;
// its syntax errors wrap class.
func newJSONWalker(b []byte, base int64, class error) *jsonWalker {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return &jsonWalker{dec: dec, text: b, base: base, class: class}
}

// off returns the absolute offset of the next token: past the last token
// read and the whitespace, colon or comma that follow it.
func (w *jsonWalker) off() int64 {
	i := w.dec.InputOffset()
	for i < int64(len(w.text)) {
		switch w.text[i] {
		case ' ', '\t', '\n', '\r', ':', ',':
			i++
			continue
		}
		break
	}
	return w.base + i
}

// more reports whether the current object or array has another element.
func (w *jsonWalker) more() bool { return w.dec.More() }

// token reads the next token; syntax errors and a premature end wrap class.
func (w *jsonWalker) token(tensor string, class error) (json.Token, error) {
	off := w.off()
	tok, err := w.dec.Token()
	if err != nil {
		if se, ok := errors.AsType[*json.SyntaxError](err); ok {
			// The decoder reports the offset of the offending byte or
			// just past it, depending on where it found the error.
			off = max(off, w.base+se.Offset-1)
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, newError(tensor, off, class, err.Error())
	}
	return tok, nil
}

// key reads an object key.
func (w *jsonWalker) key() (string, error) {
	tok, err := w.token("", w.class)
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok { // unreachable: the decoder only yields strings as keys
		return "", newError("", w.off(), w.class, "object key is not a string")
	}
	return s, nil
}

// beginObject reads the '{' that opens what.
func (w *jsonWalker) beginObject(class error, what string) error {
	return w.delim(json.Delim('{'), "", class, what)
}

// endObject reads the '}' that closes the current object.
func (w *jsonWalker) endObject(tensor string, class error) error {
	return w.delim(json.Delim('}'), tensor, class, "the object's end")
}

// delim reads the next token and checks that it is want.
func (w *jsonWalker) delim(want json.Delim, tensor string, class error, what string) error {
	off := w.off()
	tok, err := w.token(tensor, class)
	if err != nil {
		return err
	}
	if tok != want {
		return newError(tensor, off, class, fmt.Sprintf("%s must be %s, not %s", what, kindOf(want), kindOf(tok)))
	}
	return nil
}

// end checks that only whitespace follows the top-level value.
func (w *jsonWalker) end() error {
	off := w.off()
	tok, err := w.dec.Token()
	if err == io.EOF {
		return nil
	}
	detail := "data after the top-level object"
	if err == nil {
		detail += ": " + kindOf(tok)
	}
	return newError("", off, w.class, detail)
}

// metadata reads the value of __metadata__: an object of strings.
func (w *jsonWalker) metadata() (map[string]string, error) {
	if err := w.delim(json.Delim('{'), metadataKey, ErrInvalidMetadata, "__metadata__"); err != nil {
		return nil, err
	}
	m := make(map[string]string)
	for w.more() {
		off := w.off()
		k, err := w.key()
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			return nil, newError(metadataKey, off, ErrDuplicateKey, fmt.Sprintf("key %s appears twice", clip(k)))
		}
		off = w.off()
		tok, err := w.token(metadataKey, ErrInvalidHeader)
		if err != nil {
			return nil, err
		}
		v, ok := tok.(string)
		if !ok {
			return nil, newError(metadataKey, off, ErrInvalidMetadata,
				fmt.Sprintf("the value of %s is %s, not a string", clip(k), kindOf(tok)))
		}
		m[k] = v
	}
	return m, w.endObject(metadataKey, ErrInvalidHeader)
}

// tensor reads the entry of the tensor called name.
func (w *jsonWalker) tensor(name string) (TensorInfo, error) {
	t := TensorInfo{Name: name}
	if err := w.delim(json.Delim('{'), name, ErrInvalidHeader, "a tensor entry"); err != nil {
		return t, err
	}
	var have struct{ dtype, shape, offsets bool }
	for w.more() {
		off := w.off()
		field, err := w.key()
		if err != nil {
			return t, err
		}
		var seen *bool
		switch field {
		case fieldDType:
			seen = &have.dtype
		case fieldShape:
			seen = &have.shape
		case fieldOffsets:
			seen = &have.offsets
		default:
			return t, newError(name, off, ErrUnknownField,
				fmt.Sprintf("field %s (want %q, %q and %q)", clip(field), fieldDType, fieldShape, fieldOffsets))
		}
		if *seen {
			return t, newError(name, off, ErrDuplicateKey, fmt.Sprintf("field %q appears twice", field))
		}
		*seen = true
		switch field {
		case fieldDType:
			t.DType, err = w.dtype(name)
		case fieldShape:
			t.Shape, err = w.ints(name, fieldShape, []int64{}, -1)
		case fieldOffsets:
			var o []int64
			if o, err = w.ints(name, fieldOffsets, make([]int64, 0, 2), 2); err == nil {
				t.Begin, t.End = o[0], o[1]
			}
		}
		if err != nil {
			return t, err
		}
	}
	if err := w.endObject(name, ErrInvalidHeader); err != nil {
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

// kindOf describes a JSON token for an error message.
func kindOf(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return "'" + v.String() + "'"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

// clip quotes s for an error message, shortened if it is long.
func clip(s string) string {
	const limit = 64
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	i := limit
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return strconv.Quote(s[:i]) + "..."
}
