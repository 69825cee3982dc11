package verify

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"golang.org/x/sync/errgroup"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/prune24"
)

// ErrNothingToVerify is returned for a checkpoint with neither an
// sfsurgery manifest nor compressed weights.
var ErrNothingToVerify = errors.New("nothing to verify: no sfsurgery manifest and no compressed 2:4 weights")

// Options control Run.
type Options struct {
	// Original is the checkpoint that was pruned; nil skips check 3.
	Original *checkpoint.Checkpoint
	// Device is "cpu", "cuda" or "auto" (GPU when one works, else CPU).
	Device string
	// GPU is the CUDA device ordinal.
	GPU int
	// Tokens is the number of random activation columns (M) of the
	// numerical check, 1 to MaxTokens; 0 without TokensSet is the
	// default. On the CPU the default is 8; on the GPU the check runs
	// M = 1, 13, 64 and 257 unless TokensSet asks for Tokens alone. Run
	// fails with an error wrapping ErrTokens outside that range.
	Tokens int
	// TokensSet says that Tokens was asked for, so that 0 is an error.
	TokensSet bool
	// Seed seeds the random activations.
	Seed uint64
	// Progress, when set, is called (from several goroutines) with the
	// number of bytes checked: the dense bytes of each target as it is
	// checked, and each tensor's bytes as it is hashed.
	Progress func(n int64)
	// ProgressTotal, when set, is called once before the first Progress
	// call with the total that the Progress calls will add up to.
	ProgressTotal func(total int64)
	// Notef, when set, receives notes for the user: that the GPU's
	// kernels are being compiled, when that takes a while.
	Notef func(format string, args ...any)
	// Workers bounds how many tensors are checked at once (0: all cores
	// on the CPU; with a GPU at most 16, or 4 with Original, whose dense
	// copies take host memory).
	Workers int
}

// Check is the outcome of one check of one tensor.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Result is the outcome for one tensor.
type Result struct {
	Tensor string  `json:"tensor"`
	Format string  `json:"format"`
	Checks []Check `json:"checks"`
	// Notes tell the user what was found without failing a check: where
	// the weight holds ±Inf or NaN.
	Notes []string `json:"notes,omitempty"`
	// RelErr is ‖Y_sparse − Y_dense‖_F / ‖Y_dense‖_F and MaxAbs the
	// largest |Y_sparse − Y_dense| of the numerical check.
	RelErr float64 `json:"rel_err"`
	MaxAbs float64 `json:"max_abs_err"`
	OK     bool    `json:"ok"`
}

// Report is the outcome of Run.
type Report struct {
	Checkpoint string `json:"checkpoint"`
	Format     string `json:"format"`
	// Device says where the numerical check ran and why.
	Device    string   `json:"device"`
	Tolerance float64  `json:"tolerance"`
	Results   []Result `json:"results"`
	Passed    int      `json:"passed"`
	Failed    int      `json:"failed"`
	OK        bool     `json:"ok"`
	// Checked says what was checked, one line each; NotChecked what was
	// not, each line with the reason, so that a PASS claims no more than
	// it checked.
	Checked    []string `json:"checked"`
	NotChecked []string `json:"not_checked"`
}

func (r *Result) add(name string, err error) {
	c := Check{Name: name, OK: err == nil}
	if err != nil {
		c.Detail = err.Error()
	}
	r.Checks = append(r.Checks, c)
}

func (r *Result) finish() {
	r.OK = true
	for _, c := range r.Checks {
		r.OK = r.OK && c.OK
	}
}

// Run verifies ck. It returns an error only when the verification could
// not run (bad options, unreadable input, ctx done: then an error
// wrapping ctx's); failed checks are in the report.
func Run(ctx context.Context, ck *checkpoint.Checkpoint, opt Options) (*Report, error) {
	if err := checkTokens(opt); err != nil {
		return nil, err
	}
	if opt.Tokens == 0 {
		opt.Tokens = defaultCPUTokens
	}
	man, err := format.ReadManifest(ck)
	if err != nil && !errors.Is(err, format.ErrNoManifest) {
		return nil, err
	}
	comps, err := format.FindCompressed(ck)
	if err != nil {
		return nil, err
	}
	if man == nil && len(comps) == 0 {
		return nil, fmt.Errorf("%s: %w", ck.Path, ErrNothingToVerify)
	}
	pruneReport, err := format.ReadReport(ck)
	if err != nil && !errors.Is(err, format.ErrNoReport) {
		return nil, err
	}
	rep := &Report{Checkpoint: ck.Path}
	num, err := newNumeric(opt)
	if err != nil {
		return nil, err
	}
	defer num.Close()
	rep.Device, rep.Tolerance = num.Describe(), num.Tolerance()
	if man != nil {
		rep.Format = string(man.Format)
	} else {
		rep.Format = string(comps[0].Format)
	}
	cov := coverage{opt: opt, num: num, report: pruneReport}
	targets := map[string]bool{}
	// Tensors are checked in parallel; each result has its slot, so the
	// report's order does not depend on scheduling.
	var jobs []func(context.Context) (Result, error)
	var total int64
	for _, c := range comps {
		targets[c.Name] = true
		ch := choiceOf(man, pruneReport, c.Name)
		cov.count(ch)
		ours := man != nil
		jobs = append(jobs, func(ctx context.Context) (Result, error) { return checkCompressed(ctx, c, ch, ours, opt, num) })
		total += int64(c.Rows) * int64(c.Cols) * int64(c.DType.Size())
		cov.compressed++
		if c.Format == format.Bitmask && !ours {
			cov.foreign++
		}
		if _, ok := kernelType(c); !ok {
			cov.cpuOnly++
		}
	}
	if man != nil && man.Format == format.Dense {
		for _, name := range man.TargetNames() {
			targets[name] = true
			ch := choiceOf(man, pruneReport, name)
			cov.count(ch)
			jobs = append(jobs, func(ctx context.Context) (Result, error) { return checkDense(ctx, ck, name, ch, opt) })
			if _, info, ok := ck.Lookup(name); ok {
				total += info.Size()
			}
		}
	}
	cov.targets = len(targets)
	nChecks := len(jobs)
	var missing []string
	if pruneReport != nil && pruneReport.SHA256 != nil {
		var tensors []digestTensor
		tensors, missing = digestPlan(ck, pruneReport.SHA256)
		for _, d := range tensors {
			jobs = append(jobs, func(ctx context.Context) (Result, error) { return d.check(ctx, opt.Progress) })
			total += d.info.Size()
		}
		cov.digests, cov.shards = len(tensors), len(ck.Shards)
	}
	if opt.ProgressTotal != nil {
		opt.ProgressTotal(total)
	}
	results := make([]Result, len(jobs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(num.Workers(opt.Workers))
	for i, job := range jobs {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			r, err := job(gctx)
			results[i] = r
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("verify %s: %w", ck.Path, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("verify %s: %w", ck.Path, err)
	}
	rep.Results = append(rep.Results, results[:nChecks]...)
	if cov.digests > 0 || len(missing) > 0 {
		rep.Results = append(rep.Results, digestResults(results[nChecks:], missing)...)
	}
	if man != nil {
		for _, name := range man.TargetNames() {
			if !targets[name] {
				r := Result{Tensor: name, Format: string(man.Format)}
				r.add(CheckPresent, fmt.Errorf("the manifest lists %s but the checkpoint has no such target", name))
				r.finish()
				rep.Results = append(rep.Results, r)
			}
		}
	}
	if opt.Original != nil {
		others, err := checkOthers(ctx, ck, opt.Original, targets)
		if err != nil {
			return nil, fmt.Errorf("verify %s: %w", ck.Path, err)
		}
		rep.Results = append(rep.Results, others...)
	}
	sort.SliceStable(rep.Results, func(i, j int) bool { return rep.Results[i].Tensor < rep.Results[j].Tensor })
	for i := range rep.Results {
		if rep.Results[i].OK {
			rep.Passed++
		} else {
			rep.Failed++
		}
	}
	rep.OK = rep.Failed == 0
	rep.Checked, rep.NotChecked = cov.lines()
	return rep, nil
}

// ruleOf returns the sparsity rule the manifest records for a target.
func ruleOf(man *format.Manifest, name string) prune24.Rule {
	if man != nil && man.Targets[name] == prune24.Rule12.String() {
		return prune24.Rule12
	}
	return prune24.Rule24
}
