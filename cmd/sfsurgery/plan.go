package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sfsurgery/sfsurgery/kernels"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
	"github.com/sfsurgery/sfsurgery/speed"
	"github.com/spf13/cobra"
)

// planFlags are the flags of plan.
type planFlags struct {
	shapes, ms, dtype, limits string
	gpu                       int
	fuse, asJSON              bool
}

func newPlanCmd() *cobra.Command {
	var f planFlags
	cmd := &cobra.Command{
		Use:   "plan [<checkpoint>]",
		Short: "Print the launch records of the sparse kernels for a model's shapes",
		Long: `plan prints, for every projection shape of a checkpoint (or of --shapes)
and every token count M up to 64, the launch of the decode kernel that
SparseMatmul runs there: the PTX module and entry point, grid, block,
cluster, dynamic shared memory, cooperative flag, split-K workspace and
the ordered kernel parameters, and the fallback launch for a driver that
refuses the cooperative launch or the clusters. On an H100 or H200 it
adds the prefill kernel's launches for every M above 64, as ranges of M
with one launch each. An engine that loads the same PTX executes these
records and plans nothing itself (docs/launch.md).

The plans depend on the GPU: plan reads the limits of the GPU at hand, or
takes a named GPU's with --limits (h100, h200, a100, l4) on a machine
without one.`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeCheckpoint,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPlan(cmd, args, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.shapes, "shapes", "", "shapes to plan instead of a checkpoint's: `NxK,...`, OPS=NxK or a model shape, comma-separated")
	fl.BoolVar(&f.fuse, "fuse", false, "plan q,k,v and gate,up stacked per layer (qkv, gate_up), as serving engines run them")
	fl.StringVar(&f.ms, "m", "1-64", "token counts `M,...` (ranges A-B allowed), each at most 64")
	fl.StringVar(&f.dtype, "dtype", "bf16", "bf16 or f16")
	fl.StringVar(&f.limits, "limits", "", "plan for a named `GPU` instead of the one at hand: "+strings.Join(knownGPUs(), ", "))
	fl.IntVar(&f.gpu, "gpu", 0, "CUDA device ordinal")
	fl.BoolVar(&f.asJSON, "json", false, "print the records as JSON")
	_ = cmd.RegisterFlagCompletionFunc("dtype", cobra.FixedCompletions([]string{"bf16", "f16"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("limits", cobra.FixedCompletions(knownGPUs(), cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// knownGPUs lists the names --limits takes.
func knownGPUs() []string {
	var names []string
	for name := range launchplan.KnownLimits() {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// runPlan is plan's RunE.
func runPlan(cmd *cobra.Command, args []string, f planFlags) error {
	shapes, ms, dt, err := parseWorkload(args, f.shapes, f.fuse, f.ms, f.dtype)
	if err != nil {
		return err
	}
	lim, device, err := planLimits(f)
	if err != nil {
		return err
	}
	l, err := speed.PlanLaunches(shapes, ms, dt, lim, device)
	if errors.Is(err, speed.ErrTokensOver) {
		return fmt.Errorf("--m: %w", err)
	}
	if err != nil {
		return err
	}
	l.Tool = "sfsurgery " + toolVersion()
	if f.asJSON {
		return writeJSONTo(cmd.OutOrStdout(), l)
	}
	return l.WriteText(cmd.OutOrStdout())
}

// planLimits returns the limits plan plans with and what they describe:
// the named GPU's, or the GPU at hand's.
func planLimits(f planFlags) (launchplan.Limits, string, error) {
	if f.limits != "" {
		lim, ok := launchplan.KnownLimits()[strings.ToLower(f.limits)]
		if !ok {
			return lim, "", fmt.Errorf("--limits %q: want one of %s", f.limits, strings.Join(knownGPUs(), ", "))
		}
		return lim, strings.ToLower(f.limits) + " (named limits)", nil
	}
	dev, err := kernels.Open(f.gpu)
	if err != nil {
		if errors.Is(err, kernels.ErrUnavailable) {
			return launchplan.Limits{}, "", fmt.Errorf("plan needs the GPU to plan for, or --limits %s: %w", strings.Join(knownGPUs(), "|"), err)
		}
		return launchplan.Limits{}, "", err
	}
	defer dev.Close()
	return dev.Limits(), dev.Info().String(), nil
}
