package main

import (
	"fmt"
	"runtime"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/surgery"
	"github.com/spf13/cobra"
)

func newUnpackCmd() *cobra.Command {
	var out, maxShard string
	var force, quiet bool
	var workers int
	cmd := &cobra.Command{
		Use:   "unpack <checkpoint>",
		Short: "Turn ampere or bitmask output back into dense weights",
		Long: `unpack decodes every P.packed/P.meta (ampere) or P.compressed/P.bitmask
(compressed-tensors sparse-24-bitmask, from sfsurgery or other tools) back
into a dense P.weight. The output is byte-identical to what
'prune --format dense' writes for the same original checkpoint.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeCheckpoint,
		RunE: func(cmd *cobra.Command, args []string) error {
			ck, err := checkpoint.Open(args[0])
			if err != nil {
				return err
			}
			defer ck.Close()
			plan, err := surgery.NewUnpackPlan(ck, toolVersion())
			if err != nil {
				return err
			}
			if err := reshard(plan, maxShard); err != nil {
				return err
			}
			if out == "" {
				out = surgery.DefaultOutput(args[0], "-dense")
			}
			size, err := plan.OutputSize()
			if err != nil {
				return err
			}
			limitMemory()
			bar := newProgress(size, "unpacking", quiet)
			errw := cmd.ErrOrStderr()
			_, err = plan.Write(cmd.Context(), out, checkpoint.WriteOptions{Workers: workers, Force: force, Progress: bar.fn(),
				Stale: func(s checkpoint.Stale) { fmt.Fprintln(errw, "sfsurgery: "+s.String()) }})
			bar.finish()
			if err != nil {
				return writeError(cmd, out, err)
			}
			if !quiet {
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d weights decoded to dense\n", out, len(plan.Targets))
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "output `PATH` (default: <name>-dense in the current directory, named after the model)")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing output: an earlier output or a checkpoint, never a directory holding other files")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar or summary")
	cmd.Flags().StringVar(&maxShard, "max-shard-size", "", "split the output into shards of at most this size (e.g. 5GB) instead of mirroring the input's")
	cmd.Flags().IntVar(&workers, "workers", runtime.GOMAXPROCS(0), "tensors processed at once")
	return cmd
}
