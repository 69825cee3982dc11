package surgery_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/prune24"
	"github.com/sfsurgery/sfsurgery/surgery"
)

// copyDir copies the regular files of src into a new directory dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.WriteFile(filepath.Join(dst, e.Name()), fileBytes(t, filepath.Join(src, e.Name())), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReportDigests checks that the report lies inside the output and
// holds the SHA-256 of every tensor of every shard as written, for each
// format and for a single file.
func TestReportDigests(t *testing.T) {
	dir := t.TempDir()
	single := filepath.Join(dir, "single.safetensors")
	writeModel(t, single, []tensor{
		{"model.layers.0.mlp.up_proj.weight", checkpoint.BF16, []int64{64, 64}, randomBF16(64*64, 3)},
		{"model.norm.weight", checkpoint.BF16, []int64{64}, randomBF16(64, 4)},
	})
	for _, tc := range []struct {
		in     string
		format format.Format
	}{
		{testdataModel, format.Ampere},
		{testdataModel, format.Bitmask},
		{testdataModel, format.Dense},
		{single, format.Ampere},
	} {
		out := filepath.Join(dir, "out-"+string(tc.format)+filepath.Ext(tc.in))
		rep := prune(t, tc.in, out, surgery.Options{Format: tc.format}, checkpoint.WriteOptions{})
		ck, err := checkpoint.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		onDisk, err := format.ReadReport(ck)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.in, tc.format, err)
		}
		n := 0
		for _, f := range ck.Shards {
			for _, ti := range f.Tensors {
				n++
				sum := sha256.Sum256(f.Data(ti))
				if want := hex.EncodeToString(sum[:]); onDisk.SHA256[ti.Name] != want || rep.SHA256[ti.Name] != want {
					t.Errorf("%s %s: %s: digest %q in the report, want %s", tc.in, tc.format, ti.Name, onDisk.SHA256[ti.Name], want)
				}
			}
		}
		if len(onDisk.SHA256) != n {
			t.Errorf("%s %s: %d digests for %d tensors", tc.in, tc.format, len(onDisk.SHA256), n)
		}
		if ck.Index != nil {
			var params int64
			for _, f := range ck.Shards {
				for _, ti := range f.Tensors {
					params += ti.NumElements()
				}
			}
			if got := ck.Index.Metadata["total_parameters"]; fmt.Sprint(got) != fmt.Sprint(params) {
				t.Errorf("%s %s: index total_parameters %v, the output's tensors hold %d", tc.in, tc.format, got, params)
			}
		}
		if !filepath.IsAbs(onDisk.Input) || !filepath.IsAbs(onDisk.Output) {
			t.Errorf("report paths %q, %q are not absolute", onDisk.Input, onDisk.Output)
		}
		ck.Close()
	}
}

// TestUnindexedCarried checks that a weight file the index does not name
// is carried over byte for byte, unpruned, with a warning in the plan and
// the report.
func TestUnindexedCarried(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	copyDir(t, testdataModel, in)
	extra := filepath.Join(in, "consolidated.safetensors")
	writeModel(t, extra, []tensor{{"layers.0.attention.wq.weight", checkpoint.BF16, []int64{64, 64}, randomBF16(64*64, 5)}})
	ck, err := checkpoint.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	p, err := surgery.NewPlan(ck, surgery.Options{Format: format.Ampere, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(p.Warnings(), "\n"); !strings.Contains(w, "consolidated.safetensors is carried into the output unchanged and not pruned") {
		t.Errorf("warnings %q do not say the file is carried unpruned", w)
	}
	out := filepath.Join(dir, "out")
	rep, err := p.Write(context.Background(), out, checkpoint.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fileBytes(t, filepath.Join(out, "consolidated.safetensors")); string(got) != string(fileBytes(t, extra)) {
		t.Error("the unindexed file is not carried over byte for byte")
	}
	if w := strings.Join(rep.Warnings, "\n"); !strings.Contains(w, "consolidated.safetensors") {
		t.Errorf("report warnings %q do not name the file", w)
	}
}

// TestTinyShardsKeepGroups checks that a shard limit smaller than one
// compressed weight gives each weight's values, index and shape a shard
// of their own together, as the dense format gives a big tensor its own.
func TestTinyShardsKeepGroups(t *testing.T) {
	for _, fm := range []format.Format{format.Ampere, format.Bitmask, format.Dense} {
		out := filepath.Join(t.TempDir(), "out")
		ck, err := checkpoint.Open(testdataModel)
		if err != nil {
			t.Fatal(err)
		}
		p, err := surgery.NewPlan(ck, surgery.Options{Format: fm, Version: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Reshard(1); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Write(context.Background(), out, checkpoint.WriteOptions{}); err != nil {
			t.Fatalf("%s with 1-byte shards: %v", fm, err)
		}
		ck.Close()
		got, err := checkpoint.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		comps, err := format.FindCompressed(got)
		if err != nil {
			t.Errorf("%s: %v", fm, err)
		}
		if fm != format.Dense && len(comps) != p.Pruned() {
			t.Errorf("%s: %d compressed weights found, %d pruned", fm, len(comps), p.Pruned())
		}
		got.Close()
	}
}

// TestNaNNamesInput checks that a NaN refusal names the input file, the
// input tensor and the element, and not the output that never appears.
func TestNaNNamesInput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "nan.safetensors")
	w := randomBF16(64*64, 6)
	binary.LittleEndian.PutUint16(w[2*(3*64+5):], uint16(math.Float32bits(float32(math.NaN()))>>16))
	writeModel(t, in, []tensor{{"model.layers.0.self_attn.q_proj.weight", checkpoint.BF16, []int64{64, 64}, w}})
	for _, fm := range []format.Format{format.Ampere, format.Bitmask, format.Dense} {
		out := filepath.Join(dir, "out-"+string(fm)+".safetensors")
		ck, err := checkpoint.Open(in)
		if err != nil {
			t.Fatal(err)
		}
		p, err := surgery.NewPlan(ck, surgery.Options{Format: fm, Version: "test"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Write(context.Background(), out, checkpoint.WriteOptions{})
		ck.Close()
		var nan *prune24.NaNError
		if !errors.As(err, &nan) {
			t.Fatalf("%s: err = %v, want a NaNError", fm, err)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, in+": ") || !strings.Contains(msg, `"model.layers.0.self_attn.q_proj.weight"`) || strings.Contains(msg, out) {
			t.Errorf("%s: %q does not start with the input and its tensor, or names the output", fm, msg)
		}
		if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the output exists", fm)
		}
	}
}
