package surgery_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/surgery"
)

// testdataModel is the checkpoint the README command prunes.
const testdataModel = "../testdata/tiny-llama-bf16"

// fixture returns the path of a checkpoint under the repository's
// testdata, failing the test when it is absent.
func fixture(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join("..", "testdata", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("fixture %s missing: %v", name, err)
	}
	return p
}

// prune runs a prune of in into out and returns the report.
func prune(t *testing.T, in, out string, opt surgery.Options, wopt checkpoint.WriteOptions) *format.Report {
	t.Helper()
	ck, err := checkpoint.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if opt.Version == "" {
		opt.Version = "test"
	}
	p, err := surgery.NewPlan(ck, opt)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Write(context.Background(), out, wopt)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// treeHashes returns the SHA-256 of every regular file below dir (or of
// the single file dir), by relative name.
func treeHashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		sum := sha256.Sum256(b)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// bytesSrc is a tensor source holding its bytes.
type bytesSrc []byte

func (b bytesSrc) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b)
	return int64(n), err
}

// tensor is a small tensor for a hand-made checkpoint.
type tensor struct {
	name  string
	dtype checkpoint.DType
	shape []int64
	data  []byte
}

// writeModel writes tensors as one .safetensors file.
func writeModel(t *testing.T, path string, ts []tensor) {
	t.Helper()
	var specs []checkpoint.TensorSpec
	for _, x := range ts {
		specs = append(specs, checkpoint.TensorSpec{Name: x.name, DType: x.dtype, Shape: x.shape, Src: bytesSrc(x.data)})
	}
	if err := checkpoint.WriteFile(context.Background(), path, specs, nil, nil); err != nil {
		t.Fatal(err)
	}
}

// randomBF16 returns n random bf16 values in (-1, 1) as bytes.
func randomBF16(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(float32(rng.Float64()*2-1))>>16))
	}
	return b
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

// fileBytes reads a file or fails.
func fileBytes(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
