package main

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/llama"
	"github.com/sfsurgery/sfsurgery/synth"
	"github.com/spf13/cobra"
)

// newSynthCmd is the hidden generator of synthetic LLaMA-shaped
// checkpoints, for benchmarks and for GPU checks where no real model can
// be downloaded.
func newSynthCmd() *cobra.Command {
	var shape, dtype, out string
	var layers, workers int
	var shardMB int64
	var seed uint64
	var force, noEmb bool
	cmd := &cobra.Command{
		Use:    "synth -o DIR",
		Short:  "Write a synthetic checkpoint with real LLaMA shapes and random weights",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := llama.ParseArch(shape)
			if err != nil {
				return err
			}
			if out == "" {
				return fmt.Errorf("-o DIR is required")
			}
			opt := synth.Options{Layers: layers, DType: checkpoint.DType(strings.ToUpper(dtype)),
				MaxShardBytes: shardMB << 20, Seed: seed, NoEmbeddings: noEmb,
				Write: checkpoint.WriteOptions{Workers: workers, Force: force}}
			return synth.Write(cmd.Context(), out, a, opt)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&shape, "shape", "tinyllama", "model shape: "+strings.Join(llama.ArchNames(), ", "))
	fl.StringVar(&dtype, "dtype", "bf16", "bf16, f16 or f32")
	fl.StringVarP(&out, "output", "o", "", "output directory")
	fl.IntVar(&layers, "layers", 0, "decoder layers (default: the model's)")
	fl.Int64Var(&shardMB, "max-shard-mb", 0, "largest shard in MiB (default 5 GiB)")
	fl.Uint64Var(&seed, "seed", 1, "seed of the weights")
	fl.BoolVar(&force, "force", false, "replace an existing output")
	fl.BoolVar(&noEmb, "no-embeddings", false, "leave out embed_tokens and lm_head")
	fl.IntVar(&workers, "workers", runtime.GOMAXPROCS(0), "tensors written at once")
	return cmd
}
