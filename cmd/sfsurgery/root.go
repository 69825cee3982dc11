package main

import (
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3"); when
// empty the module version from the build info is used.
var version = ""

// toolVersion returns the version recorded in outputs and printed by
// --version.
func toolVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "sfsurgery",
		Short: "2:4 sparsity surgery on LLaMA-family safetensors checkpoints",
		Long: `sfsurgery prunes the attention and MLP projections of LLaMA-family
checkpoints (TinyLlama, Llama 2/3, Mistral, Qwen2) to 2:4 sparsity, writes
them as PyTorch/CUTLASS packed values + metadata, compressed-tensors
sparse-24-bitmask or pruned dense weights, and verifies the result on the
CPU and on the GPU's sparse tensor cores.`,
		Version:       toolVersion(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newInspectCmd(),
		newPruneCmd(),
		newUnpackCmd(),
		newVerifyCmd(),
		newSynthCmd(),
		newBenchCmd(),
	)
	return root
}
