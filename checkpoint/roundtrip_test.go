package checkpoint

import (
	"bytes"
	"context"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// writerFixture returns the path of a checkpoint under the repository's
// testdata, failing the test when it is absent.
func writerFixture(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join("..", "testdata", name)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("fixture %s missing: %v", name, err)
	}
	return dir
}

// hiddenSource hides a FileRange behind a plain io.WriterTo, so that the
// writer takes the generic path (FileRange.WriteTo into the tensor's
// writer) instead of copy_file_range.
type hiddenSource struct{ io.WriterTo }

// outputOf describes c rewritten unchanged: the same shards with the same
// tensors (FileRange sources, hidden from the writer when generic is set)
// and metadata, the same index metadata, and c's other files copied.
func outputOf(c *Checkpoint, generic bool) *Output {
	out := &Output{Index: c.Index != nil}
	if c.Index != nil {
		out.IndexMetadata = c.Index.Metadata
	}
	for _, f := range c.Shards {
		specs := f.Specs()
		if generic {
			for i := range specs {
				specs[i].Src = hiddenSource{specs[i].Src}
			}
		}
		out.Shards = append(out.Shards, Shard{Name: filepath.Base(f.Path()), Tensors: specs, Metadata: f.Metadata})
	}
	for _, name := range c.Files {
		out.Files = append(out.Files, ExtraFile{Name: name, From: filepath.Join(c.Dir, name)})
	}
	return out
}

// TestRoundTripFixtures rewrites the Hugging Face checkpoints in testdata with WriteDir,
// through copy_file_range and through the generic path, and checks the
// result: every tensor bit for bit, the metadata, the index's weight map
// and total_size, the extra files, and, since the fixtures were written
// by the reference implementation, every shard byte for byte.
func TestRoundTripFixtures(t *testing.T) {
	for _, name := range []string{"tiny-llama-bf16", "tiny-llama-fp16"} {
		for _, generic := range []bool{false, true} {
			t.Run(name+"/generic="+strconv.FormatBool(generic), func(t *testing.T) {
				in := writerFixture(t, name)
				c, err := Open(in)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				dir := filepath.Join(t.TempDir(), "out")
				if err := WriteDir(context.Background(), dir, outputOf(c, generic), &WriteOptions{Workers: 3}); err != nil {
					t.Fatal(err)
				}
				r, err := Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				compareCheckpoints(t, c, r)
				for _, f := range c.Shards {
					want, _ := os.ReadFile(f.Path())
					got, err := os.ReadFile(filepath.Join(dir, filepath.Base(f.Path())))
					if err != nil || !bytes.Equal(got, want) {
						t.Errorf("%s differs from the reference's file (%v)", filepath.Base(f.Path()), err)
					}
				}
			})
		}
	}
}

// TestRoundTripWriteFile rewrites each fixture shard alone with WriteFile
// and checks that the file is the reference's, byte for byte.
func TestRoundTripWriteFile(t *testing.T) {
	for _, name := range []string{"tiny-llama-bf16", "tiny-llama-fp16"} {
		t.Run(name, func(t *testing.T) {
			c, err := Open(writerFixture(t, name))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for _, f := range c.Shards {
				path := filepath.Join(t.TempDir(), filepath.Base(f.Path()))
				if err := WriteFile(context.Background(), path, f.Specs(), f.Metadata, nil); err != nil {
					t.Fatal(err)
				}
				want, _ := os.ReadFile(f.Path())
				got, err := os.ReadFile(path)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("%s differs from the reference's file (%v)", path, err)
				}
			}
		})
	}
}

// compareCheckpoints checks that got holds what want holds: the same
// tensors bit for bit in the same shards, the same metadata, an equal
// index, and the same extra files.
func compareCheckpoints(t *testing.T, want, got *Checkpoint) {
	t.Helper()
	if !slices.Equal(got.Names(), want.Names()) {
		t.Fatalf("tensor names differ:\n got %q\nwant %q", got.Names(), want.Names())
	}
	for _, name := range want.Names() {
		wf, wt, _ := want.Lookup(name)
		gf, gt, ok := got.Lookup(name)
		if !ok {
			t.Errorf("tensor %q missing", name)
			continue
		}
		if gt.DType != wt.DType || !slices.Equal(gt.Shape, wt.Shape) {
			t.Errorf("tensor %q is %s %v, want %s %v", name, gt.DType, gt.Shape, wt.DType, wt.Shape)
		}
		if filepath.Base(gf.Path()) != filepath.Base(wf.Path()) {
			t.Errorf("tensor %q in %s, want %s", name, filepath.Base(gf.Path()), filepath.Base(wf.Path()))
		}
		if !bytes.Equal(gf.Data(gt), wf.Data(wt)) {
			t.Errorf("tensor %q: data differs", name)
		}
	}
	for i, wf := range want.Shards {
		if !maps.Equal(got.Shards[i].Metadata, wf.Metadata) {
			t.Errorf("%s: metadata %v, want %v", wf.Path(), got.Shards[i].Metadata, wf.Metadata)
		}
	}
	if (got.Index == nil) != (want.Index == nil) {
		t.Fatalf("index present %v, want %v", got.Index != nil, want.Index != nil)
	}
	if want.Index != nil {
		if !maps.Equal(got.Index.WeightMap, want.Index.WeightMap) {
			t.Errorf("weight_map differs:\n got %v\nwant %v", got.Index.WeightMap, want.Index.WeightMap)
		}
		gs, ws := jsonText(got.Index.Metadata["total_size"]), jsonText(want.Index.Metadata["total_size"])
		if gs != ws || gs == "" {
			t.Errorf("total_size %q, want %q", gs, ws)
		}
		if len(got.Index.Metadata) != len(want.Index.Metadata) {
			t.Errorf("index metadata %v, want %v", got.Index.Metadata, want.Index.Metadata)
		}
		for k, v := range want.Index.Metadata {
			if jsonText(got.Index.Metadata[k]) != jsonText(v) {
				t.Errorf("index metadata %q = %v, want %v", k, got.Index.Metadata[k], v)
			}
		}
	}
	if !slices.Equal(got.Files, want.Files) {
		t.Errorf("extra files %q, want %q", got.Files, want.Files)
	}
	for _, name := range want.Files {
		w, _ := os.ReadFile(filepath.Join(want.Dir, name))
		g, err := os.ReadFile(filepath.Join(got.Dir, name))
		if err != nil || !bytes.Equal(g, w) {
			t.Errorf("extra file %s differs (%v)", name, err)
		}
	}
	if !bytes.Equal(got.Config, want.Config) {
		t.Errorf("config.json differs")
	}
}

// jsonText formats a decoded JSON scalar (a json.Number, string or bool)
// for comparison.
func jsonText(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case interface{ String() string }:
		return v.String()
	case string:
		return strconv.Quote(v)
	case bool:
		return strconv.FormatBool(v)
	}
	return "?"
}
