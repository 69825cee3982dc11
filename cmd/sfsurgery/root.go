package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"

	"github.com/sfsurgery/sfsurgery/hfcache"
	"github.com/spf13/cobra"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3"); when
// empty the version comes from the build information.
var version = ""

// toolVersion returns the version recorded in outputs and printed by
// --version: the link-time version, else buildVersion of the binary's
// build information, else "devel".
func toolVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return buildVersion(bi)
}

// buildVersion derives a version from build information: the main
// module's version unless it is "(devel)" or empty, else the VCS revision
// cut to 12 hex digits with "-dirty" when the tree was modified, else
// "devel".
func buildVersion(bi *debug.BuildInfo) string {
	if bi == nil {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "sfsurgery",
		Short: "2:4 sparsity surgery on LLaMA-family safetensors checkpoints",
		Long: `sfsurgery prunes the attention and MLP projections of LLaMA-family
checkpoints (TinyLlama, Llama 2/3, Mistral, Qwen2) to 2:4 sparsity, writes
them as PyTorch/CUTLASS packed values + metadata, compressed-tensors
sparse-24-bitmask or pruned dense weights, and verifies the result on the
CPU and on the GPU's sparse tensor cores.

A checkpoint is a .safetensors file, a model.safetensors.index.json, a
model directory, or a Hugging Face model id (org/name or
org/name@revision) read from the local Hugging Face cache, offline.`,
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
		newPlanCmd(),
	)
	for _, c := range root.Commands() {
		if takesCheckpoint(c.Name()) {
			resolveModelIDs(c)
		}
	}
	return root
}

// takesCheckpoint reports whether the command's positional arguments are
// checkpoints.
func takesCheckpoint(name string) bool {
	switch name {
	case "inspect", "prune", "unpack", "verify", "bench", "plan":
		return true
	}
	return false
}

// resolveModelIDs makes c's positional arguments and its --original flag,
// when it has one, accept Hugging Face model ids: before c runs, each is
// replaced by the local path locateCheckpoint finds.
func resolveModelIDs(c *cobra.Command) {
	run := c.RunE
	if run == nil {
		return
	}
	c.RunE = func(cmd *cobra.Command, args []string) error {
		args = slices.Clone(args)
		for i, a := range args {
			p, err := locateCheckpoint(a)
			if err != nil {
				return err
			}
			args[i] = p
		}
		if f := cmd.Flags().Lookup("original"); f != nil && f.Changed {
			p, err := locateCheckpoint(f.Value.String())
			if err != nil {
				return fmt.Errorf("--original: %w", err)
			}
			if err := f.Value.Set(p); err != nil {
				return fmt.Errorf("--original %s: %w", p, err)
			}
		}
		return run(cmd, args)
	}
}

// locateCheckpoint returns the local path of a checkpoint argument: the
// argument itself when it exists or is not a model id, else the model's
// snapshot in the Hugging Face cache the environment names.
func locateCheckpoint(arg string) (string, error) {
	p, err := hfcache.Locate(arg, os.Getenv)
	if errors.Is(err, hfcache.ErrNotCached) {
		download := "huggingface-cli download "
		if id, perr := hfcache.ParseID(arg); perr == nil {
			download += id.Repo()
			if id.Revision != "" {
				download += " --revision " + id.Revision
			}
		}
		return "", fmt.Errorf("%w; sfsurgery reads the cache offline: download it first, e.g. with `%s`", err, download)
	}
	return p, err
}
