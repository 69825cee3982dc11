package speed

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// Policy derives the dispatch policy of r: one entry per shape from r's
// timed rows and threshold ([DerivePolicy]), wrapped with what identifies
// the GPU and libraries ([NewPolicy]). It is the one place a report's
// policy is derived: Run's estimates, the policy file and the Markdown
// document all read it (TestReportPolicyOnePlace).
func (r *Report) Policy() *Policy {
	entries := DerivePolicy(r.Shapes, r.Rows, r.Method.MinSpeedup)
	if r.Env.Limits != nil {
		for i := range entries {
			addLaunches(&entries[i], *r.Env.Limits, checkpoint.DType(r.DType))
			entries[i].Prefill = prefillRecords(checkpoint.DType(r.DType), entries[i].N, entries[i].K, *r.Env.Limits)
		}
	}
	return NewPolicy(r, entries)
}

// addLaunches gives every range of ours in e a plan and launch record
// for each M up to launchplan.MaxTokens: the measured winner's where
// there is one, else launchplan.Choose's (TestPolicyLaunches).
func addLaunches(e *PolicyEntry, lim launchplan.Limits, dt checkpoint.DType) {
	for i := range e.Sparse {
		rg := &e.Sparse[i]
		if rg.Backend != Ours {
			continue
		}
		won := map[int]string{}
		for _, p := range rg.Plans {
			won[p.M] = p.Plan
		}
		var plans []PlanAt
		for m := rg.MinM; m <= min(rg.MaxM, launchplan.MaxTokens); m++ {
			at := PlanAt{M: m}
			cands, err := launchplan.Candidates(m, e.N, e.K, lim, launchplan.Options{}, launchplan.MaxCandidates)
			if err != nil {
				continue
			}
			plan := cands[0]
			if name, ok := won[m]; ok {
				at.Plan, at.Measured = name, true
				found := false
				for _, c := range cands {
					if c.String() == name {
						plan, found = c, true
						break
					}
				}
				if !found {
					plans = append(plans, at)
					continue
				}
			}
			at.Plan = plan.String()
			if l, err := plan.Launch(dt, m, e.N, e.K); err == nil {
				at.Launch = &l
			}
			plans = append(plans, at)
		}
		rg.Plans = plans
	}
}

// Documents names the files written from a report; an empty path is not
// written.
type Documents struct {
	// Policy is the dispatch policy as JSON.
	Policy string
	// Plot is speedup against M per shape, .png or .svg.
	Plot string
	// Markdown is the report as a Markdown document, which links the plot
	// when there is one.
	Markdown string
}

// Write writes the documents of rep that d names, each atomically (an old
// file stays whole until the new one replaces it), stopping at the first
// error, which names the file.
func (d Documents) Write(ctx context.Context, rep *Report) error {
	policy := rep.Policy()
	if d.Policy != "" {
		b, err := json.MarshalIndent(policy, "", "  ")
		if err != nil {
			return fmt.Errorf("%s: %w", d.Policy, err)
		}
		if err := writeAtomic(ctx, d.Policy, append(b, '\n')); err != nil {
			return err
		}
	}
	if d.Plot != "" {
		if err := WritePlotFile(d.Plot, rep); err != nil {
			return err
		}
	}
	if d.Markdown != "" {
		plotRef := ""
		if d.Plot != "" {
			plotRef = filepath.Base(d.Plot)
		}
		var b bytes.Buffer
		if err := WriteMarkdown(&b, rep, policy.Entries, plotRef); err != nil {
			return fmt.Errorf("%s: %w", d.Markdown, err)
		}
		return writeAtomic(ctx, d.Markdown, b.Bytes())
	}
	return nil
}

// writeAtomic writes data as path, replacing an existing file atomically:
// path holds its old contents or all of data.
func writeAtomic(ctx context.Context, path string, data []byte) error {
	return checkpoint.WriteBytes(ctx, path, data, &checkpoint.WriteOptions{Force: true})
}

// Without returns a copy of r with backend's rows left out and the
// estimates derived again from the rest, with the same share: the report
// as if backend had not been measured. Without(CuSPARSELt) is the report
// of an engine that keeps one copy of the weights (the stored packed +
// meta), whose policy weighs ours against dense alone.
func (r *Report) Without(backend string) *Report {
	out := *r
	out.Rows = make([]Row, 0, len(r.Rows))
	for _, row := range r.Rows {
		if row.Backend != backend {
			out.Rows = append(out.Rows, row)
		}
	}
	if backend == CuSPARSELt {
		out.Env.CuSPARSELt, out.Env.CuSPARSELtPath = "", ""
	}
	if len(r.Estimates) > 0 {
		out.Estimates = Estimates(out.Shapes, out.Rows, out.Policy().Entries, r.Method.GEMMShare)
	}
	return &out
}
