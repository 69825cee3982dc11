package checkpoint

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// errBoom is the failure of failingSource.
var errBoom = errors.New("boom")

// failingSource writes half of n bytes, then fails with errBoom.
type failingSource struct{ n int }

// WriteTo writes n/2 bytes to w and fails.
func (s failingSource) WriteTo(w io.Writer) (int64, error) {
	m, err := w.Write(make([]byte, s.n/2))
	if err != nil {
		return int64(m), err
	}
	return int64(m), errBoom
}

// blockingSource writes half of n bytes, closes started, waits until
// release is closed and writes the rest, returning the writer's error.
type blockingSource struct {
	n       int
	started chan struct{}
	release chan struct{}
}

// WriteTo writes to w in two halves with a wait between them.
func (s blockingSource) WriteTo(w io.Writer) (int64, error) {
	m, err := w.Write(make([]byte, s.n/2))
	close(s.started)
	if err != nil {
		return int64(m), err
	}
	<-s.release
	k, err := w.Write(make([]byte, s.n-s.n/2))
	return int64(m + k), err
}

// hashTree returns the SHA-256 of every regular file under root (root
// itself when it is a file), by path relative to root.
func hashTree(t *testing.T, root string) map[string][32]byte {
	t.Helper()
	sums := make(map[string][32]byte)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		sums[rel] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

// crashInput writes a two-shard input checkpoint with random tensors and
// a config.json as parent/in, and opens it.
func crashInput(t *testing.T, parent string) *Checkpoint {
	t.Helper()
	r := rand.New(rand.NewPCG(5, 6))
	specs := randomSpecs(r, 40)
	specs = append(specs, TensorSpec{Name: "big", DType: BF16, Shape: []int64{1024, 1024}, Src: byteSource{data: make([]byte, 2<<20), chunk: 1 << 16}})
	out := &Output{Shards: Reshard(specs, 1<<20), Files: []ExtraFile{{Name: "config.json", Data: []byte(`{"model_type":"llama"}`)}}}
	if len(out.Shards) < 2 {
		t.Fatalf("input has %d shards, want 2 or more", len(out.Shards))
	}
	in := filepath.Join(parent, "in")
	if err := WriteDir(context.Background(), in, out, nil); err != nil {
		t.Fatal(err)
	}
	c, err := Open(in)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// writeKind is WriteFile or WriteDir applied to the tensors of c plus
// extra, with out the output path.
type writeKind struct {
	name  string
	write func(ctx context.Context, out string, c *Checkpoint, extra TensorSpec, opt *WriteOptions) error
}

// writeKinds are the two writers, each given every tensor of c plus extra.
func writeKinds() []writeKind {
	return []writeKind{
		{"WriteFile", func(ctx context.Context, out string, c *Checkpoint, extra TensorSpec, opt *WriteOptions) error {
			var specs []TensorSpec
			for _, f := range c.Shards {
				specs = append(specs, f.Specs()...)
			}
			return WriteFile(ctx, out, append(specs, extra), map[string]string{"format": "pt"}, opt)
		}},
		{"WriteDir", func(ctx context.Context, out string, c *Checkpoint, extra TensorSpec, opt *WriteOptions) error {
			o := outputOf(c, false)
			last := &o.Shards[len(o.Shards)-1]
			last.Tensors = append(last.Tensors, extra)
			return WriteDir(ctx, out, o, opt)
		}},
	}
}

// TestCrashFailingSource checks that a source failing part way leaves no
// output, no temporary files and the inputs as they were.
func TestCrashFailingSource(t *testing.T) {
	for _, k := range writeKinds() {
		for _, workers := range []int{1, 4} {
			t.Run(k.name+"/workers="+strconv.Itoa(workers), func(t *testing.T) {
				parent := t.TempDir()
				c := crashInput(t, parent)
				before := hashTree(t, c.Dir)
				out := filepath.Join(parent, "out")
				extra := TensorSpec{Name: "zz.failing", DType: F32, Shape: []int64{1 << 18}, Src: failingSource{n: 1 << 20}}
				err := k.write(context.Background(), out, c, extra, &WriteOptions{Workers: workers})
				if !errors.Is(err, errBoom) {
					t.Fatalf("%s: %v, want errBoom", k.name, err)
				}
				var e *SourceError
				if !errors.As(err, &e) || e.Tensor != "zz.failing" || !strings.Contains(err.Error(), `"zz.failing"`) {
					t.Errorf("error %v does not name the tensor", err)
				}
				checkDirEntries(t, parent, "in")
				if after := hashTree(t, c.Dir); !maps.Equal(before, after) {
					t.Error("the input changed")
				}
			})
		}
	}
}

// TestCrashCancel checks that a context cancelled part way, while a
// source is blocked or at any byte, leaves no output, no temporary files
// and the inputs as they were.
func TestCrashCancel(t *testing.T) {
	for _, k := range writeKinds() {
		t.Run(k.name+"/blocked source", func(t *testing.T) {
			parent := t.TempDir()
			c := crashInput(t, parent)
			before := hashTree(t, c.Dir)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			src := blockingSource{n: 1 << 20, started: make(chan struct{}), release: make(chan struct{})}
			done := make(chan error, 1)
			go func() {
				extra := TensorSpec{Name: "blocking", DType: U8, Shape: []int64{int64(src.n)}, Src: src}
				done <- k.write(ctx, filepath.Join(parent, "out"), c, extra, &WriteOptions{Workers: 4})
			}()
			<-src.started
			cancel()
			close(src.release)
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("%s: %v, want context.Canceled", k.name, err)
			}
			checkDirEntries(t, parent, "in")
			if after := hashTree(t, c.Dir); !maps.Equal(before, after) {
				t.Error("the input changed")
			}
		})
		// Cancel from the progress callback once a given share of the bytes
		// is written, up to the very last byte.
		for _, share := range []float64{0.01, 0.5, 1} {
			t.Run(k.name+"/at share "+strconv.FormatFloat(share, 'g', -1, 64), func(t *testing.T) {
				parent := t.TempDir()
				c := crashInput(t, parent)
				before := hashTree(t, c.Dir)
				extra := TensorSpec{Name: "tail", DType: U8, Shape: []int64{1000}, Src: byteSource{data: make([]byte, 1000), chunk: 10}}
				total := int64(1000)
				for _, f := range c.Shards {
					total += f.Size() - f.DataOffset
				}
				stop := int64(share * float64(total))
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var written atomic.Int64
				var once sync.Once
				opt := &WriteOptions{Workers: 2, Progress: func(n int64) {
					if written.Add(n) >= stop {
						once.Do(cancel)
					}
				}}
				err := k.write(ctx, filepath.Join(parent, "out"), c, extra, opt)
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("%s cancelled at %d of %d bytes: %v, want context.Canceled", k.name, stop, total, err)
				}
				checkDirEntries(t, parent, "in")
				if after := hashTree(t, c.Dir); !maps.Equal(before, after) {
					t.Error("the input changed")
				}
			})
		}
	}
}

// TestCrashExistingOutput checks ErrExist, ErrOverwriteInput and Force
// against an existing output and against the input itself.
func TestCrashExistingOutput(t *testing.T) {
	for _, k := range writeKinds() {
		t.Run(k.name, func(t *testing.T) {
			parent := t.TempDir()
			c := crashInput(t, parent)
			inputs := hashTree(t, c.Dir)
			out := filepath.Join(parent, "out")
			extra := u8Spec("extra", 1, 2, 3)
			if err := k.write(context.Background(), out, c, extra, nil); err != nil {
				t.Fatal(err)
			}
			first := hashTree(t, out)

			// Existing output, no Force: refused and untouched.
			extra2 := u8Spec("extra", 4, 5, 6)
			if err := k.write(context.Background(), out, c, extra2, nil); !errors.Is(err, ErrExist) {
				t.Errorf("over an existing output: %v, want ErrExist", err)
			}
			if !maps.Equal(first, hashTree(t, out)) {
				t.Error("the existing output changed")
			}

			// The input itself, with or without Force, by the sources or by
			// Protect alone: refused, input untouched.
			for _, target := range []string{c.Dir, c.Shards[0].Path()} {
				for _, force := range []bool{false, true} {
					err := k.write(context.Background(), target, c, extra2, &WriteOptions{Force: force})
					if !errors.Is(err, ErrOverwriteInput) {
						t.Errorf("over the input %s (force %v): %v, want ErrOverwriteInput", target, force, err)
					}
				}
			}
			protected := filepath.Join(parent, "protected")
			if err := os.WriteFile(protected, []byte("keep"), 0o644); err != nil {
				t.Fatal(err)
			}
			err := WriteFile(context.Background(), protected, []TensorSpec{extra2}, nil, &WriteOptions{Force: true, Protect: []string{protected}})
			if !errors.Is(err, ErrOverwriteInput) {
				t.Errorf("over a protected file: %v, want ErrOverwriteInput", err)
			}
			os.Remove(protected)
			if !maps.Equal(inputs, hashTree(t, c.Dir)) {
				t.Error("the input changed")
			}

			// Force replaces the output, leaving nothing else behind.
			if err := k.write(context.Background(), out, c, extra2, &WriteOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
			if maps.Equal(first, hashTree(t, out)) {
				t.Error("Force did not replace the output")
			}
			checkDirEntries(t, parent, "in", "out")
			r, err := Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			f, ti, ok := r.Lookup("extra")
			if !ok || string(f.Data(ti)) != "\x04\x05\x06" {
				t.Errorf("replaced output holds extra = %q", f.Data(ti))
			}
		})
	}
}
