package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const hubCommit = "0123456789abcdef0123456789abcdef01234567"

// fakeHubModel puts the model directory src into the Hugging Face cache
// at cache as model org/name, laid out as huggingface_hub does: each file
// a blob named by its SHA-256, snapshots/<hubCommit>/ of relative links
// to the blobs, refs/main holding the commit.
func fakeHubModel(t *testing.T, cache, src, org, name string) {
	t.Helper()
	repo := filepath.Join(cache, "models--"+org+"--"+name)
	snap := filepath.Join(repo, "snapshots", hubCommit)
	for _, d := range []string{filepath.Join(repo, "blobs"), filepath.Join(repo, "refs"), snap} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		blob := hex.EncodeToString(sum[:])
		if err := os.WriteFile(filepath.Join(repo, "blobs", blob), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", blob), filepath.Join(snap, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(hubCommit), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hubEnv points every variable the cache directory is found by at fresh
// directories, HF_HUB_CACHE at cache, and makes a fresh directory the
// current one.
func hubEnv(t *testing.T, cache string) string {
	t.Helper()
	model, err := filepath.Abs(testdataModel)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"} {
		t.Setenv(v, "")
	}
	t.Setenv("HOME", t.TempDir())
	t.Setenv("HF_HUB_CACHE", cache)
	t.Chdir(t.TempDir())
	return model
}

// TestHubModelID runs every command that takes a checkpoint on a model
// id resolved in a fake cache, and prune and unpack with their default
// output, which lands in the current directory named after the model.
func TestHubModelID(t *testing.T) {
	cache := t.TempDir()
	model := hubEnv(t, cache)
	fakeHubModel(t, cache, model, "TinyLlama", "TinyLlama-1.1B-Chat-v1.0")
	const id = "TinyLlama/TinyLlama-1.1B-Chat-v1.0"

	code, out, errs := sfs(t, "inspect", id)
	if code != exitOK || !strings.Contains(out, "tensors:      39") || !strings.Contains(out, hubCommit) {
		t.Fatalf("inspect %s: exit %d, stderr %q\n%s", id, code, errs, out)
	}
	if code, _, errs := sfs(t, "prune", id, "-q"); code != exitOK {
		t.Fatalf("prune %s: exit %d: %s", id, code, errs)
	}
	const pruned = "TinyLlama-1.1B-Chat-v1.0-2of4"
	if fi, err := os.Stat(pruned); err != nil || !fi.IsDir() {
		t.Fatalf("prune %s wrote no %s in the current directory: %v", id, pruned, err)
	}
	if matches, _ := filepath.Glob(filepath.Join(cache, "*", "snapshots", "*-2of4")); len(matches) > 0 {
		t.Errorf("prune wrote into the cache: %v", matches)
	}
	for _, args := range [][]string{
		{"verify", pruned, "--original", id, "-q"},
		{"verify", pruned, "--original", id + "@main", "-q"},
		{"verify", pruned, "--original", id + "@" + hubCommit, "-q"},
	} {
		if code, out, errs := sfs(t, args...); code != exitOK || !strings.Contains(out, "PASS") {
			t.Errorf("%v: exit %d, stderr %q\n%s", args, code, errs, out)
		}
	}

	// The pruned model as a cached model of its own: verify, unpack and
	// bench take its id.
	fakeHubModel(t, cache, pruned, "me", "tiny-2of4")
	if code, out, errs := sfs(t, "verify", "me/tiny-2of4", "--original", id, "-q"); code != exitOK || !strings.Contains(out, "PASS") {
		t.Errorf("verify me/tiny-2of4: exit %d, stderr %q\n%s", code, errs, out)
	}
	if code, _, errs := sfs(t, "unpack", "me/tiny-2of4", "-q"); code != exitOK {
		t.Fatalf("unpack me/tiny-2of4: exit %d: %s", code, errs)
	}
	if fi, err := os.Stat("tiny-2of4-dense"); err != nil || !fi.IsDir() {
		t.Errorf("unpack me/tiny-2of4 wrote no tiny-2of4-dense in the current directory: %v", err)
	}
	if code, out, errs := sfs(t, "bench", id, "--list"); code != exitOK || !strings.Contains(out, "N=768    K=256") {
		t.Errorf("bench %s --list: exit %d, stderr %q\n%s", id, code, errs, out)
	}
}

// TestHubModelIDErrors checks that a model id the cache cannot resolve
// is one line, exit 2, naming what is missing and where it looked, and
// that a local path wins over an id of the same spelling.
func TestHubModelIDErrors(t *testing.T) {
	cache := t.TempDir()
	model := hubEnv(t, cache)
	fakeHubModel(t, cache, model, "TinyLlama", "TinyLlama-1.1B-Chat-v1.0")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"inspect", "TinyLlama/x"},
			"sfsurgery: model TinyLlama/x is not in the Hugging Face cache at " + cache + " (no models--TinyLlama--x); " +
				"sfsurgery reads the cache offline: download it first, e.g. with `huggingface-cli download TinyLlama/x`\n"},
		{[]string{"prune", "TinyLlama/TinyLlama-1.1B-Chat-v1.0@v2"},
			"sfsurgery: model TinyLlama/TinyLlama-1.1B-Chat-v1.0@v2 is not in the Hugging Face cache at " + cache +
				" (no models--TinyLlama--TinyLlama-1.1B-Chat-v1.0/refs/v2); sfsurgery reads the cache offline: download it first," +
				" e.g. with `huggingface-cli download TinyLlama/TinyLlama-1.1B-Chat-v1.0 --revision v2`\n"},
		{[]string{"verify", model, "--original", "TinyLlama/x"},
			"sfsurgery: --original: model TinyLlama/x is not in the Hugging Face cache at " + cache + " (no models--TinyLlama--x); " +
				"sfsurgery reads the cache offline: download it first, e.g. with `huggingface-cli download TinyLlama/x`\n"},
		{[]string{"unpack", "TinyLlama/x"}, "(no models--TinyLlama--x)"},
		{[]string{"bench", "TinyLlama/x", "--list"}, "(no models--TinyLlama--x)"},
	}
	for _, tt := range tests {
		code, out, errs := sfs(t, tt.args...)
		if code != exitError || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tt.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q", tt.args, code, out, errs, exitError, tt.want)
		}
	}

	// A local directory spelled like an id wins over the cache.
	if err := os.MkdirAll("TinyLlama", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(model, filepath.Join("TinyLlama", "x")); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := sfs(t, "inspect", "TinyLlama/x"); code != exitOK || !strings.Contains(out, "checkpoint:   TinyLlama/x") {
		t.Errorf("inspect of the local TinyLlama/x: exit %d, stderr %q\n%s", code, errs, out)
	}
}
