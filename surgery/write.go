package surgery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
)

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
// appears at out unless the whole output was written, the report (with
// the SHA-256 of every tensor written) included: the report is built
// inside the output's temporary directory, or renamed into place right
// after a single output file. Inputs are never modified. opt.Protect is
// extended with the input's paths; opt.Replaceable with the report's
// name, so that Force replaces an earlier output.
//
// Weight files the input's index does not name are carried over
// unchanged, not pruned, and listed in the report's warnings (see
// [Plan.Warnings]).
//
// With decisions, the report records the decisions file's SHA-256, read
// while the tensors are written; the write waits for it before the
// output appears.
func (p *Plan) Write(ctx context.Context, out string, opt checkpoint.WriteOptions) (*format.Report, error) {
	opt.Protect = append(append([]string(nil), opt.Protect...), p.protect()...)
	opt.Replaceable = append(append([]string(nil), opt.Replaceable...), format.ReportName)
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
	decisionsSum := func() (string, error) { return "", nil }
	if d := p.Options.Decisions; d != nil && !p.noReport {
		hctx, cancel := context.WithCancel(ctx)
		sum := make(chan digestResult, 1)
		go func() {
			s, err := d.SHA256(hctx)
			sum <- digestResult{s, err}
		}()
		decisionsSum = sync.OnceValues(func() (string, error) {
			r := <-sum
			return r.sum, r.err
		})
		defer func() {
			cancel()
			_, _ = decisionsSum() // the goroutine has ended
		}()
	}
	var report *format.Report
	var files []checkpoint.ExtraFile
	if !p.noReport {
		digests := &digestSet{sums: map[string]string{}}
		opt.Digest = digests.add
		name := format.ReportName
		if p.single {
			name = filepath.Base(format.ReportPath(out, true))
		}
		files = append(files, checkpoint.ExtraFile{Name: name, Make: func() ([]byte, error) {
			sum, err := decisionsSum()
			if err != nil {
				return nil, err
			}
			report = p.report(out)
			report.SHA256 = digests.all()
			if report.Decisions != nil {
				report.Decisions.SHA256 = sum
			}
			b, err := json.MarshalIndent(report, "", "  ")
			return append(b, '\n'), err
		}})
	}
	var err error
	if p.single {
		s := p.shards[0]
		opt.Beside = append(append([]checkpoint.ExtraFile(nil), opt.Beside...), files...)
		err = checkpoint.WriteFile(ctx, out, s.Tensors, s.Metadata, &opt)
	} else {
		o := &checkpoint.Output{Shards: p.shards, Index: p.Input.Index != nil}
		if p.Input.Index != nil {
			o.IndexMetadata = p.indexMetadata()
		}
		for _, name := range append(slices.Clone(p.Input.Files), p.Input.Unindexed...) {
			if name == format.ReportName {
				continue // the input's prune report describes the input, not this output
			}
			if name == "config.json" && p.config != nil {
				o.Files = append(o.Files, checkpoint.ExtraFile{Name: name, Data: p.config})
				continue
			}
			o.Files = append(o.Files, checkpoint.ExtraFile{Name: name, From: filepath.Join(p.Input.Dir, name)})
		}
		o.Files = append(o.Files, files...)
		err = checkpoint.WriteDir(ctx, out, o, &opt)
	}
	if report == nil && (err == nil || p.noReport) {
		report = p.report(out)
	}
	return report, err
}

// digestResult is a digest computed aside, or why it could not be.
type digestResult struct {
	sum string
	err error
}

// digestSet collects the SHA-256 of every tensor written, from several
// goroutines.
type digestSet struct {
	mu   sync.Mutex
	sums map[string]string
}

// add records the digest of the tensor called name.
func (d *digestSet) add(name string, sum [sha256.Size]byte) {
	d.mu.Lock()
	d.sums[name] = hex.EncodeToString(sum[:])
	d.mu.Unlock()
}

// all returns a copy of the digests recorded so far.
func (d *digestSet) all() map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.sums)
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
	if d := p.Options.Decisions; d != nil {
		paths = append(paths, d.Path())
	}
	return paths
}

// indexMetadata copies the input index's metadata (the writer sets
// total_size), with total_parameters, where the input has it, counted
// over the output's tensors.
func (p *Plan) indexMetadata() map[string]any {
	out := map[string]any{}
	for k, v := range p.Input.Index.Metadata {
		if k != "total_size" {
			out[k] = v
		}
	}
	if _, ok := out["total_parameters"]; ok {
		var n int64
		for _, s := range p.shards {
			for _, t := range s.Tensors {
				n += numElements(t.Shape)
			}
		}
		out["total_parameters"] = n
	}
	return out
}

// numElements is the product of shape (1 for a scalar).
func numElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}
