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
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/llama"
	"github.com/sfsurgery/sfsurgery/synth"
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

// buildSynthetic writes a synthetic TinyLlama-shaped checkpoint of at
// least size tensor bytes (whole decoder layers of about 88 MB, no
// embeddings) in 512 MiB shards, as dir.
func buildSynthetic(dir string, size int64) error {
	arch, err := llama.ParseArch("tinyllama")
	if err != nil {
		return err
	}
	specs, err := synth.Tensors(arch, synth.Options{Layers: 1, NoEmbeddings: true})
	if err != nil {
		return err
	}
	var perLayer int64
	for _, s := range specs {
		n, err := checkpoint.TensorSize(s.DType, s.Shape)
		if err != nil {
			return err
		}
		perLayer += n
	}
	layers := int(max(1, (size+perLayer-1)/perLayer))
	return synth.Write(context.Background(), dir, arch, synth.Options{Layers: layers, NoEmbeddings: true, MaxShardBytes: 512 << 20})
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
