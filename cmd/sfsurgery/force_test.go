package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"golang.org/x/sys/unix"
)

// TestForceKeepsUserFiles is the user's scenario of issue 25: `prune
// model -o . --force` in a project directory, and -o naming a directory
// that holds a user's files. Both are refused in one line, and nothing
// of the user's is touched.
func TestForceKeepsUserFiles(t *testing.T) {
	in, err := filepath.Abs(testdataModel)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	for name, data := range map[string]string{"train.py": "print('mine')", "src/model.py": "x = 1"} {
		p := filepath.Join(work, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(work)
	for _, out := range []string{".", work, filepath.Dir(work)} {
		code, _, errs := sfs(t, "prune", in, "-o", out, "--force", "--quiet")
		if code != exitError || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "refusing to replace") {
			t.Errorf("-o %s --force: exit %d, stderr %q", out, code, errs)
		}
	}
	proj := filepath.Join(work, "src")
	code, _, errs := sfs(t, "prune", in, "-o", proj, "--force", "--quiet")
	if code != exitError || !strings.Contains(errs, "model.py") {
		t.Errorf("-o a project directory --force: exit %d, stderr %q", code, errs)
	}
	for _, name := range []string{"train.py", "src/model.py"} {
		if _, err := os.Stat(filepath.Join(work, name)); err != nil {
			t.Errorf("%s is gone: %v", name, err)
		}
	}
	// An earlier output is replaced with --force, in another format; an
	// empty directory is written without it.
	out := filepath.Join(work, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--format", "dense"}, {"--format", "bitmask", "--force"}} {
		if code, _, errs := sfs(t, append([]string{"prune", in, "-o", out, "--quiet"}, args...)...); code != exitOK {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
	}
	checkReportMatches(t, out, "bitmask")
}

// checkReportMatches checks that the output's report and its shards'
// manifests name the same format, want.
func checkReportMatches(t *testing.T, out, want string) {
	t.Helper()
	ck, err := checkpoint.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	man, err := format.ReadManifest(ck)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Format string `json:"format"`
	}
	b, err := os.ReadFile(filepath.Join(out, "sfsurgery.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Format != string(man.Format) || (want != "" && rep.Format != want) {
		t.Errorf("the report says %q, the shards %q, want %q", rep.Format, man.Format, want)
	}
}

// TestConcurrentForceRuns starts two prunes of different formats to one
// output at once: the output that remains is whole (its report names the
// format of its shards), and a run that lost says so.
func TestConcurrentForceRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs prunes as processes")
	}
	for i := range 4 {
		dir := t.TempDir()
		out := filepath.Join(dir, "out")
		a, aerr := sfsProcess(t, "prune", testdataModel, "-o", out, "--format", "ampere", "--force", "--quiet")
		b, berr := sfsProcess(t, "prune", testdataModel, "-o", out, "--format", "bitmask", "--force", "--quiet")
		ca, cb := exitCode(a.Wait()), exitCode(b.Wait())
		for _, r := range []struct {
			code int
			err  string
		}{{ca, aerr.String()}, {cb, berr.String()}} {
			if r.code != exitOK && (r.code != exitError || !strings.Contains(r.err, "by someone else")) {
				t.Errorf("run %d: exit %d, stderr %q", i, r.code, r.err)
			}
		}
		if ca != exitOK && cb != exitOK {
			t.Fatalf("run %d: both prunes failed", i)
		}
		checkReportMatches(t, out, "")
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			t.Errorf("run %d: %d entries left beside the output", i, len(entries))
		}
	}
}

// TestPruneWarnsUnindexed checks that prune prints the input's warnings
// on stderr: a weight file the index does not name is carried, and said
// to be.
func TestPruneWarnsUnindexed(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	if err := os.CopyFS(in, os.DirFS(testdataModel)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(in, "model-00002-of-00002.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(in, "consolidated.safetensors"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	code, _, errs := sfs(t, "prune", in, "-o", out, "--quiet")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "sfsurgery: warning: consolidated.safetensors is carried into the output unchanged and not pruned") {
		t.Errorf("stderr %q lacks the warning", errs)
	}
	if _, err := os.Stat(filepath.Join(out, "consolidated.safetensors")); err != nil {
		t.Errorf("the unindexed file was not carried: %v", err)
	}
}

// TestDiskFullSaysNothingWritten prunes onto a file system too small for
// the output: one line that ends by saying nothing was written at the
// output path, exit 2, and nothing left there. It needs root to mount a
// tiny tmpfs and skips without.
func TestDiskFullSaysNothingWritten(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tiny tmpfs to fill (needs root): %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	out := filepath.Join(dir, "out")
	code, _, errs := sfs(t, "prune", testdataModel, "-o", out, "--quiet")
	if code != exitError || strings.Count(errs, "\n") != 1 || !strings.HasSuffix(errs, "; nothing was written at "+out+"\n") ||
		!strings.Contains(errs, "no space left on device") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
	checkEmpty(t, dir)
}
