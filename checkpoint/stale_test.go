package checkpoint

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// deadOwner returns the owner of a process that has ended: one started
// and waited for here.
func deadOwner(t *testing.T) owner {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "exit 0")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start a process: %v", err)
	}
	pid := cmd.Process.Pid
	start, _ := processStart(pid)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if unix.Kill(pid, 0) != unix.ESRCH {
		t.Skipf("process %d still exists after it was waited for", pid)
	}
	return owner{host: hostTag(), pid: pid, start: start}
}

// TestCleanStale checks which temporary names of earlier writes a later
// write removes: those of a process that has ended, never those of a
// running one, of another host, of this very process, or without an
// owner.
func TestCleanStale(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	self := currentOwner()
	dead := deadOwner(t)
	reused := self
	reused.start++ // this pid, but not the process that made the name
	foreign := dead
	foreign.host = "00000000"
	if foreign.host == hostTag() {
		foreign.host = "00000001"
	}
	names := map[string]bool{ // name -> removed
		dead.tempPrefix("out", "tmp") + "1":    true,
		dead.tempPrefix("out", "old") + "2":    true,
		reused.tempPrefix("out", "tmp") + "3":  true,
		self.tempPrefix("out", "tmp") + "4":    false,
		foreign.tempPrefix("out", "tmp") + "5": false,
		".out.tmp-123456":                      false,
	}
	for name := range names {
		if err := os.MkdirAll(filepath.Join(dir, name, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	other := dead.tempPrefix("out2", "tmp") + "6" // another output's
	if err := os.Mkdir(filepath.Join(dir, other), 0o755); err != nil {
		t.Fatal(err)
	}
	found, err := CleanStale(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != len(names) {
		t.Errorf("found %d, want %d: %v", len(found), len(names), found)
	}
	for _, s := range found {
		name := filepath.Base(s.Path)
		want, ok := names[name]
		if !ok {
			t.Errorf("found %s, which is not a temporary name of out", name)
			continue
		}
		_, err := os.Stat(s.Path)
		if s.Removed != want || (err == nil) == want {
			t.Errorf("%s: removed %v (exists: %v), want removed %v", name, s.Removed, err == nil, want)
		}
		if !s.Removed && s.Kept == "" {
			t.Errorf("%s: kept without a reason", name)
		}
		if line := s.String(); strings.Contains(line, "\n") || !strings.Contains(line, s.Path) {
			t.Errorf("String() = %q, want one line naming the path", line)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, other)); err != nil {
		t.Errorf("another output's temporary directory was touched: %v", err)
	}
}

// TestWriteCleansStale checks that a write tells opt.Stale what it found
// and removes a dead process's leftovers, for both writers.
func TestWriteCleansStale(t *testing.T) {
	dead := deadOwner(t)
	for _, file := range []bool{false, true} {
		dir := t.TempDir()
		out := filepath.Join(dir, "out")
		left := filepath.Join(dir, dead.tempPrefix("out", "tmp")+"7")
		if err := os.WriteFile(left, make([]byte, 1000), 0o644); err != nil {
			t.Fatal(err)
		}
		var got []Stale
		opt := &WriteOptions{Stale: func(s Stale) { got = append(got, s) }}
		var err error
		if file {
			err = WriteFile(context.Background(), out, []TensorSpec{u8Spec("a", 1)}, nil, opt)
		} else {
			err = WriteDir(context.Background(), out, &Output{Shards: Reshard([]TensorSpec{u8Spec("a", 1)}, 0)}, opt)
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || !got[0].Removed || got[0].PID != dead.pid {
			t.Errorf("file=%v: Stale got %v, want the removal of %s", file, got, left)
		}
		checkDirEntries(t, dir, "out")
	}
}

// TestTempNameRoundTrip checks that every temporary name made is read
// back with its owner, and that names of other outputs are not.
func TestTempNameRoundTrip(t *testing.T) {
	for _, o := range []owner{currentOwner(), {host: "0123abcd", pid: 1, start: 0}, {host: "ffffffff", pid: 4194304, start: 1 << 40}} {
		for _, base := range []string{"out", "model-2of4", "a.b-c", "x-tmp-1-2"} {
			for _, kind := range []string{"tmp", "old"} {
				name := filepath.Base(tempName("/d", o.tempPrefix(base, kind)))
				k, got, ok := parseTempName(name, base)
				if !ok || k != kind || got != o {
					t.Errorf("%s: parsed %v %q %v, want %v %q", name, ok, k, got, o, kind)
				}
				if _, _, ok := parseTempName(name, base+"x"); ok {
					t.Errorf("%s is read as a temporary name of %sx", name, base)
				}
			}
		}
	}
}

// FuzzParseTempName checks that the temporary-name parser never panics
// and accepts only names that it would make itself.
func FuzzParseTempName(f *testing.F) {
	f.Add(".out.sfsurgery-tmp-0123abcd-42-1000-7", "out")
	f.Add(".out.tmp-123", "out")
	f.Add(".out.sfsurgery-old-0123abcd--1-0-0", "out")
	f.Fuzz(func(t *testing.T, name, base string) {
		kind, o, ok := parseTempName(name, base)
		if !ok {
			return
		}
		rest := strings.TrimPrefix(name, o.tempPrefix(base, kind))
		if rest == name || rest == "" || strings.Trim(rest, "0123456789") != "" {
			t.Errorf("%q parsed as %v %q, which does not make it", name, o, kind)
		}
		if _, err := strconv.ParseUint(rest, 10, 64); err != nil {
			t.Errorf("%q: random part %q", name, rest)
		}
	})
}

// TestDigest checks that opt.Digest gets the SHA-256 of every tensor as
// it lies in the output, for every kind of source: a writer, a file copy
// and the members of a group.
func TestDigest(t *testing.T) {
	parent := t.TempDir()
	c := crashInput(t, parent)
	for _, k := range writeKinds() {
		out := filepath.Join(parent, "out-"+k.name)
		g := &pairGroup{a: []byte("abcd"), b: []byte("xy")}
		var mu sync.Mutex
		sums := map[string][sha256.Size]byte{}
		opt := &WriteOptions{Digest: func(name string, sum [sha256.Size]byte) {
			mu.Lock()
			sums[name] = sum
			mu.Unlock()
		}}
		writeWithPair(t, k, out, c, g, opt)
		out2, err := Open(out)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range out2.Shards {
			for _, ti := range f.Tensors {
				n++
				want := sha256.Sum256(f.Data(ti))
				if got, ok := sums[ti.Name]; !ok || got != want {
					t.Errorf("%s: %s: digest %x (given %v), want %x", k.name, ti.Name, got, ok, want)
				}
			}
		}
		if len(sums) != n {
			t.Errorf("%s: %d digests for %d tensors", k.name, len(sums), n)
		}
		out2.Close()
	}
}

// pairGroup is a group of two members with fixed bytes.
type pairGroup struct{ a, b []byte }

// WriteGroup writes a to ws[0] and b to ws[1].
func (g *pairGroup) WriteGroup(ws []io.Writer) error {
	if len(ws) != 2 {
		return errors.New("want 2 writers")
	}
	if _, err := ws[0].Write(g.a); err != nil {
		return err
	}
	_, err := ws[1].Write(g.b)
	return err
}

// writeWithPair writes c's tensors plus both members of g with k.
func writeWithPair(t *testing.T, k writeKind, out string, c *Checkpoint, g *pairGroup, opt *WriteOptions) {
	t.Helper()
	second := TensorSpec{Name: "zz.member1", DType: U8, Shape: []int64{2}, Src: Member{Group: g, Index: 1}}
	first := TensorSpec{Name: "zz.member", DType: U8, Shape: []int64{4}, Src: Member{Group: g, Index: 0}}
	switch k.name {
	case "WriteFile":
		var specs []TensorSpec
		for _, f := range c.Shards {
			specs = append(specs, f.Specs()...)
		}
		if err := WriteFile(context.Background(), out, append(specs, first, second), nil, opt); err != nil {
			t.Fatal(err)
		}
	default:
		o := outputOf(c, false)
		last := &o.Shards[len(o.Shards)-1]
		last.Tensors = append(last.Tensors, first, second)
		if err := WriteDir(context.Background(), out, o, opt); err != nil {
			t.Fatal(err)
		}
	}
}
