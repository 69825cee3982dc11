package decisions_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/decisions"
	"github.com/sfsurgery/sfsurgery/decisions/decisionstest"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/prune24"
)

// The target of these tests: a BF16 [rows, cols] weight whose mask rows
// end in half a byte.
const (
	up   = "model.layers.0.mlp.up_proj.weight"
	rows = 3
	cols = 12
)

var weight = checkpoint.TensorInfo{Name: up, DType: checkpoint.BF16, Shape: []int64{rows, cols}}

// goodMask keeps columns 0, 1 of every group: 0x33 then 0x03 a row.
func goodMask() []byte { return bytes.Repeat([]byte{0x33, 0x03}, rows) }

// update returns the updated weight of goodMask: 1.0 where kept, +0
// elsewhere.
func update() []byte {
	b := make([]byte, rows*cols*2)
	for i := range rows * cols {
		if i%4 < 2 {
			binary.LittleEndian.PutUint16(b[2*i:], 0x3F80)
		}
	}
	return b
}

func mask(data []byte) decisionstest.Tensor {
	return decisionstest.Tensor{Name: up + ".mask", DType: checkpoint.U8, Shape: []int64{rows, 2}, Data: data}
}

func upd(data []byte) decisionstest.Tensor {
	return decisionstest.Tensor{Name: up + ".update", DType: checkpoint.BF16, Shape: []int64{rows, cols}, Data: data}
}

// withMeta returns the JSON of a valid wanda Meta with one key replaced
// (or, with a nil value, removed).
func withMeta(t *testing.T, key string, value any) string {
	t.Helper()
	m := map[string]any{}
	meta := decisionstest.Meta(format.Wanda)
	if err := jsonUnmarshal(meta.Encode(), &m); err != nil {
		t.Fatal(err)
	}
	if value == nil {
		delete(m, key)
	} else {
		m[key] = value
	}
	return jsonMarshal(t, m)
}

// TestOpenRefuses holds every refusal of a decisions file in itself: one
// line naming the file (and the tensor where there is one), wrapping
// ErrInvalid.
func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	wanda, sparse := decisionstest.Meta(format.Wanda), decisionstest.Meta(format.SparseGPT)
	md := func(s string) map[string]string { return map[string]string{decisions.MetadataKey: s} }
	tests := []struct {
		name     string
		metadata map[string]string
		tensors  []decisionstest.Tensor
		raw      []byte // the file's bytes instead, when set
		tensor   string // the tensor the error names; "" for none
		want     []string
		cause    error
	}{
		{name: "not safetensors", raw: []byte("mask,update\n1,2\n"), want: []string{"not a decisions file", "header"}, cause: checkpoint.ErrFormat},
		{name: "malformed header", raw: append(binary.LittleEndian.AppendUint64(nil, 9), `{"a":1,}x`...),
			want: []string{"not a decisions file", "JSON"}, cause: checkpoint.ErrFormat},
		{name: "empty", raw: []byte{}, want: []string{"not a decisions file"}, cause: checkpoint.ErrFormat},
		{name: "no metadata", metadata: map[string]string{"format": "pt"}, tensors: []decisionstest.Tensor{mask(goodMask())},
			want: []string{"no __metadata__", "sfsurgery_decisions"}},
		{name: "metadata not JSON", metadata: md("{schema"), want: []string{"sfsurgery_decisions"}},
		{name: "bad schema", metadata: md(withMeta(t, "schema", "sfsurgery-decisions/2")),
			want: []string{`schema "sfsurgery-decisions/2"`, "sfsurgery-decisions/1"}},
		{name: "unknown method", metadata: md(withMeta(t, "method", "obc")), want: []string{`unknown method "obc"`}},
		{name: "magnitude is no decision", metadata: md(withMeta(t, "method", "magnitude")), want: []string{`unknown method "magnitude"`}},
		{name: "missing key", metadata: md(withMeta(t, "seqlen", nil)), want: []string{"missing seqlen"}},
		{name: "unknown key", metadata: md(withMeta(t, "dtype", "bf16")), want: []string{"unknown field", "dtype"}},
		{name: "key twice", metadata: md(`{"schema":"sfsurgery-decisions/1","method":"wanda","method":"ria"}`), want: []string{`key "method" twice`}},
		{name: "text digest", metadata: md(withMeta(t, "text", map[string]any{"file": "c.txt", "sha256": "ABC", "kind": "plain"})),
			want: []string{`sha256 "ABC"`}},
		{name: "text kind", metadata: md(withMeta(t, "text", map[string]any{"file": "c.txt", "sha256": strings.Repeat("0", 64), "kind": "csv"})),
			want: []string{`kind "csv"`}},
		{name: "no samples", metadata: md(withMeta(t, "samples", 0)), want: []string{"samples 0"}},
		{name: "params not numbers", metadata: md(withMeta(t, "params", map[string]any{"alpha": "half"})), want: []string{"params", "alpha"}},
		{name: "data after the object", metadata: md(wanda.Encode() + " {}"), want: []string{"after the JSON object"}},
		{name: "not a decisions tensor", metadata: md(wanda.Encode()),
			tensors: []decisionstest.Tensor{mask(goodMask()), {Name: up, DType: checkpoint.BF16, Shape: []int64{rows, cols}, Data: update()}},
			tensor:  up, want: []string{"not a decisions tensor"}},
		{name: "mask dtype", metadata: md(wanda.Encode()),
			tensors: []decisionstest.Tensor{{Name: up + ".mask", DType: checkpoint.I8, Shape: []int64{rows, 2}, Data: goodMask()}},
			tensor:  up + ".mask", want: []string{"dtype I8", "U8"}},
		{name: "mask not a matrix", metadata: md(wanda.Encode()),
			tensors: []decisionstest.Tensor{{Name: up + ".mask", DType: checkpoint.U8, Shape: []int64{rows * 2}, Data: goodMask()}},
			tensor:  up + ".mask", want: []string{"not a matrix"}},
		{name: "update for wanda", metadata: md(wanda.Encode()), tensors: []decisionstest.Tensor{mask(goodMask()), upd(update())},
			tensor: up + ".update", want: []string{"wanda decisions hold masks only"}},
		{name: "no update for sparsegpt", metadata: md(sparse.Encode()), tensors: []decisionstest.Tensor{mask(goodMask())},
			tensor: up + ".update", want: []string{"missing", "updated weight"}},
		{name: "update without its mask", metadata: md(sparse.Encode()), tensors: []decisionstest.Tensor{upd(update())},
			tensor: up + ".mask", want: []string{"missing", "no mask beside it"}},
		{name: "update dtype", metadata: md(sparse.Encode()),
			tensors: []decisionstest.Tensor{mask(goodMask()), {Name: up + ".update", DType: checkpoint.I16, Shape: []int64{rows, cols}, Data: update()}},
			tensor:  up + ".update", want: []string{"dtype I16"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".safetensors")
			if tt.raw != nil {
				if err := os.WriteFile(path, tt.raw, 0o644); err != nil {
					t.Fatal(err)
				}
			} else {
				decisionstest.WriteMetadata(t, path, tt.metadata, tt.tensors...)
			}
			d, err := decisions.Open(path)
			if err == nil {
				d.Close()
				t.Fatal("accepted")
			}
			checkRefusal(t, err, path, tt.tensor, tt.want...)
			if tt.cause != nil && !errors.Is(err, tt.cause) {
				t.Errorf("%v does not wrap %v", err, tt.cause)
			}
		})
	}
}

// checkRefusal checks that err is one line "path: [tensor "name": ]..."
// holding every want, and wraps ErrInvalid.
func checkRefusal(t *testing.T, err error, path, tensor string, want ...string) {
	t.Helper()
	var de *decisions.Error
	if !errors.Is(err, decisions.ErrInvalid) || !errors.As(err, &de) {
		t.Fatalf("%v: not a decisions.Error wrapping ErrInvalid", err)
	}
	msg := err.Error()
	prefix := path + ": "
	if tensor != "" {
		prefix += `tensor "` + tensor + `": `
	}
	if !strings.HasPrefix(msg, prefix) {
		t.Errorf("%q does not start with %q", msg, prefix)
	}
	if tensor == "" && strings.Contains(msg, ": tensor ") && !strings.Contains(msg, "not a decisions file") {
		t.Errorf("%q names a tensor", msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%q does not say %q", msg, w)
		}
	}
	if strings.ContainsAny(msg, "\n\r") {
		t.Errorf("%q is not one line", msg)
	}
}

// open writes a decisions file of the meta and tensors and opens it.
func open(t *testing.T, meta decisions.Meta, tensors ...decisionstest.Tensor) (*decisions.File, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "d.safetensors")
	decisionstest.Write(t, path, meta, tensors...)
	d, err := decisions.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, path
}

func TestOpen(t *testing.T) {
	meta := decisionstest.Meta(format.SparseGPT)
	d, path := open(t, meta, mask(goodMask()), upd(update()))
	if d.Meta.Method != format.SparseGPT || d.Meta.Samples != 4 || d.Meta.Params["block"] != 128 || d.Meta.Text.Kind != "plain" {
		t.Errorf("Meta = %+v", d.Meta)
	}
	if w := d.Weights(); len(w) != 1 || w[0] != up || !d.Has(up) || d.Has(up+"x") {
		t.Errorf("Weights = %v", w)
	}
	got, err := d.SHA256(context.Background())
	sum := sha256.Sum256(mustRead(t, path))
	if err != nil || got != hex.EncodeToString(sum[:]) {
		t.Errorf("SHA256 = %s, %v; want %x", got, err, sum)
	}
	x, err := d.Lookup(weight)
	if err != nil {
		t.Fatal(err)
	}
	if !x.Updates() || x.Rows != rows || x.Cols != cols || x.MaskRowBytes() != 2 || x.MaskName() != up+".mask" {
		t.Errorf("Decision = %+v", x)
	}
	m := make([]byte, 2*2)
	if err := x.ReadMask(m, 1, 2); err != nil || !bytes.Equal(m, goodMask()[2:]) {
		t.Errorf("ReadMask rows 1, 2 = % x, %v", m, err)
	}
	u := make([]byte, 2*cols*2)
	if err := x.ReadUpdate(u, m, 1, 2); err != nil || !bytes.Equal(u, update()[cols*2:]) {
		t.Errorf("ReadUpdate rows 1, 2: %v", err)
	}
	if err := d.Extra(func(string) string { return "" }); err != nil {
		t.Errorf("Extra with every weight wanted: %v", err)
	}
	if err := d.Extra(func(w string) string { return w + " is not a target" }); err == nil {
		t.Error("Extra with no weight wanted: nil")
	} else {
		checkRefusal(t, err, path, up+".mask", up+" is not a target")
	}
}

// TestLookupRefuses holds the refusals of decisions made for another
// model: a missing mask, another shape or dtype.
func TestLookupRefuses(t *testing.T) {
	sparse := decisionstest.Meta(format.SparseGPT)
	tests := []struct {
		name    string
		meta    decisions.Meta
		tensors []decisionstest.Tensor
		weight  checkpoint.TensorInfo
		tensor  string
		want    []string
	}{
		{"missing mask", decisionstest.Meta(format.Wanda), []decisionstest.Tensor{mask(goodMask())},
			checkpoint.TensorInfo{Name: "model.layers.1.mlp.up_proj.weight", DType: checkpoint.BF16, Shape: []int64{rows, cols}},
			"model.layers.1.mlp.up_proj.weight.mask", []string{"missing", "no mask for the target"}},
		{"mask rows", decisionstest.Meta(format.RIA), []decisionstest.Tensor{mask(goodMask())},
			checkpoint.TensorInfo{Name: up, DType: checkpoint.BF16, Shape: []int64{rows + 1, cols}},
			up + ".mask", []string{"shape [3 2]", "want [4 2]", "another model"}},
		{"mask columns", decisionstest.Meta(format.Wanda), []decisionstest.Tensor{mask(goodMask())},
			checkpoint.TensorInfo{Name: up, DType: checkpoint.BF16, Shape: []int64{rows, 20}},
			up + ".mask", []string{"want [3 3]"}},
		{"update dtype", sparse, []decisionstest.Tensor{mask(goodMask()), upd(update())},
			checkpoint.TensorInfo{Name: up, DType: checkpoint.F16, Shape: []int64{rows, cols}},
			up + ".update", []string{"BF16 [3 12], want F16 [3 12]"}},
		{"update shape", sparse, []decisionstest.Tensor{mask(goodMask()),
			{Name: up + ".update", DType: checkpoint.BF16, Shape: []int64{rows * cols / 4, 4}, Data: update()}},
			weight, up + ".update", []string{"BF16 [9 4], want BF16 [3 12]"}},
		{"not a matrix to prune", decisionstest.Meta(format.Wanda), []decisionstest.Tensor{mask(goodMask())},
			checkpoint.TensorInfo{Name: up, DType: checkpoint.I32, Shape: []int64{rows, cols}},
			up + ".mask", []string{"I32"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, path := open(t, tt.meta, tt.tensors...)
			_, err := d.Lookup(tt.weight)
			if err == nil {
				t.Fatal("accepted")
			}
			checkRefusal(t, err, path, tt.tensor, tt.want...)
		})
	}
}

// TestReadRefuses holds the refusals of the data: a group that does not
// keep 2, a bit past the last column, an update that is nonzero where
// the mask prunes or not finite.
func TestReadRefuses(t *testing.T) {
	setRow1 := func(b []byte, off int, v uint16) []byte {
		binary.LittleEndian.PutUint16(b[2*(cols+off):], v)
		return b
	}
	tests := []struct {
		name   string
		mask   []byte
		update []byte
		tensor string
		want   []string
		cause  error
	}{
		{"group keeps 1", append(goodMask()[:2], 0x31, 0x03, 0x33, 0x03), nil, up + ".mask",
			[]string{"row 1, columns 0-3: 1 kept, want 2 of every 4"}, prune24.ErrBitmask},
		{"group keeps 3", append(goodMask()[:4], 0x33, 0x07), nil, up + ".mask",
			[]string{"row 2, columns 8-11: 3 kept"}, prune24.ErrBitmask},
		{"bit past the last column", append(goodMask()[:2], 0x33, 0x13, 0x33, 0x03), nil, up + ".mask",
			[]string{"row 1: 1 of the bits past the last column (11) set, want none"}, prune24.ErrBitmask},
		{"update nonzero where pruned", goodMask(), setRow1(update(), 6, 0x3F00), up + ".update",
			[]string{"row 1, column 6: 0.5 where the mask prunes, want ±0"}, nil},
		{"update NaN", goodMask(), setRow1(update(), 4, 0x7FC0), up + ".update", []string{"row 1, column 4: NaN", "finite"}, nil},
		{"update +Inf where pruned", goodMask(), setRow1(update(), 3, 0x7F80), up + ".update", []string{"row 1, column 3: +Inf"}, nil},
		{"update -Inf", goodMask(), setRow1(update(), 9, 0xFF80), up + ".update", []string{"row 1, column 9: -Inf"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			meta := decisionstest.Meta(format.Wanda)
			tensors := []decisionstest.Tensor{mask(tt.mask)}
			if tt.update != nil {
				meta = decisionstest.Meta(format.SparseGPT)
				tensors = append(tensors, upd(tt.update))
			}
			d, path := open(t, meta, tensors...)
			x, err := d.Lookup(weight)
			if err != nil {
				t.Fatal(err)
			}
			m := make([]byte, rows*2)
			err = x.ReadMask(m, 0, rows)
			if err == nil && tt.update != nil {
				err = x.ReadUpdate(make([]byte, rows*cols*2), m, 0, rows)
			}
			if err == nil {
				t.Fatal("accepted")
			}
			checkRefusal(t, err, path, tt.tensor, tt.want...)
			if tt.cause != nil && !errors.Is(err, tt.cause) {
				t.Errorf("%v does not wrap %v", err, tt.cause)
			}
		})
	}
	// -0.0 where the mask prunes is a zero: accepted.
	d, _ := open(t, decisionstest.Meta(format.SparseGPT), mask(goodMask()), upd(setRow1(update(), 2, 0x8000)))
	x, err := d.Lookup(weight)
	if err != nil {
		t.Fatal(err)
	}
	m := make([]byte, rows*2)
	if err := x.ReadMask(m, 0, rows); err != nil {
		t.Fatal(err)
	}
	if err := x.ReadUpdate(make([]byte, rows*cols*2), m, 0, rows); err != nil {
		t.Errorf("-0.0 where pruned: %v", err)
	}
}

// TestParseMetaRoundTrip holds that what Encode writes, ParseMeta reads
// back the same, for every method.
func TestParseMetaRoundTrip(t *testing.T) {
	for _, m := range []format.Method{format.Wanda, format.RIA, format.SparseGPT} {
		want := decisionstest.Meta(m)
		got, err := decisions.ParseMeta(want.Encode())
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		if got.Encode() != want.Encode() {
			t.Errorf("%s: read back %s, wrote %s", m, got.Encode(), want.Encode())
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
