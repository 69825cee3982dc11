package surgery

import (
	"context"
	"encoding/json"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// ReportPath returns where the per-tensor report of an output goes:
// sfsurgery.json inside an output directory, or beside a single output
// file.
func ReportPath(out string, single bool) string {
	if single {
		return strings.TrimSuffix(out, ".safetensors") + ".sfsurgery.json"
	}
	return filepath.Join(out, reportName)
}

// reportName is the prune report's file name inside an output directory.
const reportName = "sfsurgery.json"

// OutputSize returns the number of bytes the output's safetensors files
// will take (headers included).
func (p *Plan) OutputSize() (int64, error) {
	var total int64
	for _, s := range p.shards {
		n, err := checkpoint.FileSize(s.Tensors, s.Metadata)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// Write writes the planned output at out and returns the report. Nothing
// appears at out unless the whole output was written; inputs are never
// modified. opt.Protect is extended with the input's paths.
func (p *Plan) Write(ctx context.Context, out string, opt checkpoint.WriteOptions) (*Report, error) {
	opt.Protect = append(append([]string(nil), opt.Protect...), p.protect()...)
	workers := opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	mem := newBudget(workers)
	for _, t := range p.targets {
		t.mem = mem
	}
	for _, d := range p.decoders {
		d.chunk = mem.chunk
	}
	if p.single {
		s := p.shards[0]
		if err := checkpoint.WriteFile(ctx, out, s.Tensors, s.Metadata, &opt); err != nil {
			return nil, err
		}
	} else {
		o := &checkpoint.Output{Shards: p.shards, Index: p.Input.Index != nil}
		if p.Input.Index != nil {
			o.IndexMetadata = indexMetadata(p.Input.Index.Metadata)
		}
		for _, name := range p.Input.Files {
			if name == reportName && p.noReport {
				continue // the input's prune report describes the input, not this output
			}
			if name == "config.json" && p.config != nil {
				o.Files = append(o.Files, checkpoint.ExtraFile{Name: name, Data: p.config})
				continue
			}
			o.Files = append(o.Files, checkpoint.ExtraFile{Name: name, From: filepath.Join(p.Input.Dir, name)})
		}
		if err := checkpoint.WriteDir(ctx, out, o, &opt); err != nil {
			return nil, err
		}
	}
	r := p.report(out)
	if p.noReport {
		return r, nil
	}
	if err := writeJSON(ctx, ReportPath(out, p.single), r, opt); err != nil {
		return r, err
	}
	return r, nil
}

// protect lists the input paths the output must not replace.
func (p *Plan) protect() []string {
	paths := []string{p.Input.Path}
	if !p.single {
		paths = append(paths, p.Input.Dir)
	}
	for _, s := range p.Input.Shards {
		paths = append(paths, s.Path())
	}
	return paths
}

// indexMetadata copies the input index's metadata; the writer sets
// total_size.
func indexMetadata(in map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range in {
		if k != "total_size" {
			out[k] = v
		}
	}
	return out
}

// writeJSON writes v as indented JSON, atomically.
func writeJSON(ctx context.Context, path string, v any, opt checkpoint.WriteOptions) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	opt.Force = true
	return checkpoint.WriteBytes(ctx, path, append(b, '\n'), &opt)
}
