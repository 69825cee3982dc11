package checkpoint

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// updateHeaderGolden rewrites testdata/header from hdrCases.
var updateHeaderGolden = flag.Bool("update-header", false, "rewrite checkpoint/testdata/header/*.safetensors")

// hdrFile returns a safetensors file: the length of header, header, data.
func hdrFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

// hdrData returns n bytes of a recognisable pattern.
func hdrData(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

// hdrCase is a safetensors file and what reading it must give.
type hdrCase struct {
	name string
	file []byte
	err  error        // the sentinel, nil for a valid file
	want []TensorInfo // for a valid file: the tensors in offset order
	meta map[string]string
}

// hdr is a case made of a header and a data section of dataLen bytes.
func hdr(name, header string, dataLen int, err error, want ...TensorInfo) hdrCase {
	return hdrCase{name: name, file: hdrFile(header, hdrData(dataLen)), err: err, want: want}
}

// ti abbreviates a TensorInfo.
func ti(name string, dt DType, begin, end int64, shape ...int64) TensorInfo {
	if shape == nil {
		shape = []int64{}
	}
	return TensorInfo{Name: name, DType: dt, Shape: shape, Begin: begin, End: end}
}

// hdrCases are the conformance cases, after the reference
// implementation's tests and issues. Each is also a golden file
// testdata/header/NAME.safetensors.
func hdrCases() []hdrCase {
	i32 := `{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}`
	attack := make([]string, 10)
	for i := range attack {
		attack[i] = fmt.Sprintf(`"t%d":%s`, i, i32)
	}
	allDTypes, off := []string{}, int64(0)
	var allWant []TensorInfo
	for _, d := range []DType{BOOL, U8, I8, F8E4M3, F8E5M2, F8E8M0, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64, C64, F4, F6E2M3, F6E3M2} {
		n := int64(d.Bits()) // 8 elements of d take d.Bits() bytes
		allDTypes = append(allDTypes, fmt.Sprintf(`"%s":{"dtype":"%s","shape":[2,4],"data_offsets":[%d,%d]}`, d, d, off, off+n))
		allWant = append(allWant, ti(string(d), d, off, off+n, 2, 4))
		off += n
	}
	cases := []hdrCase{
		// Valid files.
		hdr("valid-empty", `{}`, 0, nil),
		hdr("valid-empty-metadata", `{"__metadata__":{}}`, 0, nil),
		hdr("valid-i32", `{"test":`+i32+`}`, 16, nil, ti("test", I32, 0, 16, 2, 2)),
		hdr("valid-rank0", `{"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`, 4, nil, ti("s", F32, 0, 4)),
		hdr("valid-zero-size", `{"z":{"dtype":"F32","shape":[2,0],"data_offsets":[0,0]}}`, 0, nil, ti("z", F32, 0, 0, 2, 0)),
		hdr("valid-zero-size-ties",
			`{"b":{"dtype":"F16","shape":[0],"data_offsets":[2,2]},"x":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},`+
				`"a":{"dtype":"BF16","shape":[0,3],"data_offsets":[2,2]},"y":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}`, 4, nil,
			ti("x", F16, 0, 2, 1), ti("a", BF16, 2, 2, 0, 3), ti("b", F16, 2, 2, 0), ti("y", U8, 2, 4, 2)),
		hdr("valid-out-of-order",
			`{"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 16, nil,
			ti("a", F32, 0, 8, 2), ti("b", F32, 8, 16, 2)),
		hdr("valid-space-padded", `{"test":`+i32+`}       `, 16, nil, ti("test", I32, 0, 16, 2, 2)),
		hdr("valid-leading-whitespace", " \n\t\r{ \"test\" : "+i32+" }\n", 16, nil, ti("test", I32, 0, 16, 2, 2)),
		hdr("valid-f4", `{"q":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]}}`, 3, nil, ti("q", F4, 0, 3, 2, 3)),
		hdr("valid-f6", `{"p":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[0,3]},"r":{"dtype":"F6_E3M2","shape":[2,8],"data_offsets":[3,15]}}`, 15, nil,
			ti("p", F6E2M3, 0, 3, 4), ti("r", F6E3M2, 3, 15, 2, 8)),
		hdr("valid-all-dtypes", "{"+strings.Join(allDTypes, ",")+"}", int(off), nil, allWant...),
		hdr("valid-escaped-name", `{"a\u00e9\"\\\ud83d\ude00/":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1, nil,
			ti("a\u00e9\"\\\U0001F600/", U8, 0, 1, 1)),
		hdr("valid-huge-zero-size", `{"z":{"dtype":"F64","shape":[0,9223372036854775807],"data_offsets":[0,0]}}`, 0, nil,
			ti("z", F64, 0, 0, 0, math.MaxInt64)),

		// The length prefix.
		{name: "invalid-too-small", file: []byte{0, 0, 0, 0, 0, 0, 0}, err: ErrHeaderTooSmall},
		{name: "invalid-empty-file", file: []byte{}, err: ErrHeaderTooSmall},
		{name: "invalid-too-large", file: binary.LittleEndian.AppendUint64(nil, MaxHeaderLen+1), err: ErrHeaderTooLarge},
		{name: "invalid-too-large-u64", file: binary.LittleEndian.AppendUint64(nil, math.MaxUint64), err: ErrHeaderTooLarge},
		{name: "invalid-header-len", file: append(binary.LittleEndian.AppendUint64(nil, 100), "{}"...), err: ErrInvalidHeaderLen},
		hdr("invalid-zero-len", ``, 0, ErrInvalidHeader),

		// JSON.
		hdr("invalid-utf8", "{\"\xff\":"+i32+"}", 16, ErrInvalidHeader),
		hdr("invalid-lone-surrogate", `{"\ud800":`+i32+`}`, 16, ErrInvalidHeader),
		hdr("invalid-lone-low-surrogate", `{"\udc00x":`+i32+`}`, 16, ErrInvalidHeader),
		hdr("invalid-bare-brace", `{`, 0, ErrInvalidHeader),
		hdr("invalid-array", `[]`, 0, ErrInvalidHeader),
		hdr("invalid-string", `"x"`, 0, ErrInvalidHeader),
		hdr("invalid-null", `null`, 0, ErrInvalidHeader),
		hdr("invalid-bom", "\ufeff{}", 0, ErrInvalidHeader),
		hdr("invalid-trailing-object", `{}{}`, 0, ErrInvalidHeader),
		hdr("invalid-trailing-junk", `{}x`, 0, ErrInvalidHeader),
		hdr("invalid-nul-padding", "{}\x00\x00", 0, ErrInvalidHeader),
		hdr("invalid-trailing-comma", `{"test":`+i32+`,}`, 16, ErrInvalidHeader),
		hdr("invalid-missing-colon", `{"test" `+i32+`}`, 16, ErrInvalidHeader),
		hdr("invalid-entry-not-object", `{"test":[0,16]}`, 16, ErrInvalidHeader),
		hdr("invalid-dtype-not-string", `{"t":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}`, 4, ErrInvalidHeader),
		hdr("invalid-shape-not-array", `{"t":{"dtype":"F32","shape":1,"data_offsets":[0,4]}}`, 4, ErrInvalidHeader),
		hdr("invalid-shape-string", `{"t":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}}`, 4, ErrInvalidHeader),
		hdr("invalid-shape-nested", `{"t":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}}`, 4, ErrInvalidHeader),
		hdr("invalid-negative-shape", `{"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4, ErrInvalidHeader),
		hdr("invalid-negative-zero", `{"t":{"dtype":"F32","shape":[-0],"data_offsets":[0,0]}}`, 0, ErrInvalidHeader),
		hdr("invalid-float-offset", `{"t":{"dtype":"F32","shape":[1],"data_offsets":[0.0,4]}}`, 4, ErrInvalidHeader),
		hdr("invalid-exponent-offset", `{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4e0]}}`, 4, ErrInvalidHeader),
		hdr("invalid-offsets-three", `{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4,4]}}`, 4, ErrInvalidHeader),
		hdr("invalid-offsets-one", `{"t":{"dtype":"F32","shape":[1],"data_offsets":[4]}}`, 4, ErrInvalidHeader),
		hdr("invalid-offsets-null", `{"t":{"dtype":"F32","shape":[1],"data_offsets":null}}`, 4, ErrInvalidHeader),

		// Keys and fields.
		hdr("invalid-duplicate-tensor", `{"a":`+i32+`,"a":`+i32+`}`, 16, ErrDuplicateKey),
		hdr("invalid-duplicate-escaped", `{"a":`+i32+`,"\u0061":`+i32+`}`, 16, ErrDuplicateKey),
		hdr("invalid-duplicate-metadata", `{"__metadata__":{},"__metadata__":{}}`, 0, ErrDuplicateKey),
		hdr("invalid-duplicate-field", `{"t":{"dtype":"I32","dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}`, 16, ErrDuplicateKey),
		hdr("invalid-duplicate-metadata-key", `{"__metadata__":{"k":"a","k":"b"}}`, 0, ErrDuplicateKey),
		hdr("invalid-wrong-case", `{"t":{"DTYPE":"I32","shape":[2,2],"data_offsets":[0,16]}}`, 16, ErrUnknownField),
		hdr("invalid-unknown-field", `{"t":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16],"extra":1}}`, 16, ErrUnknownField),
		hdr("invalid-missing-field", `{"t":{"dtype":"I32","shape":[2,2]}}`, 0, ErrUnknownField),
		hdr("invalid-missing-dtype", `{"t":{"shape":[2,2],"data_offsets":[0,16]}}`, 16, ErrUnknownField),
		hdr("invalid-unknown-dtype", `{"t":{"dtype":"F17","shape":[2,2],"data_offsets":[0,16]}}`, 16, ErrUnknownDType),
		hdr("invalid-lowercase-dtype", `{"t":{"dtype":"i32","shape":[2,2],"data_offsets":[0,16]}}`, 16, ErrUnknownDType),
		hdr("invalid-metadata-number", `{"__metadata__":{"k":1}}`, 0, ErrInvalidMetadata),
		hdr("invalid-metadata-object", `{"__metadata__":{"k":{"a":"b"}}}`, 0, ErrInvalidMetadata),
		hdr("invalid-metadata-null-value", `{"__metadata__":{"k":null}}`, 0, ErrInvalidMetadata),
		hdr("invalid-metadata-array", `{"__metadata__":["k"]}`, 0, ErrInvalidMetadata),
		hdr("invalid-metadata-null", `{"__metadata__":null}`, 0, ErrInvalidMetadata),

		// Sizes and offsets.
		hdr("invalid-hole", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, 12, ErrInvalidOffset),
		hdr("invalid-hole-at-start", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8, ErrInvalidOffset),
		hdr("invalid-overlap", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12, ErrInvalidOffset),
		hdr("invalid-json-attack", "{"+strings.Join(attack, ",")+"}", 16, ErrInvalidOffset),
		hdr("invalid-two-names-one-range", `{"a":`+i32+`,"b":`+i32+`}`, 16, ErrInvalidOffset),
		hdr("invalid-end-before-begin", `{"t":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}}`, 8, ErrInvalidOffset),
		hdr("invalid-size", `{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4, ErrTensorInvalidInfo),
		hdr("invalid-size-zero-range", `{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,0]}}`, 0, ErrTensorInvalidInfo),
		hdr("invalid-overflow-shape", `{"t":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}}`, 1, ErrOverflow),
		hdr("invalid-overflow-bits", `{"t":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,1]}}`, 1, ErrOverflow),
		hdr("invalid-overflow-u64", `{"t":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,1]}}`, 1, ErrOverflow),
		hdr("invalid-overflow-i64", `{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,9223372036854775808]}}`, 1, ErrOverflow),
		hdr("invalid-misaligned-f4", `{"t":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}`, 2, ErrMisaligned),
		hdr("invalid-misaligned-f6", `{"t":{"dtype":"F6_E3M2","shape":[3],"data_offsets":[0,2]}}`, 2, ErrMisaligned),
		hdr("invalid-trailing-bytes", `{"test":`+i32+`}`, 20, ErrIncompleteBuffer),
		hdr("invalid-missing-bytes", `{"test":`+i32+`}`, 12, ErrIncompleteBuffer),
		hdr("invalid-data-no-tensors", `{}`, 1, ErrIncompleteBuffer),
	}
	cases[1].meta = map[string]string{}
	return cases
}

// readCase runs ReadHeader on the bytes of c.
func readCase(c hdrCase) (*Header, error) {
	return ReadHeader(bytes.NewReader(c.file), int64(len(c.file)))
}

// checkCase checks the outcome of reading c.
func checkCase(t *testing.T, c hdrCase, h *Header, err error) {
	t.Helper()
	if c.err != nil {
		if !errors.Is(err, c.err) {
			t.Fatalf("err = %v, want %v", err, c.err)
		}
		if !errors.Is(err, ErrFormat) {
			t.Errorf("err = %v does not wrap ErrFormat", err)
		}
		if _, ok := errors.AsType[*Error](err); !ok {
			t.Errorf("err is %T, want *Error", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("err = %v, want none", err)
	}
	n := binary.LittleEndian.Uint64(c.file)
	if h.DataOffset != int64(8+n) {
		t.Errorf("DataOffset = %d, want %d", h.DataOffset, 8+n)
	}
	if !slices.EqualFunc(h.Tensors, c.want, equalInfo) {
		t.Errorf("Tensors =\n%v\nwant\n%v", h.Tensors, c.want)
	}
	if (h.Metadata == nil) != (c.meta == nil) || len(h.Metadata) != len(c.meta) {
		t.Errorf("Metadata = %#v, want %#v", h.Metadata, c.meta)
	}
}

// equalInfo compares tensor descriptions, telling a nil shape from [].
func equalInfo(a, b TensorInfo) bool {
	return a.Name == b.Name && a.DType == b.DType && a.Begin == b.Begin && a.End == b.End &&
		(a.Shape == nil) == (b.Shape == nil) && slices.Equal(a.Shape, b.Shape)
}

func TestReadHeader(t *testing.T) {
	for _, c := range hdrCases() {
		t.Run(c.name, func(t *testing.T) {
			h, err := readCase(c)
			checkCase(t, c, h, err)
		})
	}
}

// TestParseHeaderMetadata checks the metadata map, which may sit anywhere
// among the tensors.
func TestParseHeaderMetadata(t *testing.T) {
	header := `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"__metadata__":{"format":"pt","k\u00e9y":"v\n"},` +
		`"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`
	h, err := ParseHeader([]byte(header), 2)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"format": "pt", "k\u00e9y": "v\n"}
	if len(h.Metadata) != len(want) || h.Metadata["format"] != "pt" || h.Metadata["k\u00e9y"] != "v\n" {
		t.Errorf("Metadata = %q, want %q", h.Metadata, want)
	}
	if len(h.Tensors) != 2 || h.Tensors[0].Name != "a" || h.Tensors[1].Name != "b" {
		t.Errorf("Tensors = %v", h.Tensors)
	}
	h, err = ParseHeader([]byte(`{}`), 0)
	if err != nil || h.Metadata != nil || h.Tensors != nil {
		t.Errorf(`ParseHeader("{}") = %+v, %v; want no metadata, no tensors`, h, err)
	}
}

// TestParseHeaderNegativeDataLen checks that a caller's impossible data
// length is an error, not a panic.
func TestParseHeaderNegativeDataLen(t *testing.T) {
	if _, err := ParseHeader([]byte(`{}`), -1); !errors.Is(err, ErrInvalidHeaderLen) {
		t.Errorf("err = %v, want ErrInvalidHeaderLen", err)
	}
}

// TestParseHeaderOffsets checks that errors point at the offending byte.
func TestParseHeaderOffsets(t *testing.T) {
	tests := []struct {
		header string
		data   int64
		at     string // the error's offset is 8 + the index of this text
		tensor string
		err    error
	}{
		{`{"t":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}}`, 4, `"F17"`, "t", ErrUnknownDType},
		{`{"t":{"dtype":"F32", "Shape":[1],"data_offsets":[0,4]}}`, 4, `"Shape"`, "t", ErrUnknownField},
		{`{"t":{"dtype":"F32","shape":[1, -2],"data_offsets":[0,4]}}`, 4, `-2`, "t", ErrInvalidHeader},
		{`{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}, "t":{}}`, 4, `"t":{}`, "t", ErrDuplicateKey},
		{`{"__metadata__":{"a":"b","c":7}}`, 0, `7`, "__metadata__", ErrInvalidMetadata},
		{`{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},  "t":{"dtype":"F32","shape":[2],"data_offsets":[1,5]}}`, 5, `"t"`, "t", ErrTensorInvalidInfo},
		{`{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}   ]`, 4, `]`, "", ErrInvalidHeader},
		{`{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},}`, 4, `}`, "", ErrInvalidHeader},
		{"{\"t\xff\":{}}", 4, "\xff", "", ErrInvalidHeader},
	}
	for _, tt := range tests {
		_, err := ParseHeader([]byte(tt.header), tt.data)
		e, ok := errors.AsType[*Error](err)
		if !ok || !errors.Is(err, tt.err) {
			t.Errorf("ParseHeader(%q): err = %v, want *Error wrapping %v", tt.header, err, tt.err)
			continue
		}
		if want := int64(8 + strings.LastIndex(tt.header, tt.at)); e.Off != want || e.Tensor != tt.tensor {
			t.Errorf("ParseHeader(%q): Off, Tensor = %d, %q; want %d, %q (%v)", tt.header, e.Off, e.Tensor, want, tt.tensor, err)
		}
	}
}

// TestParseHeaderTilingOffsets checks the data offsets of tiling errors:
// DataOffset plus the position of the hole, overlap or end.
func TestParseHeaderTilingOffsets(t *testing.T) {
	f32 := func(name string, b, e int) string {
		return fmt.Sprintf(`"%s":{"dtype":"F32","shape":[%d],"data_offsets":[%d,%d]}`, name, (e-b)/4, b, e)
	}
	tests := []struct {
		header string
		data   int64
		pos    int64 // in the data section
		tensor string
		err    error
	}{
		{"{" + f32("a", 0, 4) + "," + f32("b", 8, 12) + "}", 12, 4, "b", ErrInvalidOffset},
		{"{" + f32("a", 0, 8) + "," + f32("b", 4, 12) + "}", 12, 4, "b", ErrInvalidOffset},
		{"{" + f32("a", 0, 8) + "}", 12, 8, "", ErrIncompleteBuffer},
		{"{" + f32("a", 0, 8) + "}", 4, 4, "", ErrIncompleteBuffer},
	}
	for _, tt := range tests {
		_, err := ParseHeader([]byte(tt.header), tt.data)
		e, ok := errors.AsType[*Error](err)
		if !ok || !errors.Is(err, tt.err) {
			t.Errorf("ParseHeader(%q): err = %v, want *Error wrapping %v", tt.header, err, tt.err)
			continue
		}
		if want := 8 + int64(len(tt.header)) + tt.pos; e.Off != want || e.Tensor != tt.tensor {
			t.Errorf("ParseHeader(%q): Off, Tensor = %d, %q; want %d, %q", tt.header, e.Off, e.Tensor, want, tt.tensor)
		}
	}
}

// TestErrorMessages checks that errors name the file, the tensor, the
// offset and what is wrong.
func TestErrorMessages(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		header string
		data   int
		want   []string
	}{
		{`{"w":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}}`, 4, []string{`tensor "w"`, "byte 22", "unknown dtype", `"F17"`}},
		{`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, 12,
			[]string{`tensor "b"`, "byte 120", "hole of 4 bytes"}},
		{`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 6, []string{"byte 66", "tensors end at 4", "6 bytes"}},
		{`{"m":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}}`, 4, []string{`tensor "m"`, "byte 9", "BF16 [3] is 6 bytes"}},
	}
	for i, tt := range tests {
		path := filepath.Join(dir, fmt.Sprintf("bad%d.safetensors", i))
		if err := os.WriteFile(path, hdrFile(tt.header, hdrData(tt.data)), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := OpenFile(path)
		if err == nil {
			t.Errorf("%s: no error", tt.header)
			continue
		}
		msg := err.Error()
		for _, w := range append(tt.want, path+": ") {
			if !strings.Contains(msg, w) {
				t.Errorf("error %q does not contain %q", msg, w)
			}
		}
	}
}

// TestHeaderGolden checks the committed testdata/header files against
// hdrCases (rewrite them with -update-header) and reads each one with
// OpenFile, which must give the case's outcome with the path in the error.
func TestHeaderGolden(t *testing.T) {
	dir := filepath.Join("testdata", "header")
	cases := hdrCases()
	if *updateHeaderGolden {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			if err := os.WriteFile(filepath.Join(dir, c.name+".safetensors"), c.file, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(cases) {
		t.Errorf("%s has %d files, hdrCases %d (run go test -run TestHeaderGolden -update-header)", dir, len(names), len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name+".safetensors")
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, c.file) {
				t.Fatalf("%s differs from its case (run go test -run TestHeaderGolden -update-header)", path)
			}
			f, err := OpenFile(path)
			if err == nil {
				defer f.Close()
				checkCase(t, c, &f.Header, nil)
				return
			}
			checkCase(t, c, nil, err)
			if e, _ := errors.AsType[*Error](err); e.File != path {
				t.Errorf("Error.File = %q, want %q", e.File, path)
			}
		})
	}
}

// TestParseHeaderRoundTrip is a property test: random valid headers,
// written with their entries in random order, random padding and with or
// without metadata, parse back to the tensors they were made from.
func TestParseHeaderRoundTrip(t *testing.T) {
	rng := newTestRand(1)
	dtypes := []DType{BOOL, U8, F8E4M3, F16, BF16, F32, I64, C64, F4, F6E2M3}
	for iter := range 500 {
		n := rng.IntN(12)
		var want []TensorInfo
		var off int64
		for i := range n {
			dt := dtypes[rng.IntN(len(dtypes))]
			shape := make([]int64, rng.IntN(4))
			numel := int64(1)
			for j := range shape {
				shape[j] = int64(rng.IntN(5))
				numel *= shape[j]
			}
			if dt.Bits() < 8 && numel*int64(dt.Bits())%8 != 0 {
				shape = append(shape, 8)
				numel *= 8
			}
			size := numel * int64(dt.Bits()) / 8
			want = append(want, TensorInfo{Name: fmt.Sprintf("layer.%d.w\u00e9ight", i), DType: dt, Shape: shape, Begin: off, End: off + size})
			off += size
		}
		entries := make([]string, 0, n+1)
		for _, t := range want {
			entries = append(entries, fmt.Sprintf(`%q:{"shape":%s,"data_offsets":[%d,%d],"dtype":%q}`,
				t.Name, jsonInts(t.Shape), t.Begin, t.End, t.DType))
		}
		if rng.IntN(2) == 0 {
			entries = append(entries, `"__metadata__":{"format":"pt"}`)
		}
		rng.Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
		header := "{" + strings.Join(entries, ",") + "}" + strings.Repeat(" ", rng.IntN(8))
		h, err := ParseHeader([]byte(header), off)
		if err != nil {
			t.Fatalf("iteration %d: %v\n%s", iter, err, header)
		}
		checkInvariants(t, []byte(header), off, h)
		// Offset order; zero-size tensors that share an offset by name.
		slices.SortFunc(want, func(a, b TensorInfo) int {
			return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End), strings.Compare(a.Name, b.Name))
		})
		if !slices.EqualFunc(h.Tensors, want, equalInfo) {
			t.Fatalf("iteration %d: got\n%v\nwant\n%v", iter, h.Tensors, want)
		}
	}
}

// jsonInts formats a shape as a JSON array.
func jsonInts(s []int64) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = fmt.Sprint(v)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func BenchmarkParseHeader(b *testing.B) {
	header, dataLen := manyTensors(2000)
	b.SetBytes(int64(len(header)))
	for b.Loop() {
		if _, err := ParseHeader(header, dataLen); err != nil {
			b.Fatal(err)
		}
	}
}

// manyTensors returns the header of a LLaMA-like file of n small tensors
// and the length of its data section.
func manyTensors(n int) ([]byte, int64) {
	var sb strings.Builder
	sb.WriteString(`{"__metadata__":{"format":"pt"}`)
	var off int64
	for i := range n {
		fmt.Fprintf(&sb, `,"model.layers.%d.self_attn.q_proj.weight":{"dtype":"BF16","shape":[4,8],"data_offsets":[%d,%d]}`, i, off, off+64)
		off += 64
	}
	sb.WriteString("}")
	return []byte(sb.String()), off
}
