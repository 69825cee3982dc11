package hfcache

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	hashA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	hashB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	hashC = "cccccccccccccccccccccccccccccccccccccccc"
)

// fakeModel writes the cache entry of model org/name under cache as
// huggingface_hub does: files in blobs/, snapshots/<hash>/ of relative
// symbolic links to them, and refs/<revision> holding a hash.
func fakeModel(t *testing.T, cache, org, name string, refs map[string]string, snapshots ...string) string {
	t.Helper()
	repo := filepath.Join(cache, "models--"+org+"--"+name)
	for _, d := range []string{"blobs", "refs"} {
		if err := os.MkdirAll(filepath.Join(repo, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	blob := filepath.Join(repo, "blobs", "0d1e")
	if err := os.WriteFile(blob, []byte(`{"architectures": ["LlamaForCausalLM"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, h := range snapshots {
		snap := filepath.Join(repo, "snapshots", h)
		if err := os.MkdirAll(snap, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", "0d1e"), filepath.Join(snap, "config.json")); err != nil {
			t.Fatal(err)
		}
	}
	for rev, h := range refs {
		ref := filepath.Join(repo, "refs", filepath.FromSlash(rev))
		if err := os.MkdirAll(filepath.Dir(ref), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(ref, []byte(h), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return repo
}

func TestResolve(t *testing.T) {
	cache := t.TempDir()
	repo := fakeModel(t, cache, "TinyLlama", "TinyLlama-1.1B-Chat-v1.0",
		map[string]string{"main": hashA + "\n", "v2": hashB, "refs/pr/1": hashA, "gone": hashC, "junk": "not a hash"},
		hashA, hashB)
	if err := os.WriteFile(filepath.Join(repo, "snapshots", "cccc"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	snap := func(h string) string { return filepath.Join(repo, "snapshots", h) }
	tests := []struct {
		id      string
		want    string
		wantErr error
		msg     string // what the error says, after the cache directory
	}{
		{id: "TinyLlama/TinyLlama-1.1B-Chat-v1.0", want: snap(hashA)},
		{id: "TinyLlama/TinyLlama-1.1B-Chat-v1.0@main", want: snap(hashA)},
		{id: "TinyLlama/TinyLlama-1.1B-Chat-v1.0@v2", want: snap(hashB)},
		{id: "TinyLlama/TinyLlama-1.1B-Chat-v1.0@refs/pr/1", want: snap(hashA)},
		{id: "TinyLlama/TinyLlama-1.1B-Chat-v1.0@" + hashB, want: snap(hashB)},
		{id: "TinyLlama/x", wantErr: ErrNotCached,
			msg: "model TinyLlama/x is not in the Hugging Face cache at " + cache + " (no models--TinyLlama--x)"},
		{id: "TinyLlama/TinyLlama-1.1B-Chat-v1.0@v3", wantErr: ErrNotCached,
			msg: "model TinyLlama/TinyLlama-1.1B-Chat-v1.0@v3 is not in the Hugging Face cache at " + cache + " (no models--TinyLlama--TinyLlama-1.1B-Chat-v1.0/refs/v3)"},
		{id: "TinyLlama/TinyLlama-1.1B-Chat-v1.0@gone", wantErr: ErrNotCached,
			msg: "model TinyLlama/TinyLlama-1.1B-Chat-v1.0@gone is not in the Hugging Face cache at " + cache + " (no models--TinyLlama--TinyLlama-1.1B-Chat-v1.0/snapshots/" + hashC + ", which refs/gone names)"},
		{id: "TinyLlama/TinyLlama-1.1B-Chat-v1.0@" + hashC, wantErr: ErrNotCached,
			msg: "(no models--TinyLlama--TinyLlama-1.1B-Chat-v1.0/snapshots/" + hashC + ")"},
		{id: "TinyLlama/TinyLlama-1.1B-Chat-v1.0@cccc", wantErr: ErrNotCached, msg: "(no models--TinyLlama--TinyLlama-1.1B-Chat-v1.0/refs/cccc)"},
		{id: "TinyLlama/TinyLlama-1.1B-Chat-v1.0@junk", wantErr: ErrBadRef, msg: `refs/junk holds "not a hash", which does not hold a commit hash`},
	}
	for _, tt := range tests {
		id, err := ParseID(tt.id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Resolve(cache, id)
		if tt.wantErr == nil {
			if err != nil || got != tt.want {
				t.Errorf("Resolve(%s) = %q, %v; want %q", tt.id, got, err, tt.want)
			}
			continue
		}
		if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("Resolve(%s): error %v; want %v saying %q", tt.id, err, tt.wantErr, tt.msg)
		}
	}
	// The snapshot's files are links into blobs/, and read through them.
	b, err := os.ReadFile(filepath.Join(snap(hashA), "config.json"))
	if err != nil || !strings.Contains(string(b), "LlamaForCausalLM") {
		t.Errorf("config.json through the snapshot link: %q, %v", b, err)
	}
	// A cache directory that does not exist is a model that is not there.
	if _, err := Resolve(filepath.Join(cache, "nope"), ID{Org: "a", Name: "b"}); !errors.Is(err, ErrNotCached) {
		t.Errorf("missing cache directory: %v", err)
	}
}

func TestDir(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
		err  error
	}{
		{"HF_HUB_CACHE first", map[string]string{"HF_HUB_CACHE": "/hub", "HUGGINGFACE_HUB_CACHE": "/old", "HF_HOME": "/hf", "XDG_CACHE_HOME": "/xdg", "HOME": "/home/u"}, "/hub", nil},
		{"legacy HUGGINGFACE_HUB_CACHE", map[string]string{"HUGGINGFACE_HUB_CACHE": "/old", "HF_HOME": "/hf", "XDG_CACHE_HOME": "/xdg", "HOME": "/home/u"}, "/old", nil},
		{"HF_HOME/hub", map[string]string{"HF_HOME": "/hf", "XDG_CACHE_HOME": "/xdg", "HOME": "/home/u"}, "/hf/hub", nil},
		{"XDG_CACHE_HOME", map[string]string{"XDG_CACHE_HOME": "/xdg", "HOME": "/home/u"}, "/xdg/huggingface/hub", nil},
		{"HOME", map[string]string{"HOME": "/home/u"}, "/home/u/.cache/huggingface/hub", nil},
		{"USERPROFILE without HOME", map[string]string{"USERPROFILE": "/users/u"}, "/users/u/.cache/huggingface/hub", nil},
		{"~ expanded", map[string]string{"HF_HOME": "~/hf", "HOME": "/home/u"}, "/home/u/hf/hub", nil},
		{"~ alone", map[string]string{"HF_HUB_CACHE": "~", "HOME": "/home/u"}, "/home/u", nil},
		{"~user is a name", map[string]string{"HF_HUB_CACHE": "~x/hub", "HOME": "/home/u"}, "~x/hub", nil},
		{"~ without HOME", map[string]string{"HF_HOME": "~/hf"}, "", ErrNoCacheDir},
		{"nothing set", map[string]string{}, "", ErrNoCacheDir},
	}
	for _, tt := range tests {
		got, err := Dir(func(k string) string { return tt.env[k] })
		if got != filepath.FromSlash(tt.want) || !errors.Is(err, tt.err) {
			t.Errorf("%s: Dir = %q, %v; want %q, %v", tt.name, got, err, tt.want, tt.err)
		}
	}
}

func TestLocate(t *testing.T) {
	cache := t.TempDir()
	repo := fakeModel(t, cache, "org", "model", map[string]string{"main": hashA}, hashA)
	t.Chdir(t.TempDir())
	// A local directory org/local, and org/model both local and cached.
	for _, d := range []string{"org/local", "org/model"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"HF_HUB_CACHE": cache}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		arg, want string
		err       error
	}{
		{"org/local", "org/local", nil},
		{"org/model", "org/model", nil}, // an existing path wins over the id
		{"org/model@main", filepath.Join(repo, "snapshots", hashA), nil},
		{"org/other", "", ErrNotCached},
		{"missing/file.safetensors", "missing/file.safetensors", nil},
		{"missing/model.safetensors.index.json", "missing/model.safetensors.index.json", nil},
		{"nothing", "nothing", nil},
		{"a/b/c", "a/b/c", nil},
	}
	for _, tt := range tests {
		got, err := Locate(tt.arg, getenv)
		if got != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("Locate(%q) = %q, %v; want %q, %v", tt.arg, got, err, tt.want, tt.err)
		}
	}
	if err := os.RemoveAll("org/model"); err != nil {
		t.Fatal(err)
	}
	if got, err := Locate("org/model", getenv); err != nil || got != filepath.Join(repo, "snapshots", hashA) {
		t.Errorf("Locate(org/model) without the local directory = %q, %v", got, err)
	}
	env = map[string]string{}
	if _, err := Locate("org/model", getenv); !errors.Is(err, ErrNoCacheDir) {
		t.Errorf("Locate with no cache directory: %v", err)
	}
	if got, err := Locate("org/local", getenv); err != nil || got != "org/local" {
		t.Errorf("Locate of a local path with no cache directory = %q, %v", got, err)
	}
}

func TestSnapshotModel(t *testing.T) {
	tests := []struct {
		path string
		want ID
		ok   bool
	}{
		{"/c/models--TinyLlama--TinyLlama-1.1B-Chat-v1.0/snapshots/" + hashA, ID{"TinyLlama", "TinyLlama-1.1B-Chat-v1.0", hashA}, true},
		{"/c/models--o--n/snapshots/" + hashA + "/", ID{"o", "n", hashA}, true},
		{"models--o--n/snapshots/" + hashA, ID{"o", "n", hashA}, true},
		{"/c/models--o--n/snapshots/main", ID{}, false},
		{"/c/models--o--n/blobs/" + hashA, ID{}, false},
		{"/c/datasets--o--n/snapshots/" + hashA, ID{}, false},
		{"/c/models--n/snapshots/" + hashA, ID{}, false},
		{"/c/models--o--n--x/snapshots/" + hashA, ID{}, false},
		{"/c/models--o--n/snapshots/" + hashA + "/model.safetensors", ID{}, false},
		{"/m/llama", ID{}, false},
		{"", ID{}, false},
	}
	for _, tt := range tests {
		got, ok := SnapshotModel(filepath.FromSlash(tt.path))
		if ok != tt.ok || got != tt.want {
			t.Errorf("SnapshotModel(%q) = %+v, %v; want %+v, %v", tt.path, got, ok, tt.want, tt.ok)
		}
	}
}
