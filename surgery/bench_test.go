package surgery_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/llama"
	"github.com/sfsurgery/sfsurgery/surgery"
	"github.com/sfsurgery/sfsurgery/synth"
)

// BenchmarkPrune prunes a synthetic LLaMA-shaped checkpoint that it
// writes first, side by side with `cp -r` of the same directory.
// SFSURGERY_BENCH_SHAPE (default tinyllama) and SFSURGERY_BENCH_LAYERS
// (default 12, about 1 GiB; 0 for the whole model, e.g. llama3-8b ≈ 16
// GB) choose the checkpoint; SFSURGERY_BENCH_DIR where it goes.
//
//	go test -run '^$' -bench BenchmarkPrune -benchtime 2x ./surgery
func BenchmarkPrune(b *testing.B) {
	shape := os.Getenv("SFSURGERY_BENCH_SHAPE")
	if shape == "" {
		shape = "tinyllama"
	}
	layers := 12
	if s := os.Getenv("SFSURGERY_BENCH_LAYERS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		layers = n
	}
	arch, err := llama.ParseArch(shape)
	if err != nil {
		b.Fatal(err)
	}
	dir := os.Getenv("SFSURGERY_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	in := filepath.Join(dir, "model-"+shape+"-"+strconv.Itoa(layers))
	if _, err := os.Stat(in); err != nil {
		if err := synth.Write(context.Background(), in, arch, synth.Options{Layers: layers, NoEmbeddings: true}); err != nil {
			b.Fatal(err)
		}
	}
	ck, err := checkpoint.Open(in)
	if err != nil {
		b.Fatal(err)
	}
	defer ck.Close()
	size := ck.TotalSize()
	out := filepath.Join(dir, "out")
	b.Run("cp", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			os.RemoveAll(out)
			if err := exec.Command("cp", "-r", in, out).Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, f := range []format.Format{format.Dense, format.Ampere, format.Bitmask} {
		b.Run(string(f), func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				os.RemoveAll(out)
				p, err := surgery.NewPlan(ck, surgery.Options{Format: f, Version: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := p.Write(context.Background(), out, checkpoint.WriteOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	os.RemoveAll(out)
}
