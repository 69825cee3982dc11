package checkpoint

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// hdrWrite writes b to dir/name and returns the path.
func hdrWrite(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// fixturePath returns the path of a fixture under the repository's
// testdata, failing the test when it is absent.
func fixturePath(t testing.TB, elem ...string) string {
	t.Helper()
	p := filepath.Join(append([]string{"..", "testdata"}, elem...)...)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("fixture missing: %v", err)
	}
	return p
}

// openTestFile opens path and closes it at the end of the test.
func openTestFile(t testing.TB, path string) *File {
	t.Helper()
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestOpenFileFixture(t *testing.T) {
	path := fixturePath(t, "tiny-llama-fp16", "model.safetensors")
	f := openTestFile(t, path)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Path() != path || f.Size() != int64(len(raw)) || len(f.Tensors) != 39 {
		t.Fatalf("Path, Size, tensors = %q, %d, %d; want %q, %d, 39", f.Path(), f.Size(), len(f.Tensors), path, len(raw))
	}
	if f.Metadata["format"] != "pt" {
		t.Errorf("Metadata = %q", f.Metadata)
	}
	lm, ok := f.Tensor("lm_head.weight")
	if !ok || lm.DType != F16 || lm.Begin != 0 || lm.End != 16384 || fmt.Sprint(lm.Shape) != "[128 64]" {
		t.Errorf("Tensor(lm_head.weight) = %+v, %v", lm, ok)
	}
	if _, ok := f.Tensor("lm_head.bias"); ok {
		t.Error("Tensor(lm_head.bias) found")
	}
	for _, ti := range f.Tensors {
		d := f.Data(ti)
		want := raw[f.DataOffset+ti.Begin : f.DataOffset+ti.End]
		if !bytes.Equal(d, want) || cap(d) != len(d) {
			t.Errorf("%s: Data differs from the file's bytes or its capacity %d exceeds its length %d", ti.Name, cap(d), len(d))
		}
		if got, _ := f.Tensor(ti.Name); !equalInfo(got, ti) {
			t.Errorf("Tensor(%q) = %+v, want %+v", ti.Name, got, ti)
		}
	}
}

func TestOpenFileData(t *testing.T) {
	header := `{"b":{"dtype":"U8","shape":[3],"data_offsets":[5,8]},"z":{"dtype":"F32","shape":[0],"data_offsets":[5,5]},` +
		`"a":{"dtype":"U8","shape":[5],"data_offsets":[0,5]}}`
	path := hdrWrite(t, t.TempDir(), "m.safetensors", hdrFile(header, []byte("helloabc")))
	f := openTestFile(t, path)
	for _, tt := range []struct{ name, want string }{{"a", "hello"}, {"b", "abc"}, {"z", ""}} {
		ti, ok := f.Tensor(tt.name)
		if !ok {
			t.Fatalf("Tensor(%q) not found", tt.name)
		}
		if got := f.Data(ti); got == nil || string(got) != tt.want {
			t.Errorf("Data(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
	names := []string{}
	for _, ti := range f.Tensors {
		names = append(names, ti.Name)
	}
	if strings.Join(names, ",") != "a,z,b" {
		t.Errorf("tensor order %v, want a,z,b", names)
	}
	// Ranges that are not this file's give nil, never a panic.
	for _, ti := range []TensorInfo{{Begin: -1, End: 2}, {Begin: 4, End: 2}, {Begin: 0, End: 9}, {Begin: 9, End: 9}, {Begin: 1 << 62, End: 1<<62 + 1}} {
		if d := f.Data(ti); d != nil {
			t.Errorf("Data([%d, %d]) = %q, want nil", ti.Begin, ti.End, d)
		}
	}
}

// TestOpenFileEmptyData opens files whose data section is empty, which
// are not mapped.
func TestOpenFileEmptyData(t *testing.T) {
	dir := t.TempDir()
	for _, header := range []string{`{}`, `{"__metadata__":{"a":"b"}}  `, `{"z":{"dtype":"BF16","shape":[4,0],"data_offsets":[0,0]}}`} {
		f := openTestFile(t, hdrWrite(t, dir, "e.safetensors", hdrFile(header, nil)))
		if f.mmap != nil {
			t.Errorf("%s: mapped an empty data section", header)
		}
		for _, ti := range f.Tensors {
			if d := f.Data(ti); d == nil || len(d) != 0 {
				t.Errorf("%s: Data(%q) = %v, want empty", header, ti.Name, d)
			}
		}
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	}
}

func TestOpenFileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := hdrWrite(t, dir, "bad.safetensors", hdrFile(`{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, nil))
	tests := []struct {
		path string
		err  error
	}{
		{filepath.Join(dir, "missing.safetensors"), fs.ErrNotExist},
		{dir, ErrNotCheckpoint},
		{bad, ErrIncompleteBuffer},
		{hdrWrite(t, dir, "short.safetensors", []byte{1, 2}), ErrHeaderTooSmall},
	}
	for _, tt := range tests {
		f, err := OpenFile(tt.path)
		if f != nil || !errors.Is(err, tt.err) {
			t.Errorf("OpenFile(%q) = %v, %v; want nil, %v", tt.path, f, err, tt.err)
			continue
		}
		if e, ok := errors.AsType[*Error](err); !ok || e.File != tt.path {
			t.Errorf("OpenFile(%q): error %v (%T) does not name the file", tt.path, err, err)
		}
		if strings.Count(err.Error(), tt.path) != 1 {
			t.Errorf("error %q names the path other than once", err)
		}
	}
}

func TestFileClose(t *testing.T) {
	path := hdrWrite(t, t.TempDir(), "m.safetensors", hdrFile(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`, []byte("hi")))
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := f.Tensor("a")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if d := f.Data(a); d != nil {
		t.Errorf("Data after Close = %q, want nil", d)
	}
	if _, err := f.ReadAt(make([]byte, 1), 0); !errors.Is(err, fs.ErrClosed) {
		t.Errorf("ReadAt after Close: err = %v, want fs.ErrClosed", err)
	}
	f.Release([]byte("x")) // must not panic
}

// TestFileReadAt reads through the descriptor, also after the file was
// truncated under the mapping, where Data would fault.
func TestFileReadAt(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<10)
	header := fmt.Sprintf(`{"a":{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}`, len(data), len(data))
	path := hdrWrite(t, t.TempDir(), "m.safetensors", hdrFile(header, data))
	f := openTestFile(t, path)
	var _ io.ReaderAt = f
	p := make([]byte, 16)
	if _, err := f.ReadAt(p, f.DataOffset+16); err != nil || string(p) != "0123456789abcdef" {
		t.Fatalf("ReadAt = %q, %v", p, err)
	}
	if err := os.Truncate(path, f.DataOffset); err != nil {
		t.Fatal(err)
	}
	if n, err := f.ReadAt(p, f.DataOffset+16); n != 0 || err != io.EOF {
		t.Errorf("ReadAt of a truncated file = %d, %v; want 0, EOF", n, err)
	}
	// The documented hazard: the mapping faults past the new end.
	a, _ := f.Tensor("a")
	d := f.Data(a)
	last, faulted := func() (last byte, faulted bool) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() { faulted = recover() != nil }()
		return d[len(d)-1], false
	}()
	if !faulted {
		t.Errorf("reading a mapping past the truncated end gave %q, did not fault", last)
	}
}

// smapsRSS returns the resident bytes of the mapping that starts at b[0],
// from /proc/self/smaps.
func smapsRSS(t *testing.T, b []byte) int64 {
	t.Helper()
	fh, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer fh.Close()
	start := strconv.FormatUint(uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))), 16)
	in := false
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			lo, _, _ := strings.Cut(f[0], "-")
			in = strings.TrimLeft(lo, "0") == start
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			kb, err := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("mapping at %s not in /proc/self/smaps", start)
	return 0
}

// TestFileRelease checks that Release drops exactly the pages wholly
// inside the slice, and that the data reads back unchanged.
func TestFileRelease(t *testing.T) {
	page := os.Getpagesize()
	n := 8 * page
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i * 13)
	}
	// A header of 8 + len(header) = page bytes puts the data on a page.
	header := fmt.Sprintf(`{"a":{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}`, n, n)
	header += strings.Repeat(" ", page-8-len(header))
	f := openTestFile(t, hdrWrite(t, t.TempDir(), "m.safetensors", hdrFile(header, data)))
	a, _ := f.Tensor("a")
	d := f.Data(a)
	touch := func() {
		var sum byte
		for i := 0; i < len(f.mmap); i += page {
			sum += f.mmap[i]
		}
		runtime.KeepAlive(sum) // keeps the loads
	}
	touch()
	full := smapsRSS(t, f.mmap)
	if full != int64(9*page) {
		t.Skipf("mapping RSS %d after touching 9 pages; cannot measure", full)
	}
	tests := []struct {
		lo, hi  int // slice of d
		dropped int // pages
	}{
		{0, n, 8},
		{1, n, 7},
		{100, 3*page + 50, 2},
		{page, 2 * page, 1},
		{10, page + 10, 0},
		{5, 5, 0},
	}
	for _, tt := range tests {
		touch()
		f.Release(d[tt.lo:tt.hi])
		if got := smapsRSS(t, f.mmap); full-got != int64(tt.dropped*page) {
			t.Errorf("Release(d[%d:%d]) dropped %d bytes, want %d pages", tt.lo, tt.hi, full-got, tt.dropped)
		}
		if !bytes.Equal(d, data) {
			t.Fatalf("data changed after Release(d[%d:%d])", tt.lo, tt.hi)
		}
	}
	// Memory that is not the mapping's is left alone.
	touch()
	other := make([]byte, 4*page)
	f.Release(other)
	f.Release(unsafe.Slice(unsafe.SliceData(f.mmap), len(f.mmap)+page)[len(f.mmap)-page:]) // straddles the end
	if got := smapsRSS(t, f.mmap); got != full {
		t.Errorf("Release of foreign memory changed the mapping's RSS from %d to %d", full, got)
	}
}

func BenchmarkOpen(b *testing.B) {
	header, dataLen := manyTensors(2000)
	path := hdrWrite(b, b.TempDir(), "many.safetensors", hdrFile(string(header), make([]byte, dataLen)))
	b.SetBytes(int64(len(header)))
	for b.Loop() {
		f, err := OpenFile(path)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
