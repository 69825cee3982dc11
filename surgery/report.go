package surgery

import (
	"path/filepath"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/prune24"
)

// report summarizes the plan after its tensors were written.
func (p *Plan) report(out string) *format.Report {
	r := &format.Report{Tool: "sfsurgery", Version: p.Options.Version, Input: absPath(p.Input.Path), Output: absPath(out),
		Format: p.Options.Format, Rule: p.method.Rule(), Method: p.method, Tensors: []format.TensorReport{}, Warnings: p.Warnings()}
	if d := p.Options.Decisions; d != nil {
		m := d.Meta
		r.Decisions = &format.Decisions{File: absPath(d.Path()), Model: m.Model, Tool: m.Tool, Text: m.Text,
			Samples: m.Samples, Seqlen: m.Seqlen, Seed: m.Seed, Params: m.Params}
	}
	var all prune24.Stats
	for _, t := range p.Targets {
		tr := format.TensorReport{Target: t.Target}
		if t.Skip != "" {
			r.Skipped++
		} else {
			r.Pruned++
			all.Add(t.Stats)
			tr.KeptFraction = t.Stats.Fraction()
			tr.MaskSHA256, tr.WrittenMaskSHA256, tr.ZeroKeptGroups = t.Mask.SHA256, t.Mask.WrittenSHA256, t.Mask.ZeroKeptGroups
			if r.Worst == nil || tr.KeptFraction < r.Worst.KeptFraction {
				w := tr
				r.Worst = &w
			}
		}
		r.Tensors = append(r.Tensors, tr)
	}
	r.KeptFraction = all.Fraction()
	r.NotPruned = append([]format.NotPruned{}, p.NotPruned...)
	r.BytesIn = p.Input.TotalSize()
	for _, s := range p.shards {
		for _, t := range s.Tensors {
			r.BytesOut += specSize(t)
		}
	}
	return r
}

// specSize is the byte size of a tensor spec.
func specSize(t checkpoint.TensorSpec) int64 {
	n := int64(t.DType.Bits())
	for _, d := range t.Shape {
		n *= d
	}
	return n / 8
}

// absPath returns path made absolute, or path itself where that fails.
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}
