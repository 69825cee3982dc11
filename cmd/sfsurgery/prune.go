package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"text/tabwriter"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/decisions"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/surgery"
	"github.com/spf13/cobra"
)

type pruneFlags struct {
	out             string
	format          string
	decisions       string
	targets, ignore []string
	scope           string
	workers         int
	dryRun, asJSON  bool
	quiet, force    bool
	strict          bool
	skipUnsupported bool
	maxShard        string
}

func newPruneCmd() *cobra.Command {
	var f pruneFlags
	cmd := &cobra.Command{
		Use:   "prune <checkpoint>",
		Short: "Prune the projections to 2:4 and write them in a sparse format",
		Long: `prune keeps, in every group of 4 consecutive weights along the input
dimension of the attention (q/k/v/o) and MLP (gate/up/down) projections
(MoE experts and Phi-3's fused qkv_proj/gate_up_proj included, routers
never), the 2 of largest magnitude (ties to the lower index), or with
--decisions the 2 a calibration chose, and writes:

  ampere   P.packed + P.meta + P.shape: PyTorch's CUTLASS semi-structured
           layout byte for byte (out%32==0, in%64==0; others stay dense),
           and sfsurgery's quantization_config, which transformers loads
           after "import sfsurgery" (docs/serve.md)
  bitmask  compressed-tensors sparse-24-bitmask: P.compressed + P.bitmask +
           P.shape and a quantization_config (out%8==0, in%8==0)
  dense    pruned weights in place, loadable by any serving engine

Calibrated pruning (Wanda, RIA, SparseGPT) takes two steps: the Python
package calibrates on a GPU and writes its decisions, and prune writes
them in any of the formats:

  python -m sfsurgery calibrate MODEL --method wanda|ria|sparsegpt \
      --text calib.txt -o MODEL.decisions.safetensors
  sfsurgery prune MODEL --decisions MODEL.decisions.safetensors -o MODEL-2of4

The decisions hold a mask for every target (the same --targets, --ignore
and --scope select them) and nothing else; wanda and ria keep the
original's values, sparsegpt writes its updated ones. Decisions made for
another model, or not 2:4, are refused and nothing is written. F32
weights, 1:2 in the ampere format, need --format bitmask or dense. The
report records the method, the calibration, the decisions file's SHA-256
and each mask's, against which verify checks the output.

Everything else is copied byte for byte, the shard layout is kept, and
nothing appears at the output path until the whole output, its report
sfsurgery.json (with every tensor's SHA-256) included, is written.
--force replaces only an earlier output or a checkpoint, never a
directory holding other files, nor the current directory.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeCheckpoint,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPrune(cmd, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.out, "output", "o", "", "output `PATH` (default: <name>-2of4 in the current directory, named after the model)")
	fl.StringVar(&f.format, "format", "ampere", "output format: ampere, bitmask or dense")
	fl.StringVar(&f.decisions, "decisions", "", "keep what the calibration's decisions `FILE` (python -m sfsurgery calibrate) chose instead of the largest magnitudes")
	fl.StringArrayVar(&f.targets, "targets", nil, "regular expression (`RE`) of tensors to prune (repeatable; default: the attention and MLP projections, MoE experts and fused qkv/gate_up included)")
	fl.StringArrayVar(&f.ignore, "ignore", nil, "regular expression (`RE`) of tensors never to prune (repeatable)")
	fl.StringVar(&f.scope, "scope", "all", "default targets: all, attn or mlp")
	fl.IntVar(&f.workers, "workers", runtime.GOMAXPROCS(0), "tensors processed at once")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the plan and the output size; write nothing")
	fl.BoolVar(&f.asJSON, "json", false, "print the plan or report as JSON")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no progress bar or summary")
	fl.BoolVar(&f.force, "force", false, "replace an existing output: an earlier output or a checkpoint, never a directory holding other files")
	fl.BoolVar(&f.strict, "strict", false, "fail on a target that fails the format's shape guard instead of leaving it dense")
	fl.BoolVar(&f.skipUnsupported, "skip-unsupported", false, "leave targets of an unsupported dtype or rank dense instead of failing")
	fl.StringVar(&f.maxShard, "max-shard-size", "", "split the output into shards of at most this `SIZE` (e.g. 5GB, 500MiB) instead of mirroring the input's")
	_ = cmd.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"ampere", "bitmask", "dense"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("scope", cobra.FixedCompletions([]string{"all", "attn", "mlp"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func runPrune(cmd *cobra.Command, input string, f pruneFlags) error {
	outFormat, err := format.Parse(f.format)
	if err != nil {
		return err
	}
	sel, err := surgery.NewSelector(f.targets, f.ignore, surgery.Scope(f.scope))
	if err != nil {
		return err
	}
	if f.workers < 1 {
		return fmt.Errorf("--workers must be at least 1")
	}
	ck, err := checkpoint.Open(input)
	if err != nil {
		return err
	}
	defer ck.Close()
	var dec *decisions.File
	if f.decisions != "" {
		if dec, err = decisions.Open(f.decisions); err != nil {
			return err
		}
		defer dec.Close()
	}
	plan, err := surgery.NewPlan(ck, surgery.Options{Format: outFormat, Selector: sel, Strict: f.strict,
		SkipUnsupported: f.skipUnsupported, Version: toolVersion(), Decisions: dec})
	if err != nil {
		return err
	}
	if err := reshard(plan, f.maxShard); err != nil {
		return err
	}
	out := f.out
	if out == "" {
		out = surgery.DefaultOutput(input, "-2of4")
	}
	size, err := plan.OutputSize()
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if f.dryRun {
		return printPlan(w, plan, out, size, f.asJSON)
	}
	errw := cmd.ErrOrStderr()
	for _, warn := range plan.Warnings() {
		fmt.Fprintln(errw, "sfsurgery: warning: "+warn)
	}
	limitMemory()
	bar := newProgress(size, "pruning", f.quiet)
	rep, err := plan.Write(cmd.Context(), out, checkpoint.WriteOptions{Workers: f.workers, Force: f.force, Progress: bar.fn(),
		Stale: func(s checkpoint.Stale) { fmt.Fprintln(errw, "sfsurgery: "+s.String()) }})
	bar.finish()
	if de, ok := errors.AsType[*decisions.Error](err); ok && cmd.Context().Err() == nil {
		// Found in the decisions' data as they were read: the one line
		// names the file, the tensor and the place; nothing was written.
		return de
	}
	if err != nil {
		return writeError(cmd, out, err)
	}
	if f.asJSON {
		return writeJSONTo(w, rep)
	}
	if !f.quiet {
		printSummary(w, rep)
	}
	return nil
}

// printPlan prints what prune would do, for --dry-run: the text ends
// with a line saying that nothing was written, the JSON says "dry_run".
func printPlan(w io.Writer, p *surgery.Plan, out string, size int64, asJSON bool) error {
	if asJSON {
		doc := map[string]any{
			"dry_run": true, "input": p.Input.Path, "output": out, "format": p.Options.Format,
			"method": p.Method(), "output_bytes": size, "input_bytes": p.Input.TotalSize(), "targets": p.Targets,
			"not_pruned": p.NotPruned, "warnings": p.Warnings(),
		}
		if d := p.Options.Decisions; d != nil {
			doc["decisions"] = d.Path()
		}
		return writeJSONTo(w, doc)
	}
	fmt.Fprintf(w, "input:   %s (%s of tensors)\n", p.Input.Path, humanBytes(p.Input.TotalSize()))
	fmt.Fprintf(w, "output:  %s (%s, %d bytes)\n", out, humanBytes(size), size)
	fmt.Fprintf(w, "format:  %s\n", p.Options.Format)
	fmt.Fprintf(w, "method:  %s\n", methodLine(p.Method(), p.Options.Decisions))
	fmt.Fprintf(w, "targets: %d to prune, %d left dense, %d projection-like tensors not pruned\n",
		p.Pruned(), len(p.Targets)-p.Pruned(), len(p.NotPruned))
	printNotPruned(w, p.NotPruned)
	for _, warn := range p.Warnings() {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENSOR\tDTYPE\tSHAPE\tACTION")
	for _, t := range p.Targets {
		action := fmt.Sprintf("prune %s -> %v", t.Rule, t.Outputs)
		if t.Skip != "" {
			action = "left dense: " + t.Skip
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", t.Name, t.DType, t.Shape, action)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "\ndry run: nothing was written")
	return err
}

// printSummary prints the end-of-run summary of prune. Projection-like
// tensors that were not pruned are listed with their layer and expert
// numbers folded into N, one line per name and reason.
func printSummary(w io.Writer, r *format.Report) {
	fmt.Fprintf(w, "wrote %s (%s)\n", r.Output, r.Format)
	if d := r.Decisions; d != nil {
		fmt.Fprintf(w, "  method: %s decisions from %s (%d × %d tokens of %s)\n", r.Method, d.File, d.Samples, d.Seqlen, d.Text.File)
	}
	fmt.Fprintf(w, "  pruned %d tensors, %d left dense, %d projection-like tensors not pruned\n",
		r.Pruned, r.Skipped, len(r.NotPruned))
	for _, t := range r.Tensors {
		if t.Skip != "" {
			fmt.Fprintf(w, "    left dense: %s: %s\n", t.Name, t.Skip)
		}
	}
	printNotPruned(w, r.NotPruned)
	fmt.Fprintf(w, "  bytes: %s in, %s out (%.1f%%)\n", humanBytes(r.BytesIn), humanBytes(r.BytesOut),
		100*float64(r.BytesOut)/float64(max(r.BytesIn, 1)))
	fmt.Fprintf(w, "  kept magnitude: %.4f of Σ|w| overall", r.KeptFraction)
	if r.Worst != nil {
		fmt.Fprintf(w, "; worst %.4f in %s", r.Worst.KeptFraction, r.Worst.Name)
	}
	fmt.Fprintln(w)
}

// methodLine describes what chooses the weights kept, for the dry run:
// the magnitude rule, or the decisions file and its calibration.
func methodLine(m format.Method, d *decisions.File) string {
	if d == nil {
		return string(m) + " (the 2 of largest |w| in each group of 4)"
	}
	return fmt.Sprintf("%s decisions from %s (%d × %d tokens of %s; data checked as they are read)",
		m, d.Path(), d.Meta.Samples, d.Meta.Seqlen, d.Meta.Text.File)
}

func writeJSONTo(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printNotPruned lists projection-like tensors that are not targets, with
// their layer and expert numbers folded into N, one line per name and
// reason.
func printNotPruned(w io.Writer, list []format.NotPruned) {
	type group struct{ name, reason string }
	counts := map[group]int{}
	var order []group
	for _, t := range list {
		g := group{surgery.FoldIndices(t.Name), t.Reason}
		if counts[g] == 0 {
			order = append(order, g)
		}
		counts[g]++
	}
	for _, g := range order {
		fmt.Fprintf(w, "    not pruned: %s ×%d: %s\n", g.name, counts[g], g.reason)
	}
}
