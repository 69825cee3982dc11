// Command rewrite builds a synthetic checkpoint and times rewriting it,
// unchanged, with package checkpoint; bench/rewrite.sh runs it beside cp.
//
//	rewrite -build DIR [-bytes N]             write a synthetic checkpoint of N tensor bytes
//	rewrite -in DIR -out DIR [-generic|-file] time Open + WriteDir (or WriteFile) of DIR
//
// The rewrite copies every tensor as a FileRange source: with
// copy_file_range, or with -generic through FileRange.WriteTo (pread into
// the writer's pwrite). It prints the time, the throughput in GB/s of
// tensor bytes and the process's peak resident set size (VmHWM).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

func main() {
	build := flag.String("build", "", "write a synthetic checkpoint as this directory")
	size := flag.Int64("bytes", 1<<30, "tensor bytes of the synthetic checkpoint")
	in := flag.String("in", "", "checkpoint to rewrite")
	out := flag.String("out", "", "output directory (or file with -file)")
	generic := flag.Bool("generic", false, "hide the FileRange sources from the writer (no copy_file_range)")
	file := flag.Bool("file", false, "write all tensors into one file with WriteFile")
	workers := flag.Int("workers", 0, "tensors written at once (0: GOMAXPROCS)")
	flag.Parse()
	var err error
	switch {
	case *build != "":
		err = buildSynthetic(*build, *size)
	case *in != "" && *out != "":
		err = rewrite(*in, *out, *generic, *file, *workers)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rewrite:", err)
		os.Exit(1)
	}
}

// noise writes n pseudo-random bytes from seed.
type noise struct {
	n    int64
	seed uint64
}

// WriteTo writes the bytes to w in 1 MiB pieces.
func (s noise) WriteTo(w io.Writer) (int64, error) {
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

// buildSynthetic writes BF16 matrices of 4096 columns, 32 MiB each, in
// 512 MiB shards with an index and a config.json, as dir.
func buildSynthetic(dir string, size int64) error {
	const cols, rowBytes, perTensor = 4096, 4096 * 2, 32 << 20
	var specs []checkpoint.TensorSpec
	for i := 0; size > 0; i++ {
		n := min(size, perTensor) / rowBytes * rowBytes
		if n == 0 {
			break
		}
		specs = append(specs, checkpoint.TensorSpec{
			Name:  "model.layers." + strconv.Itoa(i) + ".mlp.weight",
			DType: checkpoint.BF16,
			Shape: []int64{n / rowBytes, cols},
			Src:   noise{n: n, seed: uint64(i)},
		})
		size -= n
	}
	out := &checkpoint.Output{
		Shards: checkpoint.Reshard(specs, 512<<20),
		Index:  true,
		Files:  []checkpoint.ExtraFile{{Name: "config.json", Data: []byte(`{"model_type":"llama"}` + "\n")}},
	}
	return checkpoint.WriteDir(context.Background(), dir, out, nil)
}

// hidden hides a source's type from the writer.
type hidden struct{ io.WriterTo }

// rewrite opens in and writes it unchanged as out, and reports.
func rewrite(in, out string, generic, file bool, workers int) error {
	start := time.Now()
	c, err := checkpoint.Open(in)
	if err != nil {
		return err
	}
	defer c.Close()
	opt := &checkpoint.WriteOptions{Workers: workers}
	o := &checkpoint.Output{Index: c.Index != nil}
	if c.Index != nil {
		o.IndexMetadata = c.Index.Metadata
	}
	var all []checkpoint.TensorSpec
	for _, f := range c.Shards {
		specs := f.Specs()
		if generic {
			for i := range specs {
				specs[i].Src = hidden{specs[i].Src}
			}
		}
		all = append(all, specs...)
		o.Shards = append(o.Shards, checkpoint.Shard{Name: filepath.Base(f.Path()), Tensors: specs, Metadata: f.Metadata})
	}
	for _, name := range c.Files {
		o.Files = append(o.Files, checkpoint.ExtraFile{Name: name, From: filepath.Join(c.Dir, name)})
	}
	if file {
		err = checkpoint.WriteFile(context.Background(), out, all, nil, opt)
	} else {
		err = checkpoint.WriteDir(context.Background(), out, o, opt)
	}
	if err != nil {
		return err
	}
	d := time.Since(start)
	total := c.TotalSize()
	fmt.Printf("rewrite: %d tensor bytes in %.3f s: %.2f GB/s; peak RSS (VmHWM) %s\n",
		total, d.Seconds(), float64(total)/d.Seconds()/1e9, vmHWM())
	return nil
}

// vmHWM returns the VmHWM line of /proc/self/status, or "unknown".
func vmHWM() string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := bytes.CutPrefix(s.Bytes(), []byte("VmHWM:")); ok {
			return string(bytes.Join(bytes.Fields(v), []byte(" ")))
		}
	}
	return "unknown"
}
