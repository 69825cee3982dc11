package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/llama"
	"github.com/sfsurgery/sfsurgery/synth"
)

// runMainEnv makes the test binary run the command line instead of the
// tests (see TestMain), so that signal tests can run sfsurgery as a
// process of its own.
const runMainEnv = "SFSURGERY_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	code := m.Run()
	os.RemoveAll(bigModelDir())
	os.Exit(code)
}

// bigModelDir is where bigModel writes, one directory per test process.
func bigModelDir() string {
	return filepath.Join(os.TempDir(), "sfsurgery-signal-test-"+strconv.Itoa(os.Getpid()))
}

// bigModel is a synthetic checkpoint large enough that a one-worker
// prune of it takes a while (four TinyLlama-shaped layers, about 350 MB),
// written once per test binary.
var bigModel = sync.OnceValues(func() (string, error) {
	dir := bigModelDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	a, err := llama.ParseArch("tinyllama")
	if err != nil {
		return "", err
	}
	in := filepath.Join(dir, "in")
	return in, synth.Write(context.Background(), in, a, synth.Options{Layers: 4, DType: checkpoint.BF16, NoEmbeddings: true, Seed: 1})
})

// model returns bigModel's path, skipping in -short runs.
func model(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("writes a 350 MB checkpoint")
	}
	in, err := bigModel()
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// sfsProcess starts sfsurgery with args as a process of its own.
func sfsProcess(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &stderr
}

// waitForTemp waits until a temporary output of base appears in dir.
func waitForTemp(t *testing.T, dir, base string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "."+base+".sfsurgery-tmp-") {
				return filepath.Join(dir, e.Name())
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no temporary output of %s appeared in %s", base, dir)
	return ""
}

// exitCode returns the exit code of a waited-for process, -1 when a
// signal ended it.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestSignalsStopPrune sends SIGINT, SIGTERM and SIGHUP to a prune while
// it writes: each exits 2 with one line saying that nothing was written at
// the output path, and nothing is left there or beside it.
func TestSignalsStopPrune(t *testing.T) {
	in := model(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			cmd, stderr := sfsProcess(t, "prune", in, "-o", out, "--workers", "1", "--quiet")
			waitForTemp(t, dir, "out")
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			code := exitCode(cmd.Wait())
			want := "sfsurgery: interrupted; nothing was written at " + out + "\n"
			if code != exitError || stderr.String() != want {
				t.Errorf("exit %d, stderr %q; want exit %d, %q", code, stderr.String(), exitError, want)
			}
			checkEmpty(t, dir)
		})
	}
}

// checkEmpty fails unless dir has no entries.
func checkEmpty(t *testing.T, dir string) {
	t.Helper()
	checkEmptyAfter(t, dir, "")
}

// checkEmptyAfter is checkEmpty with what ran there named in the errors.
func checkEmptyAfter(t *testing.T, dir, after string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left in %s%s: %s", dir, after, e.Name())
	}
}

// TestKilledPruneCleanedUp kills a prune (SIGKILL, as a crash or a power
// cut would stop it): its temporary directory stays, and the next prune
// to the same output removes it, says so, and succeeds.
func TestKilledPruneCleanedUp(t *testing.T) {
	in := model(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cmd, _ := sfsProcess(t, "prune", in, "-o", out, "--workers", "1", "--quiet")
	tmp := waitForTemp(t, dir, "out")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if _, err := os.Stat(tmp); err != nil {
		t.Fatalf("the killed run's temporary directory is gone already: %v", err)
	}
	code, _, errs := sfs(t, "prune", testdataModel, "-o", out, "--quiet")
	if code != exitOK {
		t.Fatalf("the next prune: exit %d: %s", code, errs)
	}
	want := "sfsurgery: removed " + tmp + ", left by process " + strconv.Itoa(cmd.Process.Pid) + ", which is no longer running\n"
	if errs != want {
		t.Errorf("stderr %q, want %q", errs, want)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary directory is still there: %v", err)
	}
}

// TestInterruptAnyMoment interrupts prunes of the shipped checkpoint at
// spread-out moments: each run either exits 0 with the whole output, its
// report included, or exits 2 with nothing at the output path (or, when
// the signal comes before the process installed its handlers, dies of it
// having written nothing).
func TestInterruptAnyMoment(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a dozen prunes")
	}
	for i := range 12 {
		dir := t.TempDir()
		out := filepath.Join(dir, "out")
		cmd, stderr := sfsProcess(t, "prune", testdataModel, "-o", out, "--quiet")
		time.Sleep(time.Duration(i) * 3 * time.Millisecond)
		cmd.Process.Signal(syscall.SIGINT)
		code := exitCode(cmd.Wait())
		switch code {
		case exitOK:
			if _, err := os.Stat(filepath.Join(out, "sfsurgery.json")); err != nil {
				t.Errorf("run %d: exit 0 but the report is missing: %v", i, err)
			}
			if stderr.Len() != 0 {
				t.Errorf("run %d: exit 0 with stderr %q", i, stderr.String())
			}
			os.RemoveAll(out)
		case exitError:
			if !strings.HasPrefix(stderr.String(), "sfsurgery: interrupted") {
				t.Errorf("run %d: exit 2 with stderr %q", i, stderr.String())
			}
		case -1:
			// The signal came before the handlers were installed: the
			// process ended at once, before it could write anything.
		default:
			t.Errorf("run %d: exit %d, stderr %q", i, code, stderr.String())
		}
		checkEmptyAfter(t, dir, fmt.Sprintf(" by run %d (exit %d, stderr %q)", i, code, stderr.String()))
	}
}

// TestSignalStopsVerify interrupts the CPU numerical check of a large
// verify: it stops with exit 2 and says only that it was interrupted
// (verify writes nothing, so it claims nothing about an output path).
func TestSignalStopsVerify(t *testing.T) {
	in := model(t)
	out := filepath.Join(t.TempDir(), "out")
	if code, _, errs := sfs(t, "prune", in, "-o", out, "--quiet"); code != exitOK {
		t.Fatalf("prune: exit %d: %s", code, errs)
	}
	cmd, stderr := sfsProcess(t, "verify", out, "--tokens", "1024", "--quiet")
	time.Sleep(300 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	stop := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	defer stop.Stop()
	code := exitCode(cmd.Wait())
	if code != exitError || stderr.String() != "sfsurgery: interrupted\n" {
		t.Errorf("exit %d, stderr %q; want exit %d, %q", code, stderr.String(), exitError, "sfsurgery: interrupted\n")
	}
}
