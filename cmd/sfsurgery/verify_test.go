package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/verify"
)

func TestVerifyTokensBound(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	if code, _, errs := sfs(t, "prune", testdataModel, "-o", out, "-q"); code != exitOK {
		t.Fatalf("prune: exit %d: %s", code, errs)
	}
	for _, n := range []string{"0", "-3", "1025", "100000000"} {
		code, stdout, errs := sfs(t, "verify", out, "--tokens", n)
		want := "sfsurgery: --tokens " + n + ": token count out of range: want 1 to 1024\n"
		if code != exitError || errs != want || stdout != "" {
			t.Errorf("--tokens %s: exit %d, stderr %q, stdout %q; want exit 2 and %q", n, code, errs, stdout, want)
		}
	}
	if code, stdout, errs := sfs(t, "verify", out, "--tokens", "1", "-q"); code != exitOK {
		t.Errorf("--tokens 1: exit %d\n%s%s", code, stdout, errs)
	}
}

// flipByte flips the low bit of byte off of tensor name of the
// checkpoint dir.
func flipByte(t *testing.T, dir, name string, off int64) {
	t.Helper()
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, info, ok := ck.Lookup(name)
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	path, pos := f.Path(), f.DataOffset+info.Begin+off
	ck.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[pos] ^= 0x01
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyDigestsAndSummary: an edited packed value fails without
// --original, naming the tensor; without the report verify passes and
// says, after the verdict, that it checked neither digests nor the rule.
func TestVerifyDigestsAndSummary(t *testing.T) {
	const packed = "model.layers.2.mlp.up_proj.packed"
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if code, _, errs := sfs(t, "prune", testdataModel, "-o", out, "-q"); code != exitOK {
		t.Fatalf("prune: exit %d: %s", code, errs)
	}
	flipByte(t, out, packed, 1)
	code, stdout, _ := sfs(t, "verify", out, "-q")
	if code != exitFailed || !strings.Contains(stdout, packed) || !strings.Contains(stdout, "digest: shard model-") {
		t.Errorf("edited packed value: exit %d, want %d naming %s\n%s", code, exitFailed, packed, stdout)
	}

	if err := os.Remove(filepath.Join(out, "sfsurgery.json")); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ = sfs(t, "verify", out)
	if code != exitOK {
		t.Fatalf("without the report: exit %d\n%s", code, stdout)
	}
	_, after, ok := strings.Cut(stdout, "PASS: ")
	for _, want := range []string{"\nnot checked: tensor digests: no sfsurgery.json report\n", "\nnot checked: rule against the original: no --original given\n", "\nchecked: numeric: "} {
		if !ok || !strings.Contains(after, want) {
			t.Errorf("after the PASS line, no %q:\n%s", want, stdout)
		}
	}

	code, stdout, _ = sfs(t, "verify", out, "--json")
	var rep verify.Report
	if err := json.Unmarshal([]byte(stdout), &rep); code != exitOK || err != nil {
		t.Fatalf("--json: exit %d, %v", code, err)
	}
	if !strings.Contains(strings.Join(rep.NotChecked, "\n"), "tensor digests: no sfsurgery.json report") || len(rep.Checked) == 0 {
		t.Errorf("--json: checked %q, not checked %q", rep.Checked, rep.NotChecked)
	}
}

// TestVerifyInterrupted: an interrupted verify says only that.
func TestVerifyInterrupted(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	if code, _, errs := sfs(t, "prune", testdataModel, "-o", out, "-q"); code != exitOK {
		t.Fatalf("prune: exit %d: %s", code, errs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr strings.Builder
	code := run(ctx, []string{"verify", out}, &stdout, &stderr)
	if code != exitError || stderr.String() != "sfsurgery: interrupted\n" || stdout.String() != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and only \"interrupted\"", code, stdout.String(), stderr.String())
	}
}
