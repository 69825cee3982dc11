package speed

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// Policy derives the dispatch policy of r: one entry per shape from r's
// timed rows and threshold ([DerivePolicy]), wrapped with what identifies
// the GPU and libraries ([NewPolicy]). It is the one place a report's
// policy is derived: Run's estimates, the policy file and the Markdown
// document all read it (TestReportPolicyOnePlace).
func (r *Report) Policy() *Policy {
	return NewPolicy(r, DerivePolicy(r.Shapes, r.Rows, r.Method.MinSpeedup))
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
