package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// hdrTensor is a tensor to put in a test file.
type hdrTensor struct {
	name  string
	dtype DType
	shape []int64
	data  []byte
}

// hdrBuild returns a safetensors file holding ts, in the order given.
func hdrBuild(ts []hdrTensor, metadata map[string]string) []byte {
	entries := []string{}
	if metadata != nil {
		m, _ := json.Marshal(metadata)
		entries = append(entries, `"__metadata__":`+string(m))
	}
	var data []byte
	for _, t := range ts {
		name, _ := json.Marshal(t.name)
		entries = append(entries, fmt.Sprintf(`%s:{"dtype":%q,"shape":%s,"data_offsets":[%d,%d]}`,
			name, t.dtype, jsonInts(t.shape), len(data), len(data)+len(t.data)))
		data = append(data, t.data...)
	}
	header := "{" + strings.Join(entries, ",") + "}"
	header += strings.Repeat(" ", (8-len(header)%8)%8)
	return hdrFile(header, data)
}

// tensorsOf returns the tensors of the file at path with their data.
func tensorsOf(t *testing.T, path string) ([]hdrTensor, map[string]string) {
	t.Helper()
	f := openTestFile(t, path)
	var ts []hdrTensor
	for _, ti := range f.Tensors {
		ts = append(ts, hdrTensor{ti.Name, ti.DType, ti.Shape, slices.Clone(f.Data(ti))})
	}
	return ts, f.Metadata
}

// copyDir copies the regular files of src into a new temporary directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		hdrWrite(t, dst, e.Name(), b)
	}
	return dst
}

// openTest opens a checkpoint and closes it at the end of the test.
func openTest(t *testing.T, path string) *Checkpoint {
	t.Helper()
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

const (
	shard1 = "model-00001-of-00002.safetensors"
	shard2 = "model-00002-of-00002.safetensors"
)

func TestOpenFixtures(t *testing.T) {
	bf16 := fixturePath(t, "tiny-llama-bf16")
	fp16 := fixturePath(t, "tiny-llama-fp16")
	tests := []struct {
		path    string
		shards  int
		isDir   bool
		indexed bool
		dtype   DType
		size    int64    // TotalSize
		files   []string // Files of a directory
	}{
		{bf16, 2, true, true, BF16, 6820352, []string{"config.json", "generation_config.json"}},
		{filepath.Join(bf16, IndexName), 2, true, true, BF16, 6820352, []string{"config.json", "generation_config.json"}},
		{fp16, 1, true, false, F16, 328832, []string{"config.json"}},
		{filepath.Join(fp16, "model.safetensors"), 1, false, false, F16, 328832, nil},
	}
	var firstNames []string
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			c := openTest(t, tt.path)
			if c.Path != tt.path || len(c.Shards) != tt.shards || c.IsDir() != tt.isDir || (c.Index != nil) != tt.indexed {
				t.Errorf("Path %q, %d shards, IsDir %v, Index %v", c.Path, len(c.Shards), c.IsDir(), c.Index != nil)
			}
			if c.Dir != filepath.Dir(filepath.Join(tt.path, "x")) && c.Dir != filepath.Dir(tt.path) {
				t.Errorf("Dir = %q", c.Dir)
			}
			names := c.Names()
			if len(names) != 39 || !slices.IsSorted(names) {
				t.Fatalf("Names: %d, sorted %v; want 39 sorted", len(names), slices.IsSorted(names))
			}
			if firstNames == nil {
				firstNames = names
			} else if !slices.Equal(names, firstNames) {
				t.Errorf("names differ between the fixtures")
			}
			if c.TotalSize() != tt.size {
				t.Errorf("TotalSize = %d, want %d", c.TotalSize(), tt.size)
			}
			for _, name := range names {
				f, ti, ok := c.Lookup(name)
				if got, ok2 := f.Tensor(name); !ok || !ok2 || !equalInfo(got, ti) || ti.DType != tt.dtype {
					t.Errorf("Lookup(%q) = %v, %+v, %v", name, f.Path(), ti, ok)
				}
				if c.Index != nil && filepath.Base(f.Path()) != c.Index.WeightMap[name] {
					t.Errorf("Lookup(%q) in %s, the index says %s", name, f.Path(), c.Index.WeightMap[name])
				}
			}
			if _, _, ok := c.Lookup("missing"); ok {
				t.Error("Lookup(missing) found")
			}
			if !tt.isDir {
				if c.Files != nil || c.Config != nil || c.Architecture() != "" {
					t.Errorf("single file: Files %v, Config %d bytes, Architecture %q", c.Files, len(c.Config), c.Architecture())
				}
				return
			}
			if !slices.Equal(c.Files, tt.files) {
				t.Errorf("Files = %v, want %v", c.Files, tt.files)
			}
			if c.Architecture() != "LlamaForCausalLM" {
				t.Errorf("Architecture = %q", c.Architecture())
			}
			if len(c.Warnings) != 0 {
				t.Errorf("Warnings = %q", c.Warnings)
			}
			if err := c.Close(); err != nil {
				t.Error(err)
			}
			if err := c.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		})
	}
}

// editIndex rewrites the weight map of the index in dir.
func editIndex(t *testing.T, dir string, edit func(map[string]string)) {
	t.Helper()
	var idx struct {
		Metadata  map[string]any    `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	b, err := os.ReadFile(filepath.Join(dir, IndexName))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	edit(idx.WeightMap)
	if b, err = json.Marshal(idx); err != nil {
		t.Fatal(err)
	}
	hdrWrite(t, dir, IndexName, b)
}

// addTensors rewrites the shard dir/shard with extra tensors after its own.
func addTensors(t *testing.T, dir, shard string, extra ...hdrTensor) {
	t.Helper()
	ts, meta := tensorsOf(t, filepath.Join(dir, shard))
	hdrWrite(t, dir, shard, hdrBuild(append(ts, extra...), meta))
}

func TestOpenShardedErrors(t *testing.T) {
	fixture := fixturePath(t, "tiny-llama-bf16")
	norm := hdrTensor{"model.layers.0.input_layernorm.weight", BF16, []int64{256}, make([]byte, 512)} // in shard 1
	extra := hdrTensor{"extra.weight", U8, []int64{3}, []byte{1, 2, 3}}
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		err   error
		want  []string // in the message
	}{
		{"missing shard", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, shard2))
		}, ErrMissingShard, []string{shard2, `tensor "lm_head.weight"`}},
		{"tensor not in its shard", func(t *testing.T, dir string) {
			editIndex(t, dir, func(m map[string]string) { m["model.bogus.weight"] = shard1 })
		}, ErrIndex, []string{shard1, `tensor "model.bogus.weight"`}},
		{"tensor in the other shard", func(t *testing.T, dir string) {
			editIndex(t, dir, func(m map[string]string) { m["lm_head.weight"] = shard1 })
		}, ErrIndex, []string{shard1, `tensor "lm_head.weight"`, "it is in " + shard2}},
		{"tensor in two shards", func(t *testing.T, dir string) {
			addTensors(t, dir, shard2, norm)
		}, ErrIndex, []string{shard1, shard2, `tensor "` + norm.name + `"`}},
		{"unindexed tensor in two shards", func(t *testing.T, dir string) {
			addTensors(t, dir, shard1, extra)
			addTensors(t, dir, shard2, extra)
		}, ErrIndex, []string{shard1, shard2, `tensor "extra.weight"`}},
		{"bad index", func(t *testing.T, dir string) {
			hdrWrite(t, dir, IndexName, []byte(`{"weight_map":{"a":"../x.safetensors"}}`))
		}, ErrIndex, []string{IndexName, `tensor "a"`}},
		{"corrupt shard", func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, shard2))
			hdrWrite(t, dir, shard2, b[:len(b)-1])
		}, ErrIncompleteBuffer, []string{shard2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyDir(t, fixture)
			tt.setup(t, dir)
			fds := openFDs(t)
			for _, path := range []string{dir, filepath.Join(dir, IndexName)} {
				c, err := Open(path)
				if c != nil || !errors.Is(err, tt.err) {
					t.Fatalf("Open = %v, %v; want %v", c, err, tt.err)
				}
				if _, ok := errors.AsType[*Error](err); !ok {
					t.Errorf("err is %T, want *Error", err)
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
			}
			if got := openFDs(t); got != fds {
				t.Errorf("%d open descriptors after the failed Open, %d before", got, fds)
			}
		})
	}
}

// openFDs counts the process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	e, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count descriptors: %v", err)
	}
	return len(e)
}

// TestOpenShardedWarnings checks what is reported but still opens.
func TestOpenShardedWarnings(t *testing.T) {
	dir := copyDir(t, fixturePath(t, "tiny-llama-bf16"))
	var extra []hdrTensor
	for i := range maxWarnings + 5 {
		extra = append(extra, hdrTensor{fmt.Sprintf("extra.%02d", i), U8, []int64{1}, []byte{byte(i)}})
	}
	addTensors(t, dir, shard2, extra...)
	hdrWrite(t, dir, "model-00003-of-00002.safetensors", hdrBuild(nil, nil))
	c := openTest(t, dir)
	want := []string{}
	for i := range maxWarnings {
		want = append(want, fmt.Sprintf(`tensor "extra.%02d" in %s is not in the index`, i, shard2))
	}
	want = append(want,
		"5 more tensors are not in the index",
		"model-00003-of-00002.safetensors is not named by the index and was not read",
		fmt.Sprintf("the index's total_size is 6820352, the tensors take %d bytes", 6820352+maxWarnings+5))
	if !slices.Equal(c.Warnings, want) {
		t.Errorf("Warnings =\n%s\nwant\n%s", strings.Join(c.Warnings, "\n"), strings.Join(want, "\n"))
	}
	f, ti, ok := c.Lookup("extra.03")
	if !ok || filepath.Base(f.Path()) != shard2 || string(f.Data(ti)) != "\x03" {
		t.Errorf("Lookup(extra.03) = %v, %+v, %v", f, ti, ok)
	}
	if len(c.Names()) != 39+maxWarnings+5 {
		t.Errorf("%d names", len(c.Names()))
	}
}

func TestOpenDirErrors(t *testing.T) {
	one := hdrBuild([]hdrTensor{{"a", U8, []int64{1}, []byte{1}}}, nil)
	tests := []struct {
		name  string
		files map[string][]byte
		path  string // relative to the directory
		err   error
		want  []string
	}{
		{"empty", nil, ".", ErrNotCheckpoint, []string{"no " + IndexName}},
		{"only config", map[string][]byte{"config.json": []byte(`{}`)}, ".", ErrNotCheckpoint, nil},
		{"several weights", map[string][]byte{"a.safetensors": one, "b.safetensors": one}, ".", ErrNotCheckpoint,
			[]string{"a.safetensors, b.safetensors"}},
		{"missing", nil, "nothing.safetensors", fs.ErrNotExist, []string{"nothing.safetensors"}},
		{"not an index", map[string][]byte{"config.json": []byte(`{"model_type":"llama"}`)}, "config.json", ErrIndex,
			[]string{"config.json", "no weight_map"}},
		{"bad json index", map[string][]byte{IndexName: []byte(`{"weight_map":`)}, ".", ErrIndex, []string{IndexName}},
		{"bad weights", map[string][]byte{"model.safetensors": one[:len(one)-1]}, ".", ErrIncompleteBuffer, []string{"model.safetensors"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, b := range tt.files {
				hdrWrite(t, dir, name, b)
			}
			path := filepath.Join(dir, tt.path)
			c, err := Open(path)
			if c != nil || !errors.Is(err, tt.err) {
				t.Fatalf("Open(%s) = %v, %v; want %v", tt.path, c, err, tt.err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestOpenDirListing checks Files and Config of a model directory.
func TestOpenDirListing(t *testing.T) {
	dir := t.TempDir()
	weights := hdrBuild([]hdrTensor{{"w", F16, []int64{2}, []byte{1, 2, 3, 4}}}, map[string]string{"format": "pt"})
	config := []byte(`{"model_type":"llama","architectures":null}`)
	for name, b := range map[string][]byte{
		"model.safetensors": weights, "config.json": config, "tokenizer.json": []byte("{}"),
		"tokenizer_config.json": []byte("{}"), ".hidden": nil, "README.md": []byte("#"),
	} {
		hdrWrite(t, dir, name, b)
	}
	if err := os.Mkdir(filepath.Join(dir, "subdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	target := hdrWrite(t, t.TempDir(), "blob", []byte("linked"))
	if err := os.Symlink(target, filepath.Join(dir, "special_tokens_map.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "gone"), filepath.Join(dir, "dangling.json")); err != nil {
		t.Fatal(err)
	}
	c := openTest(t, dir)
	want := []string{"README.md", "config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"}
	if !slices.Equal(c.Files, want) {
		t.Errorf("Files = %v, want %v", c.Files, want)
	}
	if string(c.Config) != string(config) || c.Architecture() != "llama" || !c.IsDir() || c.Index != nil {
		t.Errorf("Config %q, Architecture %q, IsDir %v, Index %v", c.Config, c.Architecture(), c.IsDir(), c.Index)
	}
	if len(c.Shards) != 1 || c.Shards[0].Path() != filepath.Join(dir, "model.safetensors") || c.TotalSize() != 4 {
		t.Errorf("Shards %v, TotalSize %d", c.Shards, c.TotalSize())
	}
}

func TestArchitecture(t *testing.T) {
	tests := []struct{ config, want string }{
		{`{"architectures":["LlamaForCausalLM"],"model_type":"llama"}`, "LlamaForCausalLM"},
		{`{"architectures":["MistralForCausalLM","Other"]}`, "MistralForCausalLM"},
		{`{"architectures":[],"model_type":"llama"}`, "llama"},
		{`{"architectures":[""],"model_type":"qwen2"}`, "qwen2"},
		{`{"model_type":"gemma"}`, "gemma"},
		{`{}`, ""},
		{`{"architectures":"Llama"}`, ""},
		{`not json`, ""},
		{``, ""},
	}
	for _, tt := range tests {
		c := &Checkpoint{Config: []byte(tt.config)}
		if got := c.Architecture(); got != tt.want {
			t.Errorf("Architecture(%s) = %q, want %q", tt.config, got, tt.want)
		}
	}
	if got := (&Checkpoint{}).Architecture(); got != "" {
		t.Errorf("Architecture without config = %q", got)
	}
}

// shardedTestdata is the small sharded checkpoint of testdata/sharded.
func shardedTestdata() map[string][]byte {
	return map[string][]byte{
		"config.json": []byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama"}` + "\n"),
		shard1: hdrBuild([]hdrTensor{
			{"model.embed_tokens.weight", BF16, []int64{4, 2}, hdrData(16)},
			{"model.layers.0.mlp.up_proj.weight", BF16, []int64{2, 4}, hdrData(16)},
		}, map[string]string{"format": "pt"}),
		shard2: hdrBuild([]hdrTensor{
			{"lm_head.weight", BF16, []int64{4, 2}, hdrData(16)},
			{"model.norm.weight", BF16, []int64{2}, hdrData(4)},
		}, map[string]string{"format": "pt"}),
		IndexName: []byte(`{
  "metadata": {"total_size": 52},
  "weight_map": {
    "lm_head.weight": "` + shard2 + `",
    "model.embed_tokens.weight": "` + shard1 + `",
    "model.layers.0.mlp.up_proj.weight": "` + shard1 + `",
    "model.norm.weight": "` + shard2 + `"
  }
}
`),
	}
}

// TestShardedGolden checks testdata/sharded against shardedTestdata
// (rewrite with -update-header) and opens it.
func TestShardedGolden(t *testing.T) {
	dir := filepath.Join("testdata", "sharded")
	files := shardedTestdata()
	if *updateHeaderGolden {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range files {
			hdrWrite(t, dir, name, b)
		}
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != string(want) {
			t.Fatalf("%s differs from shardedTestdata (%v); run go test -run TestShardedGolden -update-header", name, err)
		}
	}
	c := openTest(t, dir)
	if !reflect.DeepEqual(c.Names(), []string{"lm_head.weight", "model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight", "model.norm.weight"}) ||
		c.TotalSize() != 52 || len(c.Warnings) != 0 || !slices.Equal(c.Files, []string{"config.json"}) {
		t.Errorf("Names %v, TotalSize %d, Warnings %q, Files %v", c.Names(), c.TotalSize(), c.Warnings, c.Files)
	}
}
