package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// u8Spec is a U8 tensor of the given bytes.
func u8Spec(name string, data ...byte) TensorSpec {
	return TensorSpec{Name: name, DType: U8, Shape: []int64{int64(len(data))}, Src: byteSource{data: data}}
}

// TestWriteDirIndex checks the shards and the index, byte for byte in the
// layout Hugging Face writes, and when an index is written at all.
func TestWriteDirIndex(t *testing.T) {
	const wantIndex = `{
  "metadata": {
    "note": "<&>",
    "total_parameters": 6,
    "total_size": 6
  },
  "weight_map": {
    "a": "model-00001-of-00002.safetensors",
    "b": "model-00001-of-00002.safetensors",
    "c": "model-00002-of-00002.safetensors"
  }
}
`
	tests := []struct {
		name      string
		shards    []Shard
		index     bool
		wantIndex string // "" when no index is written
	}{
		{
			name:      "two shards",
			shards:    Reshard([]TensorSpec{u8Spec("b", 1, 2), u8Spec("a", 3), u8Spec("c", 4, 5, 6)}, 3),
			wantIndex: wantIndex,
		},
		{
			name:   "one shard",
			shards: Reshard([]TensorSpec{u8Spec("a", 1)}, 0),
		},
		{
			name:   "one shard, index asked for",
			shards: Reshard([]TensorSpec{u8Spec("a", 1)}, 0),
			index:  true,
			wantIndex: `{
  "metadata": {
    "note": "<&>",
    "total_parameters": 6,
    "total_size": 1
  },
  "weight_map": {
    "a": "model.safetensors"
  }
}
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			out := &Output{
				Shards:        tt.shards,
				Index:         tt.index,
				IndexMetadata: map[string]any{"total_parameters": 6, "total_size": 999, "note": "<&>"},
			}
			if err := WriteDir(context.Background(), dir, out, nil); err != nil {
				t.Fatal(err)
			}
			want := []string{}
			for _, s := range tt.shards {
				want = append(want, s.Name)
				f, err := OpenFile(filepath.Join(dir, s.Name))
				if err != nil {
					t.Fatal(err)
				}
				for _, spec := range s.Tensors {
					ti, ok := f.Tensor(spec.Name)
					if !ok || !bytes.Equal(f.Data(ti), spec.Src.(byteSource).data) {
						t.Errorf("%s: tensor %q missing or wrong", s.Name, spec.Name)
					}
				}
				f.Close()
			}
			got, err := os.ReadFile(filepath.Join(dir, IndexName))
			switch {
			case tt.wantIndex == "" && err == nil:
				t.Errorf("index written for one shard")
			case tt.wantIndex != "":
				want = append(want, IndexName)
				if string(got) != tt.wantIndex {
					t.Errorf("index:\n%s\nwant:\n%s", got, tt.wantIndex)
				}
				if _, err := ParseIndex(got); err != nil {
					t.Errorf("ParseIndex: %v", err)
				}
			}
			checkDirEntries(t, dir, want...)
			checkDirEntries(t, filepath.Dir(dir), "out")
		})
	}
}

// TestWriteDirExtraFiles checks extra files from bytes and from files.
func TestWriteDirExtraFiles(t *testing.T) {
	tmp := t.TempDir()
	from := filepath.Join(tmp, "config.json")
	config := []byte(`{"model_type": "llama"}`)
	if err := os.WriteFile(from, config, 0o640); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "out")
	out := &Output{
		Shards: Reshard([]TensorSpec{u8Spec("a", 1)}, 0),
		Files: []ExtraFile{
			{Name: "config.json", From: from},
			{Name: "README.md", Data: []byte("# hello\n")},
			{Name: "empty.txt", Data: []byte{}},
		},
	}
	if err := WriteDir(context.Background(), dir, out, nil); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]byte{"config.json": config, "README.md": []byte("# hello\n"), "empty.txt": {}} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "config.json")); err != nil || fi.Mode().Perm()&0o007 != 0 {
		t.Errorf("config.json copy does not keep the source's permissions: %v %v", fi.Mode(), err)
	}
	checkDirEntries(t, dir, "README.md", "config.json", "empty.txt", "model.safetensors")
}

// TestWriteDirInvalid checks that a bad Output fails with its sentinel
// and leaves nothing behind.
func TestWriteDirInvalid(t *testing.T) {
	ok := Reshard([]TensorSpec{u8Spec("a", 1)}, 0)
	shard := func(name string, specs ...TensorSpec) Shard { return Shard{Name: name, Tensors: specs} }
	tests := []struct {
		name string
		out  *Output
		want error
	}{
		{"nil output", nil, ErrInvalidFileName},
		{"no shards", &Output{}, ErrInvalidFileName},
		{"shard in a subdirectory", &Output{Shards: []Shard{shard("sub/model.safetensors")}}, ErrInvalidFileName},
		{"shard dot-dot", &Output{Shards: []Shard{shard("..")}}, ErrInvalidFileName},
		{"hidden shard", &Output{Shards: []Shard{shard(".model.safetensors")}}, ErrInvalidFileName},
		{"shard not .safetensors", &Output{Shards: []Shard{shard("model.bin")}}, ErrInvalidFileName},
		{"shard named twice", &Output{Shards: []Shard{shard("a.safetensors"), shard("a.safetensors")}}, ErrInvalidFileName},
		{"extra named as shard", &Output{Shards: ok, Files: []ExtraFile{{Name: "model.safetensors", Data: []byte{}}}}, ErrInvalidFileName},
		{"extra named as index", &Output{Shards: ok, Files: []ExtraFile{{Name: IndexName, Data: []byte{}}}}, ErrInvalidFileName},
		{"extra without content", &Output{Shards: ok, Files: []ExtraFile{{Name: "x"}}}, ErrInvalidFileName},
		{"extra empty name", &Output{Shards: ok, Files: []ExtraFile{{Name: "", Data: []byte{}}}}, ErrInvalidFileName},
		{"extra source missing", &Output{Shards: ok, Files: []ExtraFile{{Name: "x", From: "/nonexistent/x"}}}, os.ErrNotExist},
		{"tensor in two shards", &Output{Shards: []Shard{shard("a.safetensors", u8Spec("t", 1)), shard("b.safetensors", u8Spec("t", 2))}}, ErrInvalidTensorName},
		{"bad spec", &Output{Shards: []Shard{shard("a.safetensors", TensorSpec{Name: "t", DType: "X"})}}, ErrUnknownDType},
		{"index metadata not JSON", &Output{Shards: ok, Index: true, IndexMetadata: map[string]any{"f": func() {}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			err := WriteDir(context.Background(), filepath.Join(parent, "out"), tt.out, nil)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("WriteDir: %v, want %v", err, tt.want)
			}
			checkDirEntries(t, parent)
		})
	}
}

// TestRenameHelpers checks the no-clobber rename and both ways of
// replacing a directory.
func TestRenameHelpers(t *testing.T) {
	tmp := t.TempDir()
	mk := func(name, content string) string {
		p := filepath.Join(tmp, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "f"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	read := func(dir string) string {
		b, _ := os.ReadFile(filepath.Join(dir, "f"))
		return string(b)
	}
	empty := filepath.Join(tmp, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	src := mk("src", "new")
	if err := renameNoReplace(src, empty); !errors.Is(err, os.ErrExist) {
		t.Errorf("renameNoReplace over an empty directory: %v, want ErrExist", err)
	}
	for name, replace := range map[string]func(from, to string) (string, error){"exchange": exchange, "renames": exchangeByRenames} {
		to := mk("to-"+name, "old")
		from := mk("from-"+name, "new")
		old, err := replace(from, to)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if read(to) != "new" || read(old) != "old" {
			t.Errorf("%s: %s holds %q, %s holds %q", name, to, read(to), old, read(old))
		}
	}
	// The fallback moves the old directory back when the second rename fails.
	to := mk("to-fail", "old")
	if _, err := exchangeByRenames(filepath.Join(tmp, "missing"), to); err == nil {
		t.Error("exchangeByRenames from a missing directory succeeded")
	}
	if read(to) != "old" {
		t.Errorf("after a failed replace %s holds %q, want the old contents", to, read(to))
	}
}

// TestCheckProtected checks the output/input relations that are refused
// and one that is not.
func TestCheckProtected(t *testing.T) {
	tmp := t.TempDir()
	in := filepath.Join(tmp, "in")
	file := filepath.Join(in, "model.safetensors")
	if err := os.MkdirAll(in, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(in, filepath.Join(tmp, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(file, filepath.Join(tmp, "hard.safetensors")); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(mustGetwd(t), in)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		out     string
		protect []string
		refused bool
	}{
		{in, []string{in}, true},
		{in + "/", []string{in}, true},
		{filepath.Join(tmp, "link"), []string{in}, true},
		{in, []string{rel}, true},
		{filepath.Join(in, "pruned"), []string{in}, true},
		{filepath.Join(tmp, "link", "new", "deeper"), []string{in}, true},
		{tmp, []string{file}, true},
		{file, []string{file}, true},
		{filepath.Join(tmp, "hard.safetensors"), []string{file}, true},
		{filepath.Join(tmp, "in-pruned"), []string{in}, false},
		{filepath.Join(tmp, "out"), []string{in, file, ""}, false},
		{filepath.Join(in, "other.safetensors"), []string{file}, false},
	}
	for _, tt := range tests {
		err := checkProtected(tt.out, tt.protect)
		if refused := errors.Is(err, ErrOverwriteInput); refused != tt.refused {
			t.Errorf("checkProtected(%q, %q) = %v, want refused %v", tt.out, tt.protect, err, tt.refused)
		}
	}
}

// mustGetwd returns the working directory.
func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// TestWriteDirReplaceKeepsOthers checks that Force replaces only the
// output directory: siblings are untouched and nothing is left over; a
// file the new output does not write is refused unless Replaceable
// names it.
func TestWriteDirReplaceKeepsOthers(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "out")
	sibling := filepath.Join(parent, "out2")
	for _, d := range []string{dir, sibling} {
		if err := WriteDir(context.Background(), d, &Output{Shards: Reshard([]TensorSpec{u8Spec("a", 1)}, 0)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "stale.txt"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &Output{Shards: Reshard([]TensorSpec{u8Spec("a", 2), u8Spec("b", 3)}, 1)}
	if err := WriteDir(context.Background(), dir, out, &WriteOptions{Force: true}); !errors.Is(err, ErrNotReplaceable) || !strings.Contains(err.Error(), "stale.txt") {
		t.Fatalf("Force over a directory holding stale.txt: %v, want ErrNotReplaceable naming it", err)
	}
	checkDirEntries(t, dir, "model.safetensors", "stale.txt")
	if err := WriteDir(context.Background(), dir, out, &WriteOptions{Force: true, Replaceable: []string{"stale.txt"}}); err != nil {
		t.Fatal(err)
	}
	checkDirEntries(t, parent, "out", "out2")
	checkDirEntries(t, dir, "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", IndexName)
	checkDirEntries(t, sibling, "model.safetensors")
	if err := WriteDir(context.Background(), filepath.Join(parent, "out2", "model.safetensors"), out, &WriteOptions{Force: true}); !errors.Is(err, ErrNotReplaceable) || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("WriteDir over a file: %v, want ErrNotReplaceable", err)
	}
}

// TestDiscardTemp holds what a failed write returns about its temporary:
// the write's own error when the temporary is gone, and that error plus
// where the temporary was left when it cannot be removed.
func TestDiscardTemp(t *testing.T) {
	dir := t.TempDir()
	writeErr := &Error{File: "out", Off: -1, Err: ErrExist}

	tmp := filepath.Join(dir, ".out.sfsurgery-tmp-x")
	if err := os.MkdirAll(filepath.Join(tmp, "sub"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "sub", "f"), []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	if got := discardTemp(tmp, writeErr); got != writeErr {
		t.Errorf("removable temporary: got %v, want the write's error itself", got)
	}
	if _, err := os.Lstat(tmp); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the temporary is still there: %v", err)
	}

	// A path below a regular file cannot be removed, whoever runs this.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	stuck := filepath.Join(file, "tmp")
	got := discardTemp(stuck, writeErr)
	if !errors.Is(got, ErrExist) {
		t.Errorf("errors.Is(%v, ErrExist) = false", got)
	}
	if msg := got.Error(); !strings.HasPrefix(msg, writeErr.Error()) || !strings.Contains(msg, stuck) {
		t.Errorf("message %q does not start with the write's error and name %s", msg, stuck)
	}
}
