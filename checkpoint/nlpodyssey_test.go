package checkpoint

// These tests hold package checkpoint against github.com/nlpodyssey/safetensors,
// an independent Go implementation of the format, used here as a second
// reader only (it reads a whole file from memory; ours streams and maps).

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	nlp "github.com/nlpodyssey/safetensors"
)

// nlpKnows reports whether nlpodyssey has dtype d. It lacks the 8-bit
// floats, the sub-byte types and C64, which the specification added after
// it was written.
func nlpKnows(d DType) bool {
	_, err := nlp.ParseDType(string(d))
	return err == nil
}

// nlpTensor is one tensor as nlpodyssey reads it.
type nlpTensor struct {
	dtype string
	shape []uint64
	data  []byte
}

// nlpFile is a file as nlpodyssey reads it.
type nlpFile struct {
	tensors  map[string]nlpTensor
	metadata map[string]string
}

// errNLPPanic marks a panic of nlpodyssey on a file it had accepted.
var errNLPPanic = errors.New("nlpodyssey panicked reading a file it accepted")

// nlpRead reads file with nlpodyssey. A panic while it reads the tensors
// of a file that Deserialize accepted is returned as an error wrapping
// errNLPPanic.
func nlpRead(file []byte) (f *nlpFile, err error) {
	st, err := nlp.Deserialize(file)
	if err != nil {
		return nil, err
	}
	_, md, err := nlp.ReadMetadata(file)
	if err != nil {
		return nil, fmt.Errorf("ReadMetadata fails where Deserialize succeeds: %w", err)
	}
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("%w: %v", errNLPPanic, r)
		}
	}()
	f = &nlpFile{tensors: make(map[string]nlpTensor), metadata: md.Metadata()}
	for _, t := range st.Tensors() {
		f.tensors[t.Name] = nlpTensor{dtype: t.TensorView.DType().String(), shape: t.TensorView.Shape(), data: t.TensorView.Data()}
	}
	return f, nil
}

// compareNLP returns what differs between the file our reader parsed
// (header h, tensor bytes from data) and what nlpodyssey read, or "".
func compareNLP(h *Header, data func(TensorInfo) []byte, theirs *nlpFile) string {
	if len(h.Tensors) != len(theirs.tensors) {
		return fmt.Sprintf("%d tensors, nlpodyssey reads %d", len(h.Tensors), len(theirs.tensors))
	}
	for _, ti := range h.Tensors {
		nt, ok := theirs.tensors[ti.Name]
		if !ok {
			return fmt.Sprintf("tensor %q missing in nlpodyssey's reading", ti.Name)
		}
		shape := make([]uint64, len(ti.Shape))
		for i, d := range ti.Shape {
			shape[i] = uint64(d)
		}
		if nt.dtype != string(ti.DType) || !slices.Equal(nt.shape, shape) {
			return fmt.Sprintf("tensor %q is %s %v, nlpodyssey reads %s %v", ti.Name, ti.DType, ti.Shape, nt.dtype, nt.shape)
		}
		if !bytes.Equal(data(ti), nt.data) {
			return fmt.Sprintf("tensor %q: bytes differ from nlpodyssey's", ti.Name)
		}
	}
	if !maps.Equal(h.Metadata, theirs.metadata) {
		return fmt.Sprintf("metadata %q, nlpodyssey reads %q", h.Metadata, theirs.metadata)
	}
	return ""
}

// checkNLPReads checks that nlpodyssey reads the file at path as our
// reader does, and returns the number of tensors.
func checkNLPReads(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f := openTestFile(t, path)
	theirs, err := nlpRead(b)
	if err != nil {
		t.Fatalf("%s: nlpodyssey: %v", path, err)
	}
	if diff := compareNLP(&f.Header, f.Data, theirs); diff != "" {
		t.Fatalf("%s: %s", path, diff)
	}
	return len(f.Tensors)
}

// nlpSpecs returns the specs whose dtype nlpodyssey knows and the names of
// the others.
func nlpSpecs(specs []TensorSpec) (known []TensorSpec, skipped []string) {
	for _, s := range specs {
		if nlpKnows(s.DType) {
			known = append(known, s)
		} else {
			skipped = append(skipped, s.Name+" "+string(s.DType))
		}
	}
	return known, skipped
}

// TestNLPReadsWriterGoldens rewrites every writer golden with WriteFile
// and reads the result with nlpodyssey. Tensors of dtypes nlpodyssey lacks
// are left out of the rewrite (see nlpKnows): it rejects a whole file that
// holds one.
func TestNLPReadsWriterGoldens(t *testing.T) {
	goldens, err := filepath.Glob(filepath.Join("testdata", "writer_golden*.safetensors"))
	if err != nil || len(goldens) == 0 {
		t.Fatalf("no writer goldens: %v", err)
	}
	for _, g := range goldens {
		t.Run(filepath.Base(g), func(t *testing.T) {
			f := openTestFile(t, g)
			specs, skipped := nlpSpecs(f.Specs())
			if len(skipped) > 0 {
				t.Logf("left out, dtypes nlpodyssey lacks: %s", strings.Join(skipped, ", "))
			}
			path := filepath.Join(t.TempDir(), "out.safetensors")
			if err := WriteFile(context.Background(), path, specs, f.Metadata, nil); err != nil {
				t.Fatal(err)
			}
			if n := checkNLPReads(t, path); n != len(specs) {
				t.Errorf("%d tensors read, %d written", n, len(specs))
			}
		})
	}
}

// TestNLPReadsRandomFiles writes random specs, as TestWriteFileProperty
// does, less the dtypes nlpodyssey lacks, and reads them with nlpodyssey.
func TestNLPReadsRandomFiles(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 13))
	dir := t.TempDir()
	for round := range 40 {
		specs, _ := nlpSpecs(randomSpecs(r, r.IntN(30)))
		var metadata map[string]string
		if r.IntN(2) == 0 {
			metadata = map[string]string{"format": "pt", "round": strings.Repeat("é\"\\\n", round)}
		}
		path := filepath.Join(dir, fmt.Sprintf("r%d.safetensors", round))
		if err := WriteFile(context.Background(), path, specs, metadata, nil); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if n := checkNLPReads(t, path); n != len(specs) {
			t.Errorf("round %d: %d tensors read, %d written", round, n, len(specs))
		}
	}
}

// prune24Source writes BF16 or F16 data pruned 2:4 along rows: in every
// group of 4 elements the 2 of largest magnitude stay, ties going to the
// lower index, and the others become +0.
type prune24Source struct{ src []byte }

// WriteTo writes the pruned data to w.
func (s prune24Source) WriteTo(w io.Writer) (int64, error) {
	out := make([]byte, len(s.src))
	for g := 0; g+8 <= len(s.src); g += 8 {
		var mag [4]uint16
		for i := range mag {
			mag[i] = binary.LittleEndian.Uint16(s.src[g+2*i:]) & 0x7fff
		}
		order := []int{0, 1, 2, 3}
		slices.SortStableFunc(order, func(a, b int) int { return int(mag[b]) - int(mag[a]) })
		for _, i := range order[:2] {
			copy(out[g+2*i:g+2*i+2], s.src[g+2*i:])
		}
	}
	n, err := w.Write(out)
	return int64(n), err
}

// TestNLPReadsPrunedCheckpoint prunes the projections of
// testdata/tiny-llama-bf16 2:4, writes the result with WriteDir and reads
// every shard with nlpodyssey.
func TestNLPReadsPrunedCheckpoint(t *testing.T) {
	c, err := Open(filepath.Join("..", "testdata", "tiny-llama-bf16"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out := outputOf(c, false)
	pruned := 0
	for _, sh := range out.Shards {
		for i, s := range sh.Tensors {
			if !strings.HasSuffix(s.Name, "_proj.weight") {
				continue
			}
			fr := s.Src.(FileRange)
			sh.Tensors[i].Src = prune24Source{src: fr.File.Data(fr.Tensor)}
			pruned++
		}
	}
	if pruned != 28 {
		t.Fatalf("%d projections, want 28", pruned)
	}
	dir := filepath.Join(t.TempDir(), "out")
	if err := WriteDir(context.Background(), dir, out, nil); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, sh := range out.Shards {
		n += checkNLPReads(t, filepath.Join(dir, sh.Name))
	}
	if n != 39 {
		t.Errorf("%d tensors read, want 39", n)
	}
	// The pruning must show in what nlpodyssey read: half of every
	// projection is zero.
	b, err := os.ReadFile(filepath.Join(dir, "model-00001-of-00002.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := nlpRead(b)
	if err != nil {
		t.Fatal(err)
	}
	q := theirs.tensors["model.layers.0.self_attn.q_proj.weight"].data
	zeros := 0
	for i := 0; i+2 <= len(q); i += 2 {
		if q[i] == 0 && q[i+1] == 0 {
			zeros++
		}
	}
	if len(q) == 0 || zeros < len(q)/4 {
		t.Errorf("q_proj: %d of %d elements zero, want at least half", zeros, len(q)/2)
	}
}

// A difference is a deliberate difference between the rules of our
// reader and nlpodyssey's: a file one accepts and the other rejects.
type difference struct {
	name   string
	reason string
	// oursRejects reports whether our error err on file is this
	// difference, for a file nlpodyssey accepts.
	oursRejects func(err *Error, file []byte) bool
	// theirsRejects reports whether this difference explains why
	// nlpodyssey rejects (or panics on) a file we parsed as h.
	theirsRejects func(h *Header, err error) bool
}

// differences are the deliberate differences between the two readers.
// Every other disagreement fails FuzzDifferential.
var differences = []difference{
	{
		name: "duplicate-key",
		reason: "the specification forbids a key that repeats (in the header, an entry or __metadata__); nlpodyssey's encoding/json keeps the last, " +
			"so an invalid entry that a later one of the same name replaces passes there, where ours stops at the first error in file order",
		oursRejects: func(e *Error, file []byte) bool { return errors.Is(e, ErrDuplicateKey) || repeatsKey(file) },
	},
	{
		name:   "invalid-text",
		reason: "a header must be valid UTF-8 JSON; nlpodyssey's encoding/json turns invalid UTF-8 and escaped lone surrogates inside strings into U+FFFD",
		oursRejects: func(e *Error, _ []byte) bool {
			return errors.Is(e, ErrInvalidHeader) && e.Detail == "invalid UTF-8 or lone surrogate escape"
		},
	},
	{
		name:   "null-object",
		reason: "the header and __metadata__ must be JSON objects; nlpodyssey's encoding/json decodes null into a nil map, an empty header or no metadata",
		oursRejects: func(e *Error, _ []byte) bool {
			return (e.Detail == "header must be an object, not null" && errors.Is(e, ErrInvalidHeader)) ||
				(e.Detail == "__metadata__ must be an object, not null" && errors.Is(e, ErrInvalidMetadata))
		},
	},
	{
		name: "beyond-int64",
		reason: "shape elements and offsets are int64 here, as file offsets are; nlpodyssey takes any uint64, so a dimension " +
			"above 2^63-1 passes there beside a zero one",
		oursRejects: func(e *Error, _ []byte) bool {
			return errors.Is(e, ErrOverflow) && strings.Contains(e.Detail, "exceeds 2^63-1")
		},
	},
	{
		name:   "dtype-nlpodyssey-lacks",
		reason: "F8_*, F6_*, F4 and C64 are in the specification; nlpodyssey predates them and rejects the file",
		theirsRejects: func(h *Header, _ error) bool {
			return slices.ContainsFunc(h.Tensors, func(t TensorInfo) bool { return !nlpKnows(t.DType) })
		},
	},
}

// repeatsKey reports whether file's header (the JSON after its 8-byte
// length) repeats a key in any object, by encoding/json's tokens; false
// where it is not JSON that far.
func repeatsKey(file []byte) bool {
	if len(file) < headerBase {
		return false
	}
	n := binary.LittleEndian.Uint64(file)
	if n > uint64(len(file)-headerBase) {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(file[headerBase : headerBase+int(n)]))
	// keys holds the keys seen in each open object; nil for an array.
	var keys []map[string]bool
	expectKey := func() bool { return len(keys) > 0 && keys[len(keys)-1] != nil }
	inKey := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				keys = append(keys, map[string]bool{})
			case '[':
				keys = append(keys, nil)
			default:
				keys = keys[:len(keys)-1]
			}
			inKey = expectKey()
			if len(keys) == 0 {
				return false
			}
			continue
		case string:
			if expectKey() && inKey {
				if keys[len(keys)-1][v] {
					return true
				}
				keys[len(keys)-1][v] = true
				inKey = false
				continue
			}
		}
		inKey = expectKey()
	}
}

// explainOursOnly returns the difference that makes us reject, with err,
// a file nlpodyssey accepts, or nil.
func explainOursOnly(err error, file []byte) *difference {
	e, ok := errors.AsType[*Error](err)
	if !ok {
		return nil
	}
	for i, d := range differences {
		if d.oursRejects != nil && d.oursRejects(e, file) {
			return &differences[i]
		}
	}
	return nil
}

// explainTheirsOnly returns the difference that makes nlpodyssey reject,
// with err, a file we parsed as h, or nil.
func explainTheirsOnly(h *Header, err error) *difference {
	for i, d := range differences {
		if d.theirsRejects != nil && d.theirsRejects(h, err) {
			return &differences[i]
		}
	}
	return nil
}

// maxDifferentialSeed bounds the files used whole as FuzzDifferential
// seeds; a larger one contributes its header and the first
// maxDifferentialSeed bytes after it.
const maxDifferentialSeed = 1 << 20

// differentialSeeds returns the header conformance cases and the
// safetensors files under both testdata folders.
func differentialSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	for _, c := range hdrCases() {
		seeds = append(seeds, c.file)
	}
	for _, p := range testdataFiles(tb, ".safetensors") {
		b, size, err := readPrefix(p, maxDifferentialSeed)
		if err != nil {
			tb.Fatal(err)
		}
		if size > maxDifferentialSeed && len(b) >= 8 {
			if n := binary.LittleEndian.Uint64(b); n <= maxDifferentialSeed-8 {
				b, _, err = readPrefix(p, 8+int(n)+maxDifferentialSeed)
				if err != nil {
					tb.Fatal(err)
				}
			}
		}
		seeds = append(seeds, b)
	}
	return seeds
}

// FuzzDifferential feeds the same bytes to our reader and to nlpodyssey.
// Where both accept, they must read the same tensors, dtypes, shapes,
// bytes and metadata; where one rejects what the other accepts, one of
// the listed differences must explain it.
func FuzzDifferential(f *testing.F) {
	for _, s := range differentialSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		h, oerr := ReadHeader(bytes.NewReader(file), int64(len(file)))
		theirs, terr := nlpRead(file)
		switch {
		case oerr == nil && terr == nil:
			data := func(ti TensorInfo) []byte { return file[h.DataOffset+ti.Begin : h.DataOffset+ti.End] }
			if diff := compareNLP(h, data, theirs); diff != "" {
				t.Fatal(diff)
			}
		case oerr == nil:
			if explainTheirsOnly(h, terr) == nil {
				t.Fatalf("we accept a file nlpodyssey rejects (%v), and no listed difference explains it", terr)
			}
		case terr == nil || errors.Is(terr, errNLPPanic):
			if explainOursOnly(oerr, file) == nil {
				t.Fatalf("nlpodyssey accepts a file we reject (%v), and no listed difference explains it", oerr)
			}
		}
	})
}

// TestDifferences checks each listed difference on a file that shows it,
// and files on which both readers agree, accepting or rejecting.
func TestDifferences(t *testing.T) {
	u8 := `{"dtype":"U8","shape":[1],"data_offsets":[0,1]}`
	// want is the difference, or "accept" or "reject" when both agree.
	tests := []struct{ name, header, data, want string }{
		{"agree-accept", `{"__metadata__":{"k":"v"},"a":` + u8 + `}`, "x", "accept"},
		{"agree-accept-empty", `{}`, "", "accept"},
		{"agree-wrong-case", `{"a":{"DTYPE":"U8","shape":[1],"data_offsets":[0,1]}}`, "x", "reject"},
		{"agree-unknown-field", `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}}`, "x", "reject"},
		{"agree-metadata-number", `{"__metadata__":{"k":1}}`, "", "reject"},
		{"agree-hole", `{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, "xx", "reject"},
		{"duplicate-tensor", `{"a":` + u8 + `,"a":` + u8 + `}`, "x", "duplicate-key"},
		{"duplicate-field", `{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, "x", "duplicate-key"},
		{"duplicate-metadata", `{"__metadata__":{"k":"v","k":"w"}}`, "", "duplicate-key"},
		{"duplicate-after-invalid", `{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,1]},"a":` + u8 + `}`, "x", "duplicate-key"},
		{"agree-invalid-no-duplicate", `{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[0],"data_offsets":[1,1]}}`, "x", "reject"},
		{"invalid-utf8", "{\"__metadata__\":{\"k\":\"\xff\"}}", "", "invalid-text"},
		{"lone-surrogate", `{"__metadata__":{"k":"\ud800"}}`, "", "invalid-text"},
		{"null-header", `null`, "", "null-object"},
		{"null-metadata", `{"__metadata__":null}`, "", "null-object"},
		{"beyond-int64", `{"a":{"dtype":"U8","shape":[0,9223372036854775808],"data_offsets":[0,0]}}`, "", "beyond-int64"},
		{"f8", `{"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}`, "x", "dtype-nlpodyssey-lacks"},
		{"c64", `{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}`, "12345678", "dtype-nlpodyssey-lacks"},
	}
	for _, d := range differences {
		if !slices.ContainsFunc(tests, func(tt struct{ name, header, data, want string }) bool { return tt.want == d.name }) {
			t.Errorf("difference %q has no case", d.name)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := hdrFile(tt.header, []byte(tt.data))
			h, oerr := ReadHeader(bytes.NewReader(file), int64(len(file)))
			_, terr := nlpRead(file)
			var got string
			switch {
			case oerr == nil && terr == nil:
				got = "accept"
			case oerr != nil && terr != nil:
				got = "reject"
			case oerr == nil:
				if d := explainTheirsOnly(h, terr); d != nil {
					got = d.name
				}
			default:
				if d := explainOursOnly(oerr, file); d != nil {
					got = d.name
				}
			}
			if got != tt.want {
				t.Errorf("got %q, want %q (ours: %v; nlpodyssey: %v)", got, tt.want, oerr, terr)
			}
		})
	}
}
