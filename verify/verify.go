package verify

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"golang.org/x/sync/errgroup"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/prune24"
	"github.com/sfsurgery/sfsurgery/surgery"
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
	// numerical check. On the CPU it defaults to 8; on the GPU the check
	// runs M = 1, 13, 64 and 257 unless TokensSet asks for Tokens alone.
	Tokens    int
	TokensSet bool
	// Seed seeds the random activations.
	Seed uint64
	// Progress, when set, is called (from several goroutines) with the
	// number of weight bytes checked.
	Progress func(n int64)
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
// not run; failed checks are in the report.
func Run(ctx context.Context, ck *checkpoint.Checkpoint, opt Options) (*Report, error) {
	if opt.Tokens <= 0 {
		opt.Tokens = 8
	}
	man, err := surgery.ReadManifest(ck)
	if err != nil && !errors.Is(err, surgery.ErrNoManifest) {
		return nil, err
	}
	comps, err := surgery.FindCompressed(ck)
	if err != nil {
		return nil, err
	}
	if man == nil && len(comps) == 0 {
		return nil, fmt.Errorf("%s: %w", ck.Path, ErrNothingToVerify)
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
	targets := map[string]bool{}
	// Tensors are checked in parallel; each result has its slot, so the
	// report's order does not depend on scheduling.
	var jobs []func() Result
	for _, c := range comps {
		targets[c.Name] = true
		rule := ruleOf(man, c.Name)
		jobs = append(jobs, func() Result { return checkCompressed(c, rule, man != nil, opt, num) })
	}
	if man != nil && man.Format == surgery.FormatDense {
		for _, name := range man.TargetNames() {
			targets[name] = true
			jobs = append(jobs, func() Result { return checkDense(ck, name, ruleOf(man, name), opt) })
		}
	}
	results := make([]Result, len(jobs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(num.Workers(opt.Workers))
	for i, job := range jobs {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			results[i] = job()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	rep.Results = append(rep.Results, results...)
	if man != nil {
		for _, name := range man.TargetNames() {
			if !targets[name] {
				r := Result{Tensor: name, Format: string(man.Format)}
				r.add("present", fmt.Errorf("the manifest lists %s but the checkpoint has no such target", name))
				r.finish()
				rep.Results = append(rep.Results, r)
			}
		}
	}
	if opt.Original != nil {
		rep.Results = append(rep.Results, checkOthers(ck, opt.Original, targets)...)
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
	return rep, nil
}

// ruleOf returns the sparsity rule the manifest records for a target.
func ruleOf(man *surgery.Manifest, name string) prune24.Rule {
	if man != nil && man.Targets[name] == prune24.Rule12.String() {
		return prune24.Rule12
	}
	return prune24.Rule24
}
