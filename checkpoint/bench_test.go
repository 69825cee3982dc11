package checkpoint

import (
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// benchBytesEnv overrides the size of BenchmarkRewrite's checkpoint.
const benchBytesEnv = "SFSURGERY_BENCH_BYTES"

// benchBytes is the tensor bytes of the synthetic checkpoint: 1 GiB
// unless SFSURGERY_BENCH_BYTES says otherwise.
func benchBytes(b *testing.B) int64 {
	s := os.Getenv(benchBytesEnv)
	if s == "" {
		return 1 << 30
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive number of bytes", benchBytesEnv, s)
	}
	return n
}

// noiseSource writes n pseudo-random bytes from seed.
type noiseSource struct {
	n    int64
	seed uint64
}

// WriteTo writes the bytes to w in 1 MiB pieces.
func (s noiseSource) WriteTo(w io.Writer) (int64, error) {
	r := rand.New(rand.NewPCG(s.seed, 1))
	buf := make([]byte, min(s.n, 1<<20))
	var done int64
	for done < s.n {
		b := buf[:min(s.n-done, int64(len(buf)))]
		for i := 0; i+8 <= len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], r.Uint64())
		}
		m, err := w.Write(b)
		done += int64(m)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// buildSynthetic writes a LLaMA-like checkpoint of about size tensor
// bytes as dir: BF16 matrices of 4096 columns, 32 MiB each (the last one
// smaller), in 512 MiB shards with an index.
func buildSynthetic(b *testing.B, dir string, size int64) {
	b.Helper()
	const cols, rowBytes = 4096, 4096 * 2
	const perTensor = 32 << 20
	var specs []TensorSpec
	for i := 0; size > 0; i++ {
		n := min(size, perTensor) / rowBytes * rowBytes
		if n == 0 {
			break
		}
		specs = append(specs, TensorSpec{
			Name:  "model.layers." + strconv.Itoa(i) + ".mlp.weight",
			DType: BF16,
			Shape: []int64{n / rowBytes, cols},
			Src:   noiseSource{n: n, seed: uint64(i)},
		})
		size -= n
	}
	out := &Output{Shards: Reshard(specs, 512<<20), Index: true, Files: []ExtraFile{{Name: "config.json", Data: []byte(`{"model_type":"llama"}`)}}}
	if err := WriteDir(context.Background(), dir, out, nil); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRewrite opens a synthetic checkpoint of SFSURGERY_BENCH_BYTES
// (default 1 GiB) and rewrites it unchanged, fsync included: WriteDir
// with copy_file_range, WriteDir through the generic source path
// (FileRange.WriteTo, pread into pwrite), and WriteFile into one file.
// The page cache holds the input, which the setup has just written.
func BenchmarkRewrite(b *testing.B) {
	size := benchBytes(b)
	in := filepath.Join(b.TempDir(), "in")
	buildSynthetic(b, in, size)
	c, err := Open(in)
	if err != nil {
		b.Fatal(err)
	}
	total := c.TotalSize()
	c.Close()
	for _, mode := range []struct {
		name    string
		file    bool
		generic bool
	}{
		{"dir/copy_file_range", false, false},
		{"dir/generic", false, true},
		{"file/copy_file_range", true, false},
	} {
		b.Run(mode.name, func(b *testing.B) {
			out := filepath.Join(b.TempDir(), "out")
			b.SetBytes(total)
			for b.Loop() {
				c, err := Open(in)
				if err != nil {
					b.Fatal(err)
				}
				o := outputOf(c, mode.generic)
				if mode.file {
					var specs []TensorSpec
					for _, s := range o.Shards {
						specs = append(specs, s.Tensors...)
					}
					err = WriteFile(context.Background(), out, specs, nil, nil)
				} else {
					err = WriteDir(context.Background(), out, o, nil)
				}
				c.Close()
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := os.RemoveAll(out); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkLayout measures the header computation for a checkpoint of
// 1000 tensors.
func BenchmarkLayout(b *testing.B) {
	specs := make([]TensorSpec, 1000)
	for i := range specs {
		specs[i] = TensorSpec{Name: "model.layers." + strconv.Itoa(i) + ".self_attn.q_proj.weight", DType: BF16, Shape: []int64{4096, 4096}}
	}
	for b.Loop() {
		if _, err := FileSize(specs, map[string]string{"format": "pt"}); err != nil {
			b.Fatal(err)
		}
	}
}
