package surgery

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/prune24"
)

// ErrNoReport is returned by ReadReport for a checkpoint without a prune
// report (sfsurgery.json in a directory, NAME.sfsurgery.json beside a
// single file).
var ErrNoReport = errors.New("no prune report")

// Report is the outcome of a prune, written as JSON beside the output.
type Report struct {
	Tool    string `json:"tool"`
	Version string `json:"version"`
	Input   string `json:"input"`
	Output  string `json:"output"`
	Format  Format `json:"format"`
	Rule    string `json:"rule"`
	// Pruned and Skipped count targets.
	Pruned  int `json:"pruned"`
	Skipped int `json:"skipped"`
	// BytesIn and BytesOut are the sizes of the input's and the output's
	// tensors (headers excluded).
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// KeptFraction is Σ|kept| / Σ|all| over every pruned weight.
	KeptFraction float64 `json:"kept_magnitude_fraction"`
	// Worst is the pruned weight with the smallest kept fraction.
	Worst   *TensorReport  `json:"worst,omitempty"`
	Tensors []TensorReport `json:"tensors"`
	// NotPruned lists the projection-like tensors that were not targets
	// and were copied unchanged, with the reason.
	NotPruned []NotPruned `json:"not_pruned"`
	// Warnings are what prune noticed about its input and left as it
	// was (the lines inspect prints, and files carried over unpruned).
	Warnings []string `json:"warnings,omitempty"`
	// SHA256 maps the name of every tensor of the output to the SHA-256
	// of its bytes in the output (hex), so that verify can tell any
	// changed byte without the original.
	SHA256 map[string]string `json:"sha256"`
}

// ReadReport reads the prune report of the checkpoint ck: sfsurgery.json
// in its directory, or NAME.sfsurgery.json beside a single file. It fails
// with an error wrapping ErrNoReport when there is none.
func ReadReport(ck *checkpoint.Checkpoint) (*Report, error) {
	path := filepath.Join(ck.Dir, reportName)
	if !ck.IsDir() {
		path = ReportPath(ck.Path, true)
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrNoReport)
	}
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// TensorReport is the outcome for one target.
type TensorReport struct {
	TensorPlan
	KeptFraction float64 `json:"kept_magnitude_fraction,omitempty"`
}

// report summarizes the plan after its tensors were written.
func (p *Plan) report(out string) *Report {
	r := &Report{Tool: "sfsurgery", Version: p.Options.Version, Input: absPath(p.Input.Path), Output: absPath(out),
		Format: p.Options.Format, Rule: RuleDescription, Tensors: []TensorReport{}, Warnings: p.Warnings()}
	var all prune24.Stats
	for _, t := range p.Targets {
		tr := TensorReport{TensorPlan: *t}
		if t.Skip != "" {
			r.Skipped++
		} else {
			r.Pruned++
			all.Add(t.Stats)
			tr.KeptFraction = t.Stats.Fraction()
			if r.Worst == nil || tr.KeptFraction < r.Worst.KeptFraction {
				w := tr
				r.Worst = &w
			}
		}
		r.Tensors = append(r.Tensors, tr)
	}
	r.KeptFraction = all.Fraction()
	r.NotPruned = append([]NotPruned{}, p.NotPruned...)
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
