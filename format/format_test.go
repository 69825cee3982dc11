package format_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
)

func TestParse(t *testing.T) {
	for _, s := range []string{"ampere", "bitmask", "dense"} {
		if f, err := format.Parse(s); err != nil || string(f) != s {
			t.Errorf("Parse(%q) = %q, %v", s, f, err)
		}
	}
	for _, s := range []string{"", "Ampere", "sparse-24-bitmask"} {
		if _, err := format.Parse(s); err == nil {
			t.Errorf("Parse(%q) succeeded", s)
		}
	}
}

func TestReportPath(t *testing.T) {
	if got, want := format.ReportPath("out/m.safetensors", true), "out/m.sfsurgery.json"; got != want {
		t.Errorf("single file: %q, want %q", got, want)
	}
	if got, want := format.ReportPath("out", false), filepath.Join("out", format.ReportName); got != want {
		t.Errorf("directory: %q, want %q", got, want)
	}
}

// write writes one safetensors file holding zeros of the given tensors,
// with metadata, and opens it.
func write(t *testing.T, metadata map[string]string, tensors ...checkpoint.TensorSpec) *checkpoint.Checkpoint {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.safetensors")
	for i := range tensors {
		n := tensors[i].DType.Size()
		for _, d := range tensors[i].Shape {
			n *= int(d)
		}
		tensors[i].Src = zeros(n)
	}
	if err := checkpoint.WriteFile(context.Background(), path, tensors, metadata, nil); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}

// zeros is a tensor source of n zero bytes.
type zeros int

func (z zeros) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(make([]byte, z))
	return int64(n), err
}

func TestReadManifest(t *testing.T) {
	plain := checkpoint.TensorSpec{Name: "w", DType: checkpoint.BF16, Shape: []int64{4}}
	if _, err := format.ReadManifest(write(t, nil, plain)); !errors.Is(err, format.ErrNoManifest) {
		t.Errorf("no manifest: %v, want ErrNoManifest", err)
	}
	m := &format.Manifest{Tool: "sfsurgery", Version: "v1", Format: format.Dense, Rule: format.RuleDescription,
		Targets: map[string]string{"b.weight": "2:4", "a.weight": "1:2"}}
	got, err := format.ReadManifest(write(t, map[string]string{format.MetadataKey: m.Encode()}, plain))
	if err != nil {
		t.Fatal(err)
	}
	if got.Format != format.Dense || got.Targets["a.weight"] != "1:2" || len(got.TargetNames()) != 2 || got.TargetNames()[0] != "a.weight" {
		t.Errorf("read back %+v", got)
	}
	if _, err := format.ReadManifest(write(t, map[string]string{format.MetadataKey: `{"tool":"x","extra":1}`}, plain)); err == nil {
		t.Error("a manifest with an unknown field was accepted")
	}
}

func TestFindCompressedMissingCompanion(t *testing.T) {
	ck := write(t, nil, checkpoint.TensorSpec{Name: "p.packed", DType: checkpoint.BF16, Shape: []int64{32, 32}})
	if _, err := format.FindCompressed(ck); !errors.Is(err, format.ErrCompressed) {
		t.Errorf("P.packed without P.meta: %v, want ErrCompressed", err)
	}
}

func TestParseMethod(t *testing.T) {
	for _, s := range []string{"wanda", "ria", "sparsegpt"} {
		if m, err := format.ParseMethod(s); err != nil || string(m) != s {
			t.Errorf("ParseMethod(%q) = %q, %v", s, m, err)
		}
	}
	for _, s := range []string{"", "magnitude", "Wanda", "sparse-gpt"} {
		if _, err := format.ParseMethod(s); err == nil {
			t.Errorf("ParseMethod(%q) succeeded", s)
		}
	}
}

// TestMethodRule holds the rule text to the method: the magnitude rule's
// is RuleDescription, every calibrated method's names the method and says
// whose values are kept.
func TestMethodRule(t *testing.T) {
	if format.Method("").Rule() != format.RuleDescription || format.Magnitude.Rule() != format.RuleDescription {
		t.Error("the magnitude rule's text is not RuleDescription")
	}
	for m, values := range map[format.Method]string{format.Wanda: "original's", format.RIA: "original's", format.SparseGPT: "updated values"} {
		if r := m.Rule(); !strings.HasPrefix(r, string(m)+": ") || !strings.Contains(r, values) || !strings.Contains(r, "decisions") {
			t.Errorf("%s: rule %q", m, r)
		}
	}
}

// TestManifestMethod holds that a magnitude manifest carries no method
// field and that shards that disagree on the method are refused.
func TestManifestMethod(t *testing.T) {
	plain := checkpoint.TensorSpec{Name: "w", DType: checkpoint.BF16, Shape: []int64{4}}
	m := &format.Manifest{Tool: "sfsurgery", Version: "v1", Format: format.Dense, Rule: format.RuleDescription, Targets: map[string]string{}}
	if strings.Contains(m.Encode(), "method") {
		t.Errorf("a magnitude manifest names a method: %s", m.Encode())
	}
	w := *m
	w.Method, w.Rule = format.Wanda, format.Wanda.Rule()
	got, err := format.ReadManifest(write(t, map[string]string{format.MetadataKey: w.Encode()}, plain))
	if err != nil || got.Method != format.Wanda {
		t.Fatalf("read back %+v, %v", got, err)
	}
	dir := t.TempDir()
	var shards []checkpoint.Shard
	for i, man := range []*format.Manifest{m, &w} {
		p := plain
		p.Name = fmt.Sprintf("w%d", i)
		p.Src = zeros(8)
		shards = append(shards, checkpoint.Shard{Name: fmt.Sprintf("model-0000%d-of-00002.safetensors", i+1),
			Tensors: []checkpoint.TensorSpec{p}, Metadata: map[string]string{format.MetadataKey: man.Encode()}})
	}
	out := filepath.Join(dir, "two")
	if err := checkpoint.WriteDir(context.Background(), out, &checkpoint.Output{Shards: shards, Index: true}, nil); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if _, err := format.ReadManifest(ck); err == nil || !strings.Contains(err.Error(), "wanda") {
		t.Errorf("shards of magnitude and wanda: %v, want an error naming both methods", err)
	}
}
