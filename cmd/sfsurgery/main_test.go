package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testdataModel = "../../testdata/tiny-llama-bf16"

// sfs runs the CLI in-process and returns exit code, stdout and stderr.
func sfs(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestInspect(t *testing.T) {
	code, out, errs := sfs(t, "inspect", testdataModel)
	if code != exitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{"LlamaForCausalLM", "shards:       2", "tensors:      39", "model.layers.3.mlp.down_proj.weight"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q", want)
		}
	}
	code, out, _ = sfs(t, "inspect", "--json", testdataModel)
	var info inspectInfo
	if code != exitOK || json.Unmarshal([]byte(out), &info) != nil {
		t.Fatalf("--json: exit %d, output %q", code, out)
	}
	if info.TensorCount != 39 || len(info.Shards) != 2 || info.TotalBytes != 6820352 {
		t.Errorf("--json: %d tensors, %d shards, %d bytes", info.TensorCount, len(info.Shards), info.TotalBytes)
	}
}

// TestMalformedFilesOneLineError runs inspect on every invalid file of
// checkpoint/testdata: each must exit 2 with one line naming the file,
// and never panic.
func TestMalformedFilesOneLineError(t *testing.T) {
	files, _ := filepath.Glob("../../checkpoint/testdata/header/invalid-*.safetensors")
	if len(files) < 20 {
		t.Fatalf("only %d invalid files found", len(files))
	}
	for _, f := range files {
		code, out, errs := sfs(t, "inspect", f)
		if code != exitError {
			t.Errorf("%s: exit %d, want %d", filepath.Base(f), code, exitError)
		}
		if out != "" {
			t.Errorf("%s: stdout %q", filepath.Base(f), out)
		}
		lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "sfsurgery: ") || !strings.Contains(lines[0], filepath.Base(f)) {
			t.Errorf("%s: stderr %q is not one line naming the file", filepath.Base(f), errs)
		}
	}
}

func TestPruneVerifyExitCodes(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if code, _, errs := sfs(t, "prune", testdataModel, "-o", out, "--quiet"); code != exitOK {
		t.Fatalf("prune: exit %d: %s", code, errs)
	}
	code, stdout, _ := sfs(t, "verify", out, "--original", testdataModel)
	if code != exitOK || !strings.Contains(stdout, "PASS") {
		t.Fatalf("verify: exit %d\n%s", code, stdout)
	}
	// The same output again without --force: exit 2, one line.
	code, _, errs := sfs(t, "prune", testdataModel, "-o", out)
	if code != exitError || !strings.Contains(errs, "exists") || strings.Count(errs, "\n") != 1 {
		t.Errorf("existing output: exit %d, stderr %q", code, errs)
	}
	// A corrupted non-target byte: verify exits 1 and names the tensor.
	shard := filepath.Join(out, "model-00001-of-00002.safetensors")
	b, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xFF
	if err := os.WriteFile(shard, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ = sfs(t, "verify", out, "--original", testdataModel, "--quiet")
	if code != exitFailed || !strings.Contains(stdout, "FAIL") {
		t.Errorf("corrupted: exit %d, want %d\n%s", code, exitFailed, stdout)
	}
	// verify of something it cannot read: exit 2.
	if code, _, _ := sfs(t, "verify", filepath.Join(dir, "nope")); code != exitError {
		t.Errorf("missing checkpoint: exit %d, want %d", code, exitError)
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	code, stdout, errs := sfs(t, "prune", testdataModel, "-o", out, "--dry-run", "--format", "bitmask")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(stdout, "28 to prune") || !strings.Contains(stdout, "model.layers.0.mlp.up_proj.compressed") {
		t.Errorf("plan output:\n%s", stdout)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("--dry-run wrote %s", out)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"prune", testdataModel, "--format", "zip"},
		{"prune", testdataModel, "--scope", "ffn"},
		{"prune", testdataModel, "--targets", "("},
		{"prune"},
		{"verify", testdataModel, "--device", "tpu"},
	} {
		code, _, errs := sfs(t, args...)
		if code != exitError || !strings.HasPrefix(errs, "sfsurgery: ") || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := sfs(t, "--version")
	if code != exitOK || !strings.HasPrefix(out, "sfsurgery version ") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
}

func TestMaxShardSize(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "amp")
	if code, _, errs := sfs(t, "prune", testdataModel, "-o", out, "--max-shard-size", "1MB", "-q"); code != exitOK {
		t.Fatalf("prune: exit %d: %s", code, errs)
	}
	shards, _ := filepath.Glob(filepath.Join(out, "model-*.safetensors"))
	if len(shards) < 3 {
		t.Errorf("--max-shard-size 1MB gave %d shards", len(shards))
	}
	if code, stdout, _ := sfs(t, "verify", out, "--original", testdataModel, "-q"); code != exitOK {
		t.Errorf("verify of the resharded output: exit %d\n%s", code, stdout)
	}
	if code, _, errs := sfs(t, "prune", testdataModel, "-o", filepath.Join(dir, "x"), "--max-shard-size", "lots"); code != exitError || !strings.Contains(errs, "max-shard-size") {
		t.Errorf("bad size: exit %d, %q", code, errs)
	}
}
