package format_test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
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
