package checkpoint

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// byteSource is a tensor source that writes data in pieces of at most
// chunk bytes (all at once when chunk <= 0).
type byteSource struct {
	data  []byte
	chunk int
}

// WriteTo writes s.data to w.
func (s byteSource) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for rest := s.data; len(rest) > 0; {
		k := len(rest)
		if s.chunk > 0 {
			k = min(k, s.chunk)
		}
		m, err := w.Write(rest[:k])
		n += int64(m)
		if err != nil {
			return n, err
		}
		rest = rest[k:]
	}
	return n, nil
}

// goldenSpec is one tensor of a golden file made by testdata/gen_golden.py.
type goldenSpec struct {
	name  string
	dt    DType
	shape []int64
}

// goldenSpecs builds the specs of gen_golden.py: byte j of the i-th tensor
// is (i*31 + j*7 + 1) & 0xff, and & 1 for BOOL.
func goldenSpecs(t *testing.T, gs []goldenSpec) []TensorSpec {
	t.Helper()
	specs := make([]TensorSpec, len(gs))
	for i, g := range gs {
		n, err := TensorSize(g.dt, g.shape)
		if err != nil {
			t.Fatal(err)
		}
		mask := byte(0xff)
		if g.dt == BOOL {
			mask = 1
		}
		data := make([]byte, n)
		for j := range data {
			data[j] = byte(i*31+j*7+1) & mask
		}
		specs[i] = TensorSpec{Name: g.name, DType: g.dt, Shape: g.shape, Src: byteSource{data: data, chunk: 3}}
	}
	return specs
}

// TestWriteFileGolden checks the writer byte for byte against files the
// reference implementation wrote (testdata/gen_golden.py): tensor order,
// header JSON, escaping and padding.
func TestWriteFileGolden(t *testing.T) {
	tests := []struct {
		golden   string
		specs    []goldenSpec
		metadata map[string]string
	}{
		{
			golden: "writer_golden.safetensors",
			specs: []goldenSpec{
				{"b.weight", BF16, []int64{2, 3}},
				{"a.weight", F16, []int64{3}},
				{"a.bias", BF16, []int64{3}},
				{"scale", F32, []int64{}},
				{"ids", I64, []int64{2}},
				{"f64", F64, []int64{1}},
				{"mask", BOOL, []int64{5}},
				{"bytes", U8, []int64{3}},
				{"i8", I8, []int64{1}},
				{"fp8", F8E4M3, []int64{4}},
				{"fp8b", F8E5M2, []int64{2}},
				{"count", I32, []int64{1}},
				{"u32", U32, []int64{1}},
				{"i16", I16, []int64{3}},
				{"empty", BF16, []int64{0, 4}},
				{"q\"uote\\back\n\t\x01<&>é€\u2028", F32, []int64{1}},
				{"u16", U16, []int64{2}},
				{"u64", U64, []int64{1}},
				{"c64", C64, []int64{1}},
			},
			metadata: map[string]string{"format": "pt"},
		},
		{
			golden:   "writer_golden_meta.safetensors",
			specs:    []goldenSpec{{"t", I32, []int64{2, 2}}},
			metadata: map[string]string{"kéy": "v<&>\"\\\n\t\x01\x7f\u2028é/"},
		},
		{golden: "writer_golden_empty.safetensors"},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join("testdata", tt.golden))
			if err != nil {
				t.Fatal(err)
			}
			specs := goldenSpecs(t, tt.specs)
			for _, workers := range []int{1, 4} {
				path := filepath.Join(t.TempDir(), "out.safetensors")
				if err := WriteFile(context.Background(), path, specs, tt.metadata, &WriteOptions{Workers: workers}); err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("workers=%d: file differs from the reference's\n got %q\nwant %q", workers, got, want)
				}
				size, err := FileSize(specs, tt.metadata)
				if err != nil || size != int64(len(want)) {
					t.Errorf("FileSize = %d, %v; want %d", size, err, len(want))
				}
			}
		})
	}
}

// TestLayoutOrder checks the reference order (dtype rank descending, then
// name), contiguous offsets and the 8-byte aligned data section.
func TestLayoutOrder(t *testing.T) {
	tests := []struct {
		name  string
		specs []TensorSpec
		want  []string
	}{
		{
			name: "sizes",
			specs: []TensorSpec{
				{Name: "b", DType: U8, Shape: []int64{1}},
				{Name: "a", DType: F32, Shape: []int64{1}},
				{Name: "c", DType: I64, Shape: []int64{1}},
				{Name: "d", DType: BF16, Shape: []int64{1}},
			},
			want: []string{"c", "a", "d", "b"},
		},
		{
			name: "same size, enum rank",
			specs: []TensorSpec{
				{Name: "a", DType: F16, Shape: []int64{2}},
				{Name: "b", DType: BF16, Shape: []int64{2}},
				{Name: "c", DType: I16, Shape: []int64{2}},
				{Name: "d", DType: U16, Shape: []int64{2}},
				{Name: "e", DType: BF16, Shape: []int64{2}},
			},
			want: []string{"b", "e", "a", "d", "c"},
		},
		{
			name: "names bytewise",
			specs: []TensorSpec{
				{Name: "layers.10", DType: F32, Shape: []int64{1}},
				{Name: "layers.2", DType: F32, Shape: []int64{1}},
				{Name: "Layers.3", DType: F32, Shape: []int64{1}},
				{Name: "é", DType: F32, Shape: []int64{1}},
			},
			want: []string{"Layers.3", "layers.10", "layers.2", "é"},
		},
		{
			name: "sub-byte and bool",
			specs: []TensorSpec{
				{Name: "bool", DType: BOOL, Shape: []int64{3}},
				{Name: "f4", DType: F4, Shape: []int64{2}},
				{Name: "f6", DType: F6E2M3, Shape: []int64{4}},
				{Name: "u8", DType: U8, Shape: []int64{1}},
				{Name: "e8m0", DType: F8E8M0, Shape: []int64{1}},
			},
			want: []string{"e8m0", "u8", "f6", "f4", "bool"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := Layout(tt.specs, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			var off int64
			for _, ti := range h.Tensors {
				got = append(got, ti.Name)
				if ti.Begin != off {
					t.Errorf("%s begins at %d, want %d", ti.Name, ti.Begin, off)
				}
				off = ti.End
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("order %q, want %q", got, tt.want)
			}
			if h.DataOffset%8 != 0 {
				t.Errorf("data section at %d, not a multiple of 8", h.DataOffset)
			}
		})
	}
}

// TestAppendJSONString checks the serde_json escaping, and that the
// result decodes back to the input.
func TestAppendJSONString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `""`},
		{"plain.name", `"plain.name"`},
		{`a"b\c`, `"a\"b\\c"`},
		{"\b\f\n\r\t", `"\b\f\n\r\t"`},
		{"\x00\x01\x1f", `"\u0000\u0001\u001f"`},
		{"\x7f<&>/é\u2028\U0001F600", "\"\x7f<&>/é\u2028\U0001F600\""},
	}
	for _, tt := range tests {
		got := string(appendJSONString(nil, tt.in))
		if got != tt.want {
			t.Errorf("appendJSONString(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		rs := make([]rune, r.IntN(12))
		for i := range rs {
			switch r.IntN(3) {
			case 0:
				rs[i] = rune(r.IntN(0x80))
			case 1:
				rs[i] = rune(r.IntN(0x800))
			default:
				rs[i] = rune(r.IntN(0xd800))
			}
		}
		in := string(rs)
		var back string
		if err := json.Unmarshal(appendJSONString(nil, in), &back); err != nil || back != in {
			t.Fatalf("%q: decoded %q, %v", in, back, err)
		}
	}
}

// TestWriteFileInvalid checks that invalid specs fail with their sentinel
// before anything is created.
func TestWriteFileInvalid(t *testing.T) {
	one := byteSource{data: []byte{1, 2}}
	tests := []struct {
		name     string
		specs    []TensorSpec
		metadata map[string]string
		want     error
	}{
		{"empty name", []TensorSpec{{Name: "", DType: U8, Shape: []int64{2}, Src: one}}, nil, ErrInvalidTensorName},
		{"metadata name", []TensorSpec{{Name: "__metadata__", DType: U8, Shape: []int64{2}, Src: one}}, nil, ErrInvalidTensorName},
		{"duplicate", []TensorSpec{{Name: "a", DType: U8, Shape: []int64{2}, Src: one}, {Name: "a", DType: U8, Shape: []int64{2}, Src: one}}, nil, ErrInvalidTensorName},
		{"bad utf-8 name", []TensorSpec{{Name: "a\xff", DType: U8, Shape: []int64{2}, Src: one}}, nil, ErrInvalidTensorName},
		{"unknown dtype", []TensorSpec{{Name: "a", DType: "F12", Shape: []int64{2}, Src: one}}, nil, ErrUnknownDType},
		{"empty dtype", []TensorSpec{{Name: "a", Shape: []int64{2}, Src: one}}, nil, ErrUnknownDType},
		{"negative dim", []TensorSpec{{Name: "a", DType: U8, Shape: []int64{2, -1}, Src: one}}, nil, ErrTensorInvalidInfo},
		{"elements overflow", []TensorSpec{{Name: "a", DType: U8, Shape: []int64{math.MaxInt64, math.MaxInt64}, Src: one}}, nil, ErrOverflow},
		{"bytes overflow", []TensorSpec{{Name: "a", DType: F64, Shape: []int64{math.MaxInt64 / 4}, Src: one}}, nil, ErrOverflow},
		{"sum overflow", []TensorSpec{{Name: "a", DType: U8, Shape: []int64{math.MaxInt64 - 4}, Src: one}, {Name: "b", DType: U8, Shape: []int64{math.MaxInt64 - 4}, Src: one}}, nil, ErrOverflow},
		{"file overflow", []TensorSpec{{Name: "a", DType: U8, Shape: []int64{math.MaxInt64 - 4}, Src: one}}, nil, ErrOverflow},
		{"misaligned F4", []TensorSpec{{Name: "a", DType: F4, Shape: []int64{3}, Src: one}}, nil, ErrMisaligned},
		{"misaligned F6", []TensorSpec{{Name: "a", DType: F6E3M2, Shape: []int64{2}, Src: one}}, nil, ErrMisaligned},
		{"bad utf-8 metadata", nil, map[string]string{"k": "\xc3"}, ErrInvalidMetadata},
		{"header too large", []TensorSpec{{Name: strings.Repeat("x", MaxHeaderLen), DType: U8, Shape: []int64{0}}}, nil, ErrHeaderTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out.safetensors")
			err := WriteFile(context.Background(), path, tt.specs, tt.metadata, nil)
			if !errors.Is(err, tt.want) {
				t.Fatalf("WriteFile: %v, want %v", err, tt.want)
			}
			var e *Error
			if !errors.As(err, &e) || e.File != path {
				t.Errorf("error %#v does not name the file", err)
			}
			if _, err := Layout(tt.specs, tt.metadata); !errors.Is(err, tt.want) {
				t.Errorf("Layout: %v, want %v", err, tt.want)
			}
			checkDirEntries(t, dir)
		})
	}
}

// checkDirEntries fails unless dir holds exactly the names want.
func checkDirEntries(t *testing.T, dir string, want ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s holds %q, want %q", dir, got, want)
	}
}

// TestWriteFileSourceSize checks that a source writing the wrong number of
// bytes fails the write, whatever the source does with the error.
func TestWriteFileSourceSize(t *testing.T) {
	tests := []struct {
		name string
		src  io.WriterTo
	}{
		{"short", byteSource{data: make([]byte, 7)}},
		{"long", byteSource{data: make([]byte, 9)}},
		{"long in pieces", byteSource{data: make([]byte, 12), chunk: 5}},
		{"nil", nil},
		{"error swallowed", swallowSource{n: 20}},
		{"file range of another size", FileRange{File: &File{f: os.Stdin, size: 1 << 20, Header: Header{DataOffset: 8}}, Tensor: TensorInfo{Name: "x", Begin: 0, End: 4}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out.safetensors")
			specs := []TensorSpec{
				{Name: "ok", DType: U8, Shape: []int64{4}, Src: byteSource{data: []byte{1, 2, 3, 4}}},
				{Name: "bad", DType: F32, Shape: []int64{2}, Src: tt.src},
			}
			err := WriteFile(context.Background(), path, specs, nil, &WriteOptions{Workers: 1})
			if !errors.Is(err, ErrSourceSize) {
				t.Fatalf("WriteFile: %v, want ErrSourceSize", err)
			}
			var e *Error
			if !errors.As(err, &e) || e.Tensor != "bad" || e.File != path {
				t.Errorf("error %v does not name file and tensor", err)
			}
			checkDirEntries(t, dir)
		})
	}
}

// swallowSource writes n zero bytes one at a time and ignores errors.
type swallowSource struct{ n int }

// WriteTo writes to w and reports success whatever happens.
func (s swallowSource) WriteTo(w io.Writer) (int64, error) {
	for range s.n {
		w.Write([]byte{0})
	}
	return int64(s.n), nil
}

// randomSpecs returns n random tensors with random data, shapes of rank
// 0..3 and dtypes of every size, names unique.
func randomSpecs(r *rand.Rand, n int) []TensorSpec {
	dtypes := []DType{BOOL, U8, I8, F8E4M3, F8E5M2, F8E8M0, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64, C64, F4}
	specs := make([]TensorSpec, n)
	for i := range specs {
		dt := dtypes[r.IntN(len(dtypes))]
		shape := make([]int64, r.IntN(4))
		for k := range shape {
			shape[k] = int64(r.IntN(9))
		}
		if dt == F4 {
			shape = append(shape, 2*int64(r.IntN(5)))
		}
		size, _ := TensorSize(dt, shape)
		data := make([]byte, size)
		for k := range data {
			data[k] = byte(r.Uint32())
		}
		name := string(rune('a'+r.IntN(26))) + "." + strings.Repeat("x", r.IntN(3)) + string(rune('0'+i%10)) + "." + string(rune('A'+i/10%26)) + string(rune('A'+i/260))
		specs[i] = TensorSpec{Name: name, DType: dt, Shape: shape, Src: byteSource{data: data, chunk: r.IntN(16)}}
	}
	return specs
}

// TestWriteFileProperty writes random specs and checks, for each, that
// every worker count gives the same bytes, that the file parses back to
// Layout's header, and that every tensor's bytes are its source's.
func TestWriteFileProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	rounds := 60
	if testing.Short() {
		rounds = 10
	}
	for round := range rounds {
		specs := randomSpecs(r, r.IntN(30))
		var metadata map[string]string
		if r.IntN(2) == 0 {
			metadata = map[string]string{"format": "pt", "round": strings.Repeat("é", round)}
		}
		want, err := Layout(specs, metadata)
		if err != nil {
			t.Fatal(err)
		}
		var first []byte
		for _, workers := range []int{0, 1, 2, 3, 16} {
			path := filepath.Join(t.TempDir(), "p.safetensors")
			var progress atomic.Int64
			opt := &WriteOptions{Workers: workers, Progress: func(n int64) { progress.Add(n) }}
			if err := WriteFile(context.Background(), path, specs, metadata, opt); err != nil {
				t.Fatalf("round %d, workers %d: %v", round, workers, err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = got
				checkWritten(t, got, want, specs, metadata)
				checkReadBack(t, path, specs, metadata)
				if n := progress.Load(); n != int64(len(got))-want.DataOffset {
					t.Errorf("round %d: progress reported %d bytes, want %d", round, n, int64(len(got))-want.DataOffset)
				}
			} else if !bytes.Equal(got, first) {
				t.Fatalf("round %d: workers %d wrote different bytes", round, workers)
			}
		}
	}
}

// checkWritten checks a written file against the header Layout promised
// and the sources' bytes.
func checkWritten(t *testing.T, file []byte, want *Header, specs []TensorSpec, metadata map[string]string) {
	t.Helper()
	n := binary.LittleEndian.Uint64(file)
	if n%8 != 0 || int64(8+n) != want.DataOffset {
		t.Fatalf("header length %d, data offset %d", n, want.DataOffset)
	}
	if pad := bytes.TrimRight(file[8:8+n], " "); !bytes.HasSuffix(pad, []byte("}")) || len(file[8:8+n])-len(pad) >= 8 {
		t.Errorf("header padding is not 0..7 spaces after the JSON: %q", file[8:8+n])
	}
	h, err := ParseHeader(file[8:8+n], int64(len(file))-want.DataOffset)
	if err != nil {
		t.Fatalf("written header does not parse: %v\n%s", err, file[8:8+n])
	}
	if len(h.Tensors) != len(want.Tensors) {
		t.Fatalf("parsed %d tensors, want %d", len(h.Tensors), len(want.Tensors))
	}
	// The reader orders empty tensors at one offset by name, the writer by
	// dtype rank, so compare by name.
	parsed := make(map[string]TensorInfo, len(h.Tensors))
	for _, ti := range h.Tensors {
		parsed[ti.Name] = ti
	}
	for _, w := range want.Tensors {
		ti := parsed[w.Name]
		if ti.Name != w.Name || ti.DType != w.DType || !slices.Equal(ti.Shape, w.Shape) || ti.Begin != w.Begin || ti.End != w.End {
			t.Errorf("tensor %q parsed as %+v, Layout said %+v", w.Name, ti, w)
		}
	}
	if len(metadata) > 0 && !maps.Equal(h.Metadata, metadata) {
		t.Errorf("metadata %v, want %v", h.Metadata, metadata)
	}
	byName := make(map[string][]byte)
	for _, s := range specs {
		byName[s.Name] = s.Src.(byteSource).data
	}
	for _, ti := range want.Tensors {
		got := file[want.DataOffset+ti.Begin : want.DataOffset+ti.End]
		if !bytes.Equal(got, byName[ti.Name]) {
			t.Errorf("tensor %q: data differs", ti.Name)
		}
	}
}

// checkReadBack opens the file at path with OpenFile and checks that it
// holds specs, bit for bit, and metadata.
func checkReadBack(t *testing.T, path string, specs []TensorSpec, metadata map[string]string) {
	t.Helper()
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(f.Tensors) != len(specs) {
		t.Errorf("%d tensors read back, want %d", len(f.Tensors), len(specs))
	}
	for _, s := range specs {
		ti, ok := f.Tensor(s.Name)
		if !ok || ti.DType != s.DType || !slices.Equal(ti.Shape, s.Shape) || !bytes.Equal(f.Data(ti), s.Src.(byteSource).data) {
			t.Errorf("tensor %q read back as %+v (found %v), data equal %v", s.Name, ti, ok, bytes.Equal(f.Data(ti), s.Src.(byteSource).data))
		}
	}
	if len(metadata) > 0 && !maps.Equal(f.Metadata, metadata) {
		t.Errorf("metadata read back as %v, want %v", f.Metadata, metadata)
	}
}

// TestCopyPaths checks that copy_file_range, the pread/pwrite fallback
// and FileRange.WriteTo copy the same bytes, at odd offsets and sizes.
func TestCopyPaths(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 3<<20+17)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	srcPath := filepath.Join(dir, "src")
	if err := os.WriteFile(srcPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(srcPath)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	type copier func(ctx context.Context, dst *os.File, dstOff int64, src *os.File, srcOff int64, n int64, progress func(int64)) (int64, error)
	for _, c := range []struct {
		name string
		copy copier
	}{{"copy_file_range", copyFileRange}, {"pread", copyPread}} {
		for _, tt := range []struct{ srcOff, dstOff, n int64 }{{0, 0, int64(len(data))}, {5, 3, 1<<20 + 1}, {17, 0, 0}, {int64(len(data)) - 9, 100, 9}} {
			dst, err := os.Create(filepath.Join(dir, "dst"))
			if err != nil {
				t.Fatal(err)
			}
			var reported int64
			n, err := c.copy(context.Background(), dst, tt.dstOff, src, tt.srcOff, tt.n, func(k int64) { reported += k })
			dst.Close()
			if err != nil || n != tt.n || reported != tt.n {
				t.Fatalf("%s %+v: copied %d (reported %d), %v", c.name, tt, n, reported, err)
			}
			got, _ := os.ReadFile(filepath.Join(dir, "dst"))
			if int64(len(got)) != tt.dstOff+tt.n || !bytes.Equal(got[tt.dstOff:], data[tt.srcOff:tt.srcOff+tt.n]) {
				t.Errorf("%s %+v: wrong bytes", c.name, tt)
			}
		}
		// Past the end of the source: an error, never a short success.
		dst, _ := os.Create(filepath.Join(dir, "dst"))
		_, err := c.copy(context.Background(), dst, 0, src, int64(len(data))-4, 8, nil)
		dst.Close()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s past EOF: %v, want io.ErrUnexpectedEOF", c.name, err)
		}
		// A cancelled context stops the copy before it starts.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		dst, _ = os.Create(filepath.Join(dir, "dst"))
		_, err = c.copy(ctx, dst, 0, src, 0, 8, nil)
		dst.Close()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s cancelled: %v, want context.Canceled", c.name, err)
		}
	}

	f := &File{f: src, path: srcPath, size: int64(len(data)), Header: Header{DataOffset: 8}}
	var buf bytes.Buffer
	n, err := FileRange{File: f, Tensor: TensorInfo{Name: "t", Begin: 10, End: 2<<20 + 10}}.WriteTo(&buf)
	if err != nil || n != 2<<20 || !bytes.Equal(buf.Bytes(), data[18:18+2<<20]) {
		t.Errorf("FileRange.WriteTo: %d, %v, equal %v", n, err, bytes.Equal(buf.Bytes(), data[18:18+2<<20]))
	}
	for _, bad := range []FileRange{
		{Tensor: TensorInfo{Name: "no file", End: 1}},
		{File: &File{path: "closed", size: 100}, Tensor: TensorInfo{Name: "closed", End: 1}},
		{File: f, Tensor: TensorInfo{Name: "past end", Begin: 0, End: int64(len(data))}},
		{File: f, Tensor: TensorInfo{Name: "negative", Begin: -1, End: 2}},
	} {
		if _, err := bad.WriteTo(io.Discard); err == nil {
			t.Errorf("FileRange %q: no error", bad.Tensor.Name)
		}
	}
}

// TestReshard checks the greedy split, its order and the names.
func TestReshard(t *testing.T) {
	spec := func(name string, n int64) TensorSpec { return TensorSpec{Name: name, DType: U8, Shape: []int64{n}} }
	in := []TensorSpec{spec("a", 4), spec("b", 4), spec("c", 10), spec("d", 1), spec("e", 7), spec("f", 0)}
	tests := []struct {
		max  int64
		want [][]string
	}{
		{0, [][]string{{"a", "b", "c", "d", "e", "f"}}},
		{-1, [][]string{{"a", "b", "c", "d", "e", "f"}}},
		{100, [][]string{{"a", "b", "c", "d", "e", "f"}}},
		{8, [][]string{{"a", "b"}, {"c"}, {"d", "e", "f"}}},
		{5, [][]string{{"a"}, {"b"}, {"c"}, {"d"}, {"e"}, {"f"}}}, // 7+0 > 5: even an empty tensor starts a shard, as in transformers
		{11, [][]string{{"a", "b"}, {"c", "d"}, {"e", "f"}}},
	}
	for _, tt := range tests {
		shards := Reshard(in, tt.max)
		var got [][]string
		for i, s := range shards {
			var names []string
			for _, t := range s.Tensors {
				names = append(names, t.Name)
			}
			got = append(got, names)
			if want := ShardName(i, len(tt.want)); s.Name != want {
				t.Errorf("max %d: shard %d named %q, want %q", tt.max, i, s.Name, want)
			}
		}
		if !slices.EqualFunc(got, tt.want, slices.Equal) {
			t.Errorf("max %d: %q, want %q", tt.max, got, tt.want)
		}
	}
	if s := Reshard(nil, 10); len(s) != 1 || s[0].Name != "model.safetensors" || len(s[0].Tensors) != 0 {
		t.Errorf("Reshard(nil) = %+v, want one empty model.safetensors", s)
	}
}

// TestShardNames checks the Hugging Face shard names.
func TestShardNames(t *testing.T) {
	tests := []struct {
		n    int
		want []string
	}{
		{0, []string{}},
		{1, []string{"model.safetensors"}},
		{3, []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}},
	}
	for _, tt := range tests {
		if got := ShardNames(tt.n); !slices.Equal(got, tt.want) {
			t.Errorf("ShardNames(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
	if got := ShardName(99999, 100000); got != "model-100000-of-100000.safetensors" {
		t.Errorf("ShardName(99999, 100000) = %q", got)
	}
}
