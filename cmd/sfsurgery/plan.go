package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/sfsurgery/sfsurgery/kernels"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
	"github.com/sfsurgery/sfsurgery/speed"
	"github.com/spf13/cobra"
)

// planFlags are the flags of plan.
type planFlags struct {
	shapes, ms, dtype, limits, from, gpuName string
	gpu                                      int
	fuse, asJSON                             bool
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
without one, or limits given as the JSON object a launch document's
"limits" holds (what the serving package passes for the GPU it runs on,
with that GPU's name in --gpu-name, so that planning opens no GPU).

With --from FILE (a launch document from plan, or a policy from bench
--policy, typically one that came with a downloaded checkpoint) plan
prints its own records for the choices FILE makes instead of planning
every M: each of FILE's records must be, field for field, a launch the
planner offers on this GPU for its shape and M (a policy may pick any of
the candidates bench times), and its prefill records must be the
planner's. A file for another GPU, element type or sfsurgery version, or
with any other record, is refused in one line naming the file, the
shape, M and the field, and nothing is printed: the geometry that runs
is always the planner's. The shapes are the checkpoint's or --shapes',
and the token counts FILE's.`,
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
	fl.StringVar(&f.limits, "limits", "", "plan for a named `GPU` instead of the one at hand ("+strings.Join(knownGPUs(), ", ")+"), or for limits given as a JSON object")
	fl.StringVar(&f.gpuName, "gpu-name", "", "with --limits: the `NAME` of the GPU they describe, which a policy read with --from must have been measured on")
	fl.StringVar(&f.from, "from", "", "print the planner's records for the choices of this launch document or policy `FILE`, refusing any record the planner would not make here")
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
	if f.from != "" && cmd.Flags().Changed("m") {
		return errors.New("--m and --from: the token counts are the records' in --from's file")
	}
	shapes, ms, dt, err := parseWorkload(args, f.shapes, f.fuse, f.ms, f.dtype)
	if err != nil {
		return err
	}
	dev, err := planDevice(f)
	if err != nil {
		return err
	}
	dev.DType = dt
	var l *speed.Launches
	if f.from != "" {
		l, err = replan(f.from, shapes, dev)
	} else {
		l, err = speed.PlanLaunches(shapes, ms, dt, dev.Limits, dev.Name)
	}
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

// planDevice returns the device plan plans for: the limits --limits
// names or gives (and the GPU --gpu-name names), or the GPU at hand's
// limits, description and name.
func planDevice(f planFlags) (speed.Device, error) {
	if f.limits != "" {
		lim, desc, err := launchplan.ParseLimits(f.limits)
		if err != nil {
			return speed.Device{}, fmt.Errorf("--limits: %w", err)
		}
		if f.gpuName != "" {
			desc = f.gpuName + " (" + desc + ")"
		}
		return speed.Device{Limits: lim, Name: desc, GPU: f.gpuName}, nil
	}
	if f.gpuName != "" {
		return speed.Device{}, errors.New("--gpu-name names the GPU that --limits describe: give both, or neither to plan for the GPU at hand")
	}
	dev, err := kernels.Open(f.gpu)
	if err != nil {
		if errors.Is(err, kernels.ErrUnavailable) {
			return speed.Device{}, fmt.Errorf("plan needs the GPU to plan for, or --limits %s: %w", strings.Join(knownGPUs(), "|"), err)
		}
		return speed.Device{}, err
	}
	defer dev.Close()
	return speed.Device{Limits: dev.Limits(), Name: dev.Info().String(), GPU: dev.Info().Name}, nil
}

// replan reads the launch document or policy at path (at most
// speed.MaxRecordsFile bytes) and returns the planner's records for its
// choices (speed.Replan).
func replan(path string, shapes []speed.Shape, dev speed.Device) (*speed.Launches, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, speed.MaxRecordsFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > speed.MaxRecordsFile {
		return nil, fmt.Errorf("%s: more than %d bytes: not a launch document or policy", path, speed.MaxRecordsFile)
	}
	l, err := speed.Replan(data, path, shapes, dev)
	if errors.Is(err, speed.ErrNotPlanned) {
		return nil, fmt.Errorf("%w; plan on this GPU instead (sfsurgery plan without --from)", err)
	}
	return l, err
}
