package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/kernels"
	"github.com/sfsurgery/sfsurgery/speed"
	"github.com/sfsurgery/sfsurgery/surgery"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// benchFlags are the flags of bench.
type benchFlags struct {
	shapes, ms, dtype, out    string
	plot, policy, markdown    string
	report                    string
	asJSON, list, quiet, noLt bool
	fuse                      bool
	share                     float64
	runs, warmup, candidates  int
	sparseCandidates          int
	graphCalls                int
	gpu                       int
	seed                      uint64
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench [<checkpoint>]",
		Short: "Measure 2:4 sparse against dense products on this GPU and derive a dispatch policy",
		Long: `bench times y[M][N] = x[M][K]·Wᵀ for every weight shape of a checkpoint
(its q/k/v/o/gate/up/down projections, unique (out, in) pairs) or of
--shapes, at every token count M, through dense cuBLASLt (the fastest of
its heuristic's first candidates), sfsurgery's own kernels on the stored
packed + meta layout (the fastest of the planner's first launch plans,
each checked: the decode kernels' at M ≤ 64, above them on sm_90a the
wgmma.sp prefill kernel's tiles and splits of K, elsewhere the tiled
mma.sp kernel), and cuSPARSELt when the library is found
(plan and algorithm search once per shape and M). No weights are read:
the weights and activations are random, pruned 2:4. Dense and ours write
y in float32 unless --out-dtype names the --dtype, as a model's
projections write it (a 16-bit y halves the output's bytes and rounds
each value); cuSPARSELt writes the --dtype either way.

Every sparse result is checked against dense before it is timed. Times
are medians after warm-up, with inputs rotated over twice the L2 cache:
a run under a millisecond is captured with the next ones (up to
--graph-calls) into a CUDA graph, as engines replay decode steps, and
its time is a replay's over its runs; longer runs are timed one by one
with CUDA events. The bandwidth and math ceilings are measured in the
same run and each row reports the fraction of its floor it reached.

--shapes takes NxK (out x in), OPS=NxK (q+o=4096x4096) or a model
shape: tinyllama, llama3-8b, llama3-70b.

--fuse measures the matrices a serving engine multiplies instead of the
ones the checkpoint stores: each layer's q, k and v stacked into one qkv
matrix and gate and up into one gate_up matrix, as vLLM and TensorRT-LLM
load them (Llama-3-8B: qkv 6144x4096, gate_up 28672x4096).

--policy writes, per op and shape, the M ranges where a sparse backend
won by at least 5% (dense everywhere else), with the GPU, driver and
library versions. The end-to-end estimate assumes the projections take
--gemm-share of a step (default 0.7, a round middle value for
LLaMA-class models: pass what your profiler shows).

Exit codes: 0 measured; 2 could not run (no GPU, bad flags, I/O error).`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeCheckpoint,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBench(cmd, args, &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.shapes, "shapes", "", "shapes to measure instead of a checkpoint's: `NxK,...`, OPS=NxK or a model shape, comma-separated")
	fl.StringVar(&f.ms, "m", "1,16,64,256,1024,4096,16384", "token counts `M,...`, comma-separated")
	fl.StringVar(&f.dtype, "dtype", "bf16", "bf16 or f16")
	fl.StringVar(&f.out, "out-dtype", "f32",
		"element type dense and sfsurgery's kernels write y in: f32, or the --dtype, as a model's projections write it (cuSPARSELt writes the --dtype either way)")
	fl.BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	fl.StringVar(&f.plot, "plot", "", "write speedup vs M per shape to this .png or .svg `FILE`")
	fl.StringVar(&f.policy, "policy", "", "write the dispatch policy (JSON) to this `FILE`")
	fl.StringVar(&f.markdown, "markdown", "", "write the report as a Markdown document to this `FILE`")
	fl.Float64Var(&f.share, "gemm-share", speed.DefaultGEMMShare, "fraction of step time in these products, for the end-to-end estimate")
	fl.IntVar(&f.runs, "runs", speed.DefaultRuns, "timed runs per row (at least 20)")
	fl.IntVar(&f.warmup, "warmup", speed.DefaultWarmup, "warm-up runs per row")
	fl.IntVar(&f.candidates, "dense-candidates", 4, "cuBLASLt heuristic candidates timed per row")
	fl.IntVar(&f.sparseCandidates, "sparse-candidates", 8,
		"launch plans of sfsurgery's kernels timed per row (the decode kernels up to 64 tokens, the prefill kernel above on sm_90a), the planner's best guesses first; 1: its choice alone")
	fl.IntVar(&f.graphCalls, "graph-calls", speed.DefaultGraphCalls,
		"most runs of a row captured into one CUDA graph and timed as one replay (runs under 1 ms); 1: time each run alone")
	fl.IntVar(&f.gpu, "gpu", 0, "CUDA device ordinal")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the random weights and activations")
	fl.BoolVar(&f.noLt, "no-cusparselt", false, "leave cuSPARSELt out (with --report: render the report without its rows, the policy of an engine that keeps one weight copy)")
	fl.BoolVar(&f.fuse, "fuse", false, "measure q,k,v and gate,up stacked per layer (qkv, gate_up), as serving engines run them")
	fl.BoolVar(&f.list, "list", false, "list the shapes that would be measured and exit (needs no GPU)")
	fl.StringVar(&f.report, "report", "", "render a saved --json report `FILE` (Markdown, plot, policy, text) instead of measuring")
	fl.BoolVar(&f.quiet, "quiet", false, "no progress output")
	_ = cmd.RegisterFlagCompletionFunc("dtype", cobra.FixedCompletions([]string{"bf16", "f16"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("out-dtype", cobra.FixedCompletions([]string{"f32", "bf16", "f16"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// maxRepeats bounds --runs, --warmup and --graph-calls: each timed run
// holds a CUDA event, and a sweep of that many already takes hours.
const maxRepeats = 100000

// runBench is bench's RunE.
func runBench(cmd *cobra.Command, args []string, f *benchFlags) error {
	if f.report != "" {
		if len(args) > 0 || f.shapes != "" || f.fuse || cmd.Flags().Changed("out-dtype") {
			return errors.New("--report renders a saved report: give no checkpoint, --shapes, --fuse or --out-dtype")
		}
		if err := checkOutputs(f); err != nil {
			return err
		}
		rep, err := readReport(f.report)
		if err != nil {
			return err
		}
		if f.noLt {
			rep = rep.Without(speed.CuSPARSELt)
		}
		return writeBenchOutputs(cmd, rep, f)
	}
	shapes, ms, dt, err := parseWorkload(args, f.shapes, f.fuse, f.ms, f.dtype)
	if err != nil {
		return err
	}
	out, err := speed.ParseOutput(f.out, dt)
	if err != nil {
		return fmt.Errorf("--out-dtype: %w", err)
	}
	if f.graphCalls < 1 || f.graphCalls > maxRepeats {
		return fmt.Errorf("--graph-calls %d: want 1 to %d", f.graphCalls, maxRepeats)
	}
	if f.runs > maxRepeats || f.warmup < 0 || f.warmup > maxRepeats {
		return fmt.Errorf("--runs %d, --warmup %d: want at most %d each", f.runs, f.warmup, maxRepeats)
	}
	if f.candidates < 1 || f.sparseCandidates < 1 {
		return fmt.Errorf("--dense-candidates %d, --sparse-candidates %d: want at least 1 each", f.candidates,
			f.sparseCandidates)
	}
	if f.share <= 0 || f.share > 1 {
		return fmt.Errorf("--gemm-share %v: want a fraction in (0, 1]", f.share)
	}
	if err := checkOutputs(f); err != nil {
		return err
	}
	if f.list {
		return speed.WriteShapes(cmd.OutOrStdout(), shapes)
	}
	errw := cmd.ErrOrStderr()
	dev, err := kernels.OpenNotify(f.gpu, func(msg string) {
		if !f.quiet {
			fmt.Fprintln(errw, "bench: "+msg)
		}
	})
	if err != nil {
		if errors.Is(err, kernels.ErrUnavailable) {
			return fmt.Errorf("bench needs a CUDA GPU (sm_80 or newer) to time anything: %w", err)
		}
		return err
	}
	defer dev.Close()
	bar := newCountBar(errw, len(shapes)*len(ms), f.quiet)
	opt := speed.Options{Ms: ms, DType: dt, Output: out, Warmup: f.warmup, Runs: f.runs, DenseCandidates: f.candidates,
		SparseCandidates: f.sparseCandidates, GraphCalls: f.graphCalls,
		GEMMShare: f.share, Seed: f.seed, NoSparseLt: f.noLt, Tool: "sfsurgery " + toolVersion(),
		Command: commandLine(cmd, args), Progress: bar.step,
		Notef: func(format string, a ...any) {
			if !f.quiet {
				bar.printf("bench: "+format, a...)
			}
		}}
	rep, err := speed.Run(cmd.Context(), dev, shapes, opt)
	bar.finish()
	if err != nil {
		return err
	}
	return writeBenchOutputs(cmd, rep, f)
}

// readReport reads a saved --json report.
func readReport(path string) (*speed.Report, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	rep, err := speed.ReadReport(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rep, nil
}

// checkOutputs refuses, before anything is measured, an output file of f
// that could not be written: a --plot that is not .png or .svg, a
// directory that does not exist, a path that is a directory, or two
// outputs (or an output and --report) at one path. A sweep takes minutes;
// its results should not be lost to a typo in a path.
func checkOutputs(f *benchFlags) error {
	if f.plot != "" {
		if ext := strings.ToLower(filepath.Ext(f.plot)); ext != ".png" && ext != ".svg" {
			return fmt.Errorf("--plot %s: want a .png or .svg file", f.plot)
		}
	}
	seen := map[string]string{}
	if f.report != "" {
		seen[filepath.Clean(f.report)] = "--report"
	}
	for _, o := range []struct{ flag, path string }{{"--policy", f.policy}, {"--plot", f.plot}, {"--markdown", f.markdown}} {
		if o.path == "" {
			continue
		}
		clean := filepath.Clean(o.path)
		if other, ok := seen[clean]; ok {
			return fmt.Errorf("%s %s: the same file as %s", o.flag, o.path, other)
		}
		seen[clean] = o.flag
		dir := filepath.Dir(clean)
		st, err := os.Stat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("%s %s: directory %s does not exist", o.flag, o.path, dir)
		case err != nil:
			return fmt.Errorf("%s %s: %w", o.flag, o.path, err)
		case !st.IsDir():
			return fmt.Errorf("%s %s: %s is not a directory", o.flag, o.path, dir)
		}
		if st, err := os.Stat(clean); err == nil && st.IsDir() {
			return fmt.Errorf("%s %s: is a directory", o.flag, o.path)
		}
	}
	return nil
}

// writeBenchOutputs writes the policy, plot and Markdown files that f
// asks for, each atomically (an old file stays whole until the new one
// replaces it), then the report (JSON or text) on stdout. The report is
// printed even when a file could not be written, so that a sweep's
// measurements survive (a --json report renders again with --report);
// the file's error is returned.
func writeBenchOutputs(cmd *cobra.Command, rep *speed.Report, f *benchFlags) error {
	ferr := speed.Documents{Policy: f.policy, Plot: f.plot, Markdown: f.markdown}.Write(cmd.Context(), rep)
	var err error
	if f.asJSON {
		err = writeJSONTo(cmd.OutOrStdout(), rep)
	} else {
		err = speed.WriteText(cmd.OutOrStdout(), rep)
	}
	if ferr != nil {
		return ferr
	}
	return err
}

// benchShapes returns the shapes of the checkpoint argument or of
// --shapes: exactly one of them, stacked as fusion says.
func benchShapes(args []string, spec string, fusion speed.Fusion) ([]speed.Shape, error) {
	switch {
	case len(args) == 1 && spec != "":
		return nil, errors.New("give a checkpoint or --shapes, not both")
	case spec != "":
		return speed.ParseShapes(spec, fusion)
	case len(args) == 1:
		ck, err := checkpoint.Open(args[0])
		if err != nil {
			return nil, err
		}
		defer ck.Close()
		return speed.FromCheckpoint(ck, modelName(args[0]), fusion)
	}
	return nil, errors.New("give a checkpoint or --shapes (e.g. --shapes llama3-8b or --shapes 4096x4096)")
}

// modelName names a checkpoint by its path: the model directory (a Hub
// model's name for a cache snapshot), or the file without its extension.
func modelName(path string) string {
	p := filepath.Clean(path)
	if base := filepath.Base(p); base == checkpoint.IndexName || base == "model.safetensors" {
		p = filepath.Dir(p)
	}
	return surgery.ModelName(p)
}

// commandLine rebuilds the command as the user could type it again.
func commandLine(cmd *cobra.Command, args []string) string {
	parts := []string{cmd.CommandPath()}
	parts = append(parts, args...)
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		if fl.Value.Type() == "bool" {
			parts = append(parts, "--"+fl.Name)
			return
		}
		parts = append(parts, "--"+fl.Name, fl.Value.String())
	})
	return strings.Join(parts, " ")
}

// countBar is bench's progress: a bar on a terminal, else one line per
// step; nothing when quiet.
type countBar struct {
	w     io.Writer
	bar   *progress // nil when w is not a terminal
	quiet bool
	start time.Time
}

// newCountBar returns the progress of total steps on w.
func newCountBar(w io.Writer, total int, quiet bool) *countBar {
	return &countBar{w: w, bar: newBar(w, int64(total), "bench", stepsDone, quiet), quiet: quiet, start: time.Now()}
}

// step records one more step done.
func (c *countBar) step(done, total int, what string) {
	switch {
	case c.quiet:
	case c.bar != nil:
		c.bar.set(int64(done), what)
	default:
		fmt.Fprintf(c.w, "bench: [%d/%d %s] %s\n", done, total, time.Since(c.start).Round(time.Second), what)
	}
}

// printf prints a line above the bar.
func (c *countBar) printf(format string, a ...any) {
	c.bar.clear()
	fmt.Fprintf(c.w, format+"\n", a...)
}

// finish clears the bar.
func (c *countBar) finish() { c.bar.finish() }
