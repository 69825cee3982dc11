package checkpoint

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestForceRefusesForeignDir checks that Force never replaces a directory
// holding what the new output would not re-create: a user's files and
// subdirectories stay, with the weights beside them.
func TestForceRefusesForeignDir(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries map[string]string // name -> contents; a name ending in / is a directory
		ok      bool
	}{
		{"earlier output", map[string]string{"model.safetensors": "", IndexName: "{}", "config.json": "{}"}, true},
		{"weights only", map[string]string{"model-00001-of-00002.safetensors": "", "model-00002-of-00002.safetensors": ""}, true},
		{"replaceable report", map[string]string{"model.safetensors": "", "report.json": "{}"}, true},
		{"user project", map[string]string{"model.safetensors": "", "train.py": "print(1)", "src/": ""}, false},
		{"a subdirectory", map[string]string{"model.safetensors": "", "original/": ""}, false},
		{"a stray file", map[string]string{"notes.txt": "mine"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "out")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, data := range tc.entries {
				p := filepath.Join(dir, name)
				if strings.HasSuffix(name, "/") {
					if err := os.Mkdir(p, 0o755); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			before := hashTree(t, dir)
			out := &Output{Shards: Reshard([]TensorSpec{u8Spec("a", 1)}, 0), Files: []ExtraFile{{Name: "config.json", Data: []byte("{}")}}}
			err := WriteDir(context.Background(), dir, out, &WriteOptions{Force: true, Replaceable: []string{"report.json"}})
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				checkDirEntries(t, dir, "config.json", "model.safetensors")
				return
			}
			if !errors.Is(err, ErrNotReplaceable) {
				t.Fatalf("err = %v, want ErrNotReplaceable", err)
			}
			if strings.Count(err.Error(), "\n") != 0 {
				t.Errorf("error is not one line: %q", err)
			}
			if after := hashTree(t, dir); !maps.Equal(before, after) {
				t.Error("the refused directory changed")
			}
			checkDirEntries(t, parent, "out")
		})
	}
}

// TestForceRefusesWorkingDir checks that neither the working directory
// nor an ancestor of it is ever an output, with or without Force.
func TestForceRefusesWorkingDir(t *testing.T) {
	parent := t.TempDir()
	wd := filepath.Join(parent, "work")
	if err := os.Mkdir(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(wd)
	out := &Output{Shards: Reshard([]TensorSpec{u8Spec("a", 1)}, 0)}
	for _, dir := range []string{".", wd, "..", parent, "/"} {
		for _, force := range []bool{false, true} {
			err := WriteDir(context.Background(), dir, out, &WriteOptions{Force: force})
			if !errors.Is(err, ErrNotReplaceable) {
				t.Errorf("WriteDir(%q, force=%v) = %v, want ErrNotReplaceable", dir, force, err)
			}
		}
	}
	checkDirEntries(t, wd)
	checkDirEntries(t, parent, "work")
}

// TestEmptyDirWithoutForce checks that an existing empty directory takes
// a directory output without Force, and a non-empty one does not.
func TestEmptyDirWithoutForce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := &Output{Shards: Reshard([]TensorSpec{u8Spec("a", 1)}, 0)}
	if err := WriteDir(context.Background(), dir, out, nil); err != nil {
		t.Fatalf("into an empty directory: %v", err)
	}
	checkDirEntries(t, dir, "model.safetensors")
	err := WriteDir(context.Background(), dir, out, nil)
	if !errors.Is(err, ErrExist) || !strings.Contains(err.Error(), "--force") {
		t.Errorf("over a non-empty directory without Force: %v, want ErrExist suggesting --force", err)
	}
	if err := WriteDir(context.Background(), dir, out, &WriteOptions{Force: true}); errors.Is(err, ErrExist) && strings.Contains(err.Error(), "--force") {
		t.Errorf("with Force the error still suggests --force: %v", err)
	}
}

// TestForceFileNotSafetensors checks that a safetensors output replaces
// only a safetensors file.
func TestForceFileNotSafetensors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	if err := os.WriteFile(path, []byte("my notes"), 0o644); err != nil {
		t.Fatal(err)
	}
	specs := []TensorSpec{u8Spec("a", 1)}
	err := WriteFile(context.Background(), path, specs, nil, &WriteOptions{Force: true})
	if !errors.Is(err, ErrNotReplaceable) {
		t.Fatalf("Force over a text file: %v, want ErrNotReplaceable", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "my notes" {
		t.Fatalf("the file changed to %q", b)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(context.Background(), path, specs, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(context.Background(), path, []TensorSpec{u8Spec("b", 2)}, nil, &WriteOptions{Force: true}); err != nil {
		t.Fatalf("Force over a safetensors file: %v", err)
	}
	checkDirEntries(t, dir, "model.safetensors")
}

// gatedSource writes its bytes only once gate is closed, after closing
// started.
type gatedSource struct {
	data          []byte
	started, gate chan struct{}
}

// WriteTo waits for the gate, then writes.
func (s gatedSource) WriteTo(w io.Writer) (int64, error) {
	close(s.started)
	<-s.gate
	n, err := w.Write(s.data)
	return int64(n), err
}

// TestConcurrentWritersOneWins checks that of two writes to one output,
// the one that finishes first wins whole and the other fails, with or
// without Force: a write replaces only what was at the path when it began.
func TestConcurrentWritersOneWins(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing bool
		want     error
	}{
		{"absent at the start", false, ErrExist},
		{"replaced meanwhile", true, ErrNotReplaceable},
	} {
		for _, file := range []bool{false, true} {
			name := tc.name + map[bool]string{false: "/dir", true: "/file"}[file]
			t.Run(name, func(t *testing.T) {
				parent := t.TempDir()
				out := filepath.Join(parent, "out")
				write := func(ctx context.Context, specs []TensorSpec) error {
					if file {
						return WriteFile(ctx, out, specs, nil, &WriteOptions{Force: true})
					}
					return WriteDir(ctx, out, &Output{Shards: Reshard(specs, 0)}, &WriteOptions{Force: true})
				}
				if tc.existing {
					if err := write(context.Background(), []TensorSpec{u8Spec("old", 0)}); err != nil {
						t.Fatal(err)
					}
				}
				slow := gatedSource{data: []byte{1}, started: make(chan struct{}), gate: make(chan struct{})}
				done := make(chan error, 1)
				go func() {
					done <- write(context.Background(), []TensorSpec{{Name: "slow", DType: U8, Shape: []int64{1}, Src: slow}})
				}()
				<-slow.started
				if err := write(context.Background(), []TensorSpec{u8Spec("fast", 2)}); err != nil {
					t.Fatalf("the fast write: %v", err)
				}
				close(slow.gate)
				if err := <-done; !errors.Is(err, tc.want) {
					t.Fatalf("the slow write: %v, want %v", err, tc.want)
				}
				path := out
				if !file {
					path = filepath.Join(out, "model.safetensors")
				}
				f, err := OpenFile(path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if _, ok := f.Tensor("fast"); !ok || len(f.Tensors) != 1 {
					t.Errorf("the output holds %v, want the fast write's", f.Tensors)
				}
				checkDirEntries(t, parent, "out")
			})
		}
	}
}

// TestPutBack holds what install does when what it replaced must stay:
// that goes back to the output path whole, the new output goes, and the
// one-line error says why; when the new output cannot be removed (a
// fake remove that empties it and then fails), it says where the new
// output was left and why, and when the exchange back fails, where each
// of the two is. The output path never holds a part of the new output.
func TestPutBack(t *testing.T) {
	const why = "replaced by someone else while this output was written"
	const head = "out: refusing to replace the output path: " + why
	busy := errors.New("device or resource busy")
	for _, tc := range []struct {
		name    string
		oldGone bool   // nothing at old: the exchange back fails
		fail    bool   // remove empties the new output, then fails
		want    string // how the error starts; NEW is where the new output went
		holds   string // what the output path holds
	}{
		{"removed", false, false, head + "; left as it is", "theirs"},
		{"not removed", false, true, head + "; left as it is; the new output is left at NEW (removing it failed: unlinkat NEW: " + busy.Error() + ")", "theirs"},
		{"exchange fails", true, false, head + "; putting it back failed (exchange ", "ours"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			abs := filepath.Join(parent, "out") // the new output, after install's exchange
			old := filepath.Join(parent, "tmp") // what it replaced
			for dir, data := range map[string]string{abs: "ours", old: "theirs"} {
				if dir == old && tc.oldGone {
					continue
				}
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var removed string // where putBack removed the new output from
			remove := func(p string) error {
				removed = p
				if !tc.fail {
					return os.RemoveAll(p)
				}
				if err := os.Remove(filepath.Join(p, "model.safetensors")); err != nil {
					return err
				}
				return &fs.PathError{Op: "unlinkat", Path: p, Err: busy}
			}
			err := putBack(old, abs, "out", why, remove)
			want := strings.ReplaceAll(tc.want, "NEW", removed)
			if !errors.Is(err, ErrNotReplaceable) || strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error %q: want one line wrapping ErrNotReplaceable, starting %q", err, want)
			}
			switch {
			case tc.oldGone && !strings.HasSuffix(err.Error(), "it is at "+old+" and the new output at out"):
				t.Errorf("error %q does not say where the two are", err)
			case tc.oldGone && removed != "":
				t.Errorf("the exchange failed, yet %s was removed", removed)
			case !tc.oldGone && err.Error() != want:
				t.Errorf("error %q, want %q", err, want)
			}
			if b, err := os.ReadFile(filepath.Join(abs, "model.safetensors")); err != nil || string(b) != tc.holds {
				t.Errorf("the output path holds %q, %v; want %q", b, err, tc.holds)
			}
			checkDirEntries(t, abs, "model.safetensors")
			left := []string{"out"}
			if tc.fail {
				left = append(left, filepath.Base(removed))
			}
			checkDirEntries(t, parent, left...)
		})
	}
}
