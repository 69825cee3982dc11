package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/verify"
	"github.com/spf13/cobra"
)

func newVerifyCmd() *cobra.Command {
	var original, device string
	var asJSON, quiet bool
	var tokens, gpu, workers int
	var seed uint64
	cmd := &cobra.Command{
		Use:   "verify <pruned>",
		Short: "Prove a pruned checkpoint right",
		Long: `verify checks every target of a checkpoint written by prune (or a
compressed-tensors sparse-24-bitmask checkpoint):

  structure   the weight is 2:4 (1:2 for F32 in the ampere format)
  round-trip  the compressed form decodes, with only valid meta nibbles
              (0x4 0x8 0x9 0xC 0xD 0xE) or exactly 2 bitmask bits per group,
              and re-encodes to the same bytes
  rule        with --original: the kept values are bit-exact and are the
              ones the rule picks (for wanda and ria decisions: the
              original's values at the places the output's mask keeps;
              not applicable to sparsegpt's, whose kept values are the
              calibration's); every other tensor is byte-identical
  numeric     Y = W·X from the compressed form equals the pruned dense
              product on --tokens random columns X: in float64 on the CPU
              (tolerance 1e-12 relative), or with --device cuda on the
              GPU's sparse tensor cores against cuBLASLt (f32
              accumulation, tolerance 1e-5). An element that is ±Inf or
              NaN in either product (a weight holding ±Inf, which the rule
              keeps) must be the same in both and is left out of the
              error; the positions of such weights are listed as notes
  mask        for an output of a calibration's decisions (prune
              --decisions), with its report: the mask the output shows
              (its nonzeros, and where a group has fewer than 2 its
              lowest-index zeros) hashes to the SHA-256 of the decisions'
              mask that the report records
  digest      with the prune report (sfsurgery.json, which prune writes):
              every tensor of every shard hashes to the SHA-256 the report
              records, and the two list the same tensors; this sees any
              changed byte without --original

After the verdict, verify lists what it checked and what it did not, with
the reason (no --original, no report, the CPU instead of the GPU).

--tokens takes 1 to ` + strconv.Itoa(verify.MaxTokens) + `: the random activations take
tokens × columns × 8 bytes for each width of weight.

Exit codes: 0 every check passed; 1 a check failed; 2 verify could not
run (bad input or flags, unreadable file, no GPU for --device cuda,
interrupted).`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeCheckpoint,
		RunE: func(cmd *cobra.Command, args []string) error {
			if tokens < 1 || tokens > verify.MaxTokens {
				return fmt.Errorf("--tokens %d: %w: want 1 to %d", tokens, verify.ErrTokens, verify.MaxTokens)
			}
			ck, err := checkpoint.Open(args[0])
			if err != nil {
				return err
			}
			defer ck.Close()
			errw := cmd.ErrOrStderr()
			opt := verify.Options{Device: device, GPU: gpu, Tokens: tokens, Seed: seed,
				TokensSet: cmd.Flags().Changed("tokens"), Workers: workers,
				Notef: func(format string, a ...any) {
					if !quiet && !asJSON {
						fmt.Fprintf(errw, "verify: "+format+"\n", a...)
					}
				}}
			if original != "" {
				orig, err := checkpoint.Open(original)
				if err != nil {
					return err
				}
				defer orig.Close()
				opt.Original = orig
			}
			bar := newProgress(ck.TotalSize(), "verifying", quiet || asJSON)
			opt.Progress = bar.fn()
			if bar != nil {
				opt.ProgressTotal = bar.bar.ChangeMax64
			}
			rep, err := verify.Run(cmd.Context(), ck, opt)
			bar.finish()
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				if err := writeJSONTo(w, rep); err != nil {
					return err
				}
			} else {
				printVerify(w, rep, quiet)
			}
			if !rep.OK {
				return &failedError{}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&original, "original", "", "the `CHECKPOINT` that was pruned: check the rule and every other tensor")
	fl.StringVar(&device, "device", "cpu", "where the numerical check runs: cpu, cuda or auto")
	fl.IntVar(&gpu, "gpu", 0, "CUDA device ordinal")
	fl.IntVar(&tokens, "tokens", 8, fmt.Sprintf("random activation columns (M) of the numerical check, 1 to %d", verify.MaxTokens))
	fl.Uint64Var(&seed, "seed", 1, "seed of the random activations")
	fl.IntVar(&workers, "workers", 0, "tensors checked at once (default: every core on the CPU; up to 16 with a GPU, 4 with --original)")
	fl.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fl.BoolVarP(&quiet, "quiet", "q", false, "print only failures and the verdict")
	_ = cmd.RegisterFlagCompletionFunc("device", cobra.FixedCompletions([]string{"cpu", "cuda", "auto"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// printVerify prints the per-tensor table, the notes, the one-line
// verdict and what was and was not checked (with --quiet only what was
// not).
func printVerify(w io.Writer, rep *verify.Report, quiet bool) {
	fmt.Fprintf(w, "numeric check: %s\n", rep.Device)
	if !quiet || !rep.OK {
		printResults(w, rep, quiet)
	}
	if !quiet {
		for _, r := range rep.Results {
			for _, n := range r.Notes {
				fmt.Fprintf(w, "note: %s: %s\n", r.Tensor, n)
			}
		}
	}
	if rep.OK {
		fmt.Fprintf(w, "PASS: %d checked, all passed (%s)\n", rep.Passed, rep.Format)
	} else {
		fmt.Fprintf(w, "FAIL: %d of %d failed (%s)\n", rep.Failed, rep.Passed+rep.Failed, rep.Format)
	}
	if !quiet {
		for _, c := range rep.Checked {
			fmt.Fprintf(w, "checked: %s\n", c)
		}
	}
	for _, c := range rep.NotChecked {
		fmt.Fprintf(w, "not checked: %s\n", c)
	}
}

// printResults prints the per-tensor table (only failures when quiet).
func printResults(w io.Writer, rep *verify.Report, quiet bool) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENSOR\tFORMAT\tRESULT\tREL ERR\tMAX ABS\tDETAIL")
	for _, r := range rep.Results {
		if quiet && r.OK {
			continue
		}
		verdict, detail := "ok", ""
		if !r.OK {
			verdict = "FAIL"
			for _, c := range r.Checks {
				if !c.OK {
					detail = c.Name + ": " + c.Detail
					break
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2e\t%.2e\t%s\n", r.Tensor, r.Format, verdict, r.RelErr, r.MaxAbs, detail)
	}
	tw.Flush()
	fmt.Fprintln(w)
}
