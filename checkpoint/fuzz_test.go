package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io/fs"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// newTestRand returns a deterministic random source.
func newTestRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// checkInvariants checks, independently of the parser, what a header that
// ParseHeader accepted must satisfy: the tensors tile the data section in
// offset order, each spans exactly numel×bits/8 bytes (computed with
// big integers), and encoding/json reads the same entries from the text.
func checkInvariants(t *testing.T, header []byte, dataLen int64, h *Header) {
	t.Helper()
	if h.DataOffset != 8+int64(len(header)) {
		t.Fatalf("DataOffset = %d, want %d", h.DataOffset, 8+len(header))
	}
	var pos int64
	names := make(map[string]bool)
	for i, ti := range h.Tensors {
		if ti.Begin != pos {
			t.Fatalf("tensor %d %q begins at %d, the previous one ends at %d", i, ti.Name, ti.Begin, pos)
		}
		pos = ti.End
		if names[ti.Name] || ti.Name == metadataKey {
			t.Fatalf("tensor name %q repeated or reserved", ti.Name)
		}
		names[ti.Name] = true
		if !ti.DType.Valid() || ti.Shape == nil {
			t.Fatalf("tensor %q: dtype %q, shape %v", ti.Name, ti.DType, ti.Shape)
		}
		bitsN := big.NewInt(int64(ti.DType.Bits()))
		for _, d := range ti.Shape {
			if d < 0 {
				t.Fatalf("tensor %q: shape %v", ti.Name, ti.Shape)
			}
			bitsN.Mul(bitsN, big.NewInt(d))
		}
		if want := new(big.Int).Mul(big.NewInt(ti.Size()), big.NewInt(8)); bitsN.Cmp(want) != 0 {
			t.Fatalf("tensor %q: %s %v is %v bits, the range [%d, %d] holds %v", ti.Name, ti.DType, ti.Shape, bitsN, ti.Begin, ti.End, want)
		}
		if i > 0 {
			p := h.Tensors[i-1]
			if p.Begin == ti.Begin && p.End == ti.End && p.Name > ti.Name {
				t.Fatalf("tensors %q and %q out of name order", p.Name, ti.Name)
			}
		}
	}
	if pos != dataLen {
		t.Fatalf("tensors end at %d, data section is %d bytes", pos, dataLen)
	}

	// The oracle: encoding/json must agree on the text's contents.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(header, &raw); err != nil {
		t.Fatalf("ParseHeader accepted what encoding/json rejects: %v", err)
	}
	nKeys := len(h.Tensors)
	if h.Metadata != nil {
		nKeys++
		var m map[string]string
		if err := json.Unmarshal(raw[metadataKey], &m); err != nil || !reflect.DeepEqual(m, h.Metadata) {
			t.Fatalf("metadata %q, encoding/json reads %q (%v)", h.Metadata, m, err)
		}
	}
	if len(raw) != nKeys {
		t.Fatalf("%d top-level keys, encoding/json reads %d", nKeys, len(raw))
	}
	for _, ti := range h.Tensors {
		var e struct {
			DType   string   `json:"dtype"`
			Shape   []int64  `json:"shape"`
			Offsets [2]int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw[ti.Name], &e); err != nil {
			t.Fatalf("tensor %q: encoding/json: %v", ti.Name, err)
		}
		if DType(e.DType) != ti.DType || !slices.Equal(e.Shape, ti.Shape) || e.Offsets != [2]int64{ti.Begin, ti.End} {
			t.Fatalf("tensor %q: parsed %+v, encoding/json reads %+v", ti.Name, ti, e)
		}
	}
}

// headerSeed is a fuzzing seed: a whole file when it is small, always its
// header and data length when its length prefix is right.
type headerSeed struct {
	file    []byte // nil for a large file
	header  []byte
	dataLen int64
	split   bool // header and dataLen are set
}

// maxSeedFile bounds the files used whole as FuzzReadHeader seeds.
const maxSeedFile = 1 << 16

// headerSeeds returns the conformance cases and every safetensors file
// under this package's and the repository's testdata as seeds.
func headerSeeds(tb testing.TB) []headerSeed {
	var seeds []headerSeed
	add := func(file []byte, size int64) {
		s := headerSeed{}
		if size <= maxSeedFile {
			s.file = file
		}
		if len(file) >= 8 {
			if n := binary.LittleEndian.Uint64(file); n <= uint64(size-8) && n <= uint64(len(file)-8) {
				s.header, s.dataLen, s.split = file[8:8+n], size-8-int64(n), true
			}
		}
		seeds = append(seeds, s)
	}
	for _, c := range hdrCases() {
		add(c.file, int64(len(c.file)))
	}
	for _, p := range testdataFiles(tb, ".safetensors") {
		b, size, err := readPrefix(p, maxSeedFile)
		if err != nil {
			tb.Fatal(err)
		}
		add(b, size)
	}
	return seeds
}

// testdataFiles returns the files whose names end in suffix under this
// package's testdata and the repository's, failing when there is none.
func testdataFiles(tb testing.TB, suffix string) []string {
	tb.Helper()
	var paths []string
	for _, root := range []string{"testdata", filepath.Join("..", "testdata")} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, suffix) {
				paths = append(paths, p)
			}
			return err
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	if len(paths) == 0 {
		tb.Fatalf("no %s files under testdata", suffix)
	}
	return paths
}

// readPrefix returns up to n bytes from the start of the file at path and
// the file's size.
func readPrefix(path string, n int) ([]byte, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	b := make([]byte, min(int64(n), fi.Size()))
	_, err = f.ReadAt(b, 0)
	return b, fi.Size(), err
}

func FuzzParseHeader(f *testing.F) {
	for _, s := range headerSeeds(f) {
		if s.split {
			f.Add(s.header, s.dataLen)
		} else {
			f.Add(s.file, int64(0))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, dataLen int64) {
		h, err := ParseHeader(b, dataLen)
		if err != nil {
			checkFormatError(t, err)
			return
		}
		checkInvariants(t, b, dataLen, h)
	})
}

func FuzzReadHeader(f *testing.F) {
	for _, s := range headerSeeds(f) {
		if s.file != nil {
			f.Add(s.file)
		}
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		h, err := ReadHeader(bytes.NewReader(file), int64(len(file)))
		if err != nil {
			checkFormatError(t, err)
			return
		}
		n := binary.LittleEndian.Uint64(file)
		if h.DataOffset != 8+int64(n) {
			t.Fatalf("DataOffset = %d, length prefix %d", h.DataOffset, n)
		}
		checkInvariants(t, file[8:8+n], int64(len(file))-8-int64(n), h)
	})
}

// checkFormatError checks that err is an *Error of class ErrFormat.
func checkFormatError(t *testing.T, err error) {
	t.Helper()
	e, ok := errors.AsType[*Error](err)
	if !ok || !errors.Is(err, ErrFormat) || e.Off < -1 {
		t.Fatalf("error %v (%T) is not an *Error of class ErrFormat", err, err)
	}
}

func FuzzParseIndex(f *testing.F) {
	for _, c := range indexCases() {
		f.Add([]byte(c.json))
	}
	for _, p := range testdataFiles(f, IndexName) {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		idx, err := ParseIndex(b)
		if err != nil {
			checkFormatError(t, err)
			if !errors.Is(err, ErrIndex) && !errors.Is(err, ErrDuplicateKey) {
				t.Fatalf("error %v wraps neither ErrIndex nor ErrDuplicateKey", err)
			}
			return
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatalf("ParseIndex accepted what encoding/json rejects: %v", err)
		}
		var wm map[string]string
		if err := json.Unmarshal(raw[indexWeightMapKey], &wm); err != nil || !reflect.DeepEqual(wm, idx.WeightMap) {
			t.Fatalf("weight_map %q, encoding/json reads %q (%v)", idx.WeightMap, wm, err)
		}
		for name, shard := range idx.WeightMap {
			if !filepath.IsLocal(shard) || strings.ContainsAny(shard, `/\`) || !strings.HasSuffix(shard, ".safetensors") {
				t.Fatalf("tensor %q: shard %q accepted", name, shard)
			}
		}
		if m, ok := raw[indexMetadataKey]; ok {
			dec := json.NewDecoder(bytes.NewReader(m))
			dec.UseNumber()
			var md map[string]any
			if err := dec.Decode(&md); err != nil || !reflect.DeepEqual(md, idx.Metadata) {
				t.Fatalf("metadata %v, encoding/json reads %v (%v)", idx.Metadata, md, err)
			}
		} else if idx.Metadata != nil {
			t.Fatalf("metadata %v without a metadata key", idx.Metadata)
		}
	})
}
