package surgery

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/decisions"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/prune24"
)

// Sentinel errors of planning, testable with errors.Is.
var (
	// ErrNoTargets: no tensor of the checkpoint matched the selector.
	ErrNoTargets = errors.New("no tensor matches the targets")
	// ErrUnsupported: a target cannot be pruned (dtype, rank or shape).
	ErrUnsupported = errors.New("target cannot be pruned")
)

// Options control planning.
type Options struct {
	Format   format.Format
	Selector *Selector
	// Strict makes a target that fails the format's shape guard an error
	// instead of a tensor left dense and listed in the report.
	Strict bool
	// SkipUnsupported leaves targets of an unsupported dtype or rank
	// unchanged (listed in the report) instead of failing.
	SkipUnsupported bool
	// Version is the tool version recorded in the manifest.
	Version string
	// Decisions, when set, are a calibration's decisions
	// (decisions.Open): the targets keep what they name, with the
	// original's values or, for sparsegpt, the decisions' updated ones,
	// instead of their largest magnitudes. They must decide every target
	// that is pruned, and nothing but targets.
	Decisions *decisions.File
}

// TensorPlan is what happens to one target.
type TensorPlan struct {
	format.Target
	// Stats is filled in while the output is written.
	Stats prune24.Stats `json:"-"`
	// Mask is filled in while the output is written, for a target pruned
	// by decisions.
	Mask MaskDigests `json:"-"`
}

// MaskDigests are the digests of a target's mask, for the report
// (format.TensorReport): the decisions' mask as in their file, and the
// mask the output shows where that differs (ZeroKeptGroups > 0).
type MaskDigests struct {
	SHA256, WrittenSHA256 string
	ZeroKeptGroups        int64
}

// Plan is a planned prune: every target and what happens to it, and the
// output shards ready to write.
type Plan struct {
	Input   *checkpoint.Checkpoint
	Options Options
	// Targets lists every tensor that matched the selector, by name.
	Targets []*TensorPlan
	shards  []checkpoint.Shard
	config  []byte // the output config.json; nil when there is none
	single  bool   // the input is one .safetensors file
	// noReport is set for unpack, whose output is a plain dense
	// checkpoint with no prune report.
	noReport bool
	// targets are the sources of the pruned weights, which Write hands
	// the memory budget of the run.
	targets []*target
	// decoders are unpack's sources, which Write gives their chunk size.
	decoders []*decodeSource
	// method is what decides the weights kept: Magnitude, or the method
	// of Options.Decisions (for unpack, the input's).
	method format.Method
	// decided holds the weights whose decisions a target claimed.
	decided map[string]bool

	// NotPruned lists, by name, the projection-like tensors that are not
	// targets (see ProjectionLike) and are copied unchanged.
	NotPruned []format.NotPruned
}

// Single reports whether the input (and so the output) is one
// .safetensors file rather than a model directory.
func (p *Plan) Single() bool { return p.single }

// Method returns what decides the weights kept: format.Magnitude, or the
// method of the decisions.
func (p *Plan) Method() format.Method { return p.method }

// Pruned returns the number of targets that are pruned.
func (p *Plan) Pruned() int {
	n := 0
	for _, t := range p.Targets {
		if t.Skip == "" {
			n++
		}
	}
	return n
}

// NewPlan decides what prune does to ck. It reads only headers.
func NewPlan(ck *checkpoint.Checkpoint, opt Options) (*Plan, error) {
	if opt.Selector == nil {
		sel, err := NewSelector(nil, nil, ScopeAll)
		if err != nil {
			return nil, err
		}
		opt.Selector = sel
	}
	if _, err := format.Parse(string(opt.Format)); err != nil {
		return nil, err
	}
	if err := checkNotPruned(ck); err != nil {
		return nil, err
	}
	p := &Plan{Input: ck, Options: opt, single: isSingleFile(ck.Path), NotPruned: []format.NotPruned{},
		method: format.Magnitude, decided: map[string]bool{}}
	if opt.Decisions != nil {
		p.method = opt.Decisions.Meta.Method
	}
	for _, s := range ck.Shards {
		shard, err := p.planShard(s)
		if err != nil {
			return nil, err
		}
		p.shards = append(p.shards, shard)
	}
	if len(p.Targets) == 0 {
		return nil, fmt.Errorf("%s: %w %s; the checkpoint holds: %s",
			ck.Path, ErrNoTargets, opt.Selector, summarizeNames(ck.Names()))
	}
	if err := p.checkExtraDecisions(); err != nil {
		return nil, err
	}
	sort.Slice(p.Targets, func(i, j int) bool { return p.Targets[i].Name < p.Targets[j].Name })
	sort.Slice(p.NotPruned, func(i, j int) bool { return p.NotPruned[i].Name < p.NotPruned[j].Name })
	if !p.single && ck.Config != nil {
		cfg, err := p.outputConfig()
		if err != nil {
			return nil, err
		}
		p.config = cfg
	}
	return p, nil
}

// planShard builds the output specs of one input shard.
func (p *Plan) planShard(s *checkpoint.File) (checkpoint.Shard, error) {
	out := checkpoint.Shard{Name: filepath.Base(s.Path())}
	man := p.manifest()
	for _, info := range s.Tensors {
		if !p.Options.Selector.Match(info.Name) {
			p.noteNotPruned(info)
			out.Tensors = append(out.Tensors, copySpec(s, info))
			continue
		}
		tp := &TensorPlan{Target: format.Target{Name: info.Name, Shard: out.Name, DType: info.DType, Shape: info.Shape}}
		p.Targets = append(p.Targets, tp)
		tgt, reason, err := p.checkTarget(s, info, tp)
		if err != nil {
			return out, err
		}
		if reason != "" {
			if err := p.checkSkippedDecision(info); err != nil {
				return out, err
			}
			tp.Skip = reason
			tp.Outputs = []string{info.Name}
			out.Tensors = append(out.Tensors, copySpec(s, info))
			continue
		}
		p.targets = append(p.targets, tgt)
		tp.Rule = tgt.rule.String()
		man.Targets[info.Name] = tp.Rule
		specs := p.targetSpecs(tgt)
		for _, sp := range specs {
			tp.Outputs = append(tp.Outputs, sp.Name)
		}
		out.Tensors = append(out.Tensors, specs...)
	}
	out.Metadata = map[string]string{}
	for k, v := range s.Metadata {
		out.Metadata[k] = v
	}
	out.Metadata[format.MetadataKey] = man.Encode()
	return out, nil
}

// checkTarget decides whether a matched tensor can be pruned in the
// chosen format. It returns the target, or a reason to leave it dense, or
// an error.
func (p *Plan) checkTarget(s *checkpoint.File, info checkpoint.TensorInfo, tp *TensorPlan) (*target, string, error) {
	where := fmt.Sprintf("%s: tensor %q", s.Path(), info.Name)
	dt := info.DType
	if prune24.CheckDType(dt) != nil {
		reason := fmt.Sprintf("dtype %s is not BF16, F16 or F32", info.DType)
		if p.Options.SkipUnsupported {
			return nil, reason, nil
		}
		return nil, "", fmt.Errorf("%s: %w: %s (use --skip-unsupported to leave it dense)", where, ErrUnsupported, reason)
	}
	if len(info.Shape) != 2 {
		reason := fmt.Sprintf("shape %v is not a matrix", info.Shape)
		if p.Options.SkipUnsupported {
			return nil, reason, nil
		}
		return nil, "", fmt.Errorf("%s: %w: %s (use --skip-unsupported to leave it dense)", where, ErrUnsupported, reason)
	}
	rows, cols := info.Shape[0], info.Shape[1]
	if cols%4 != 0 {
		return nil, "", fmt.Errorf("%s: %w: input dimension %d is not a multiple of 4", where, ErrUnsupported, cols)
	}
	if rows > 1<<31 || cols > 1<<31 || rows*cols > 1<<40 {
		return nil, "", fmt.Errorf("%s: %w: shape %v is too large", where, ErrUnsupported, info.Shape)
	}
	t := &target{plan: tp, file: s, info: info, dt: dt, rows: int(rows), cols: int(cols),
		rule: prune24.Rule24, align: 1, format: p.Options.Format}
	var guard error
	switch p.Options.Format {
	case format.Ampere:
		guard = prune24.AmpereShapeError(dt, t.rows, t.cols)
		t.align = 32
		if dt == checkpoint.F32 {
			t.rule = prune24.Rule12
		}
	case format.Bitmask:
		guard = prune24.BitmaskShapeError(t.rows, t.cols)
	}
	if guard != nil {
		if p.Options.Strict {
			return nil, "", fmt.Errorf("%s: %w: %v (--strict)", where, ErrUnsupported, guard)
		}
		return nil, fmt.Sprintf("shape %v fails the %s format's guard: %v", info.Shape, p.Options.Format, guard), nil
	}
	if d := p.Options.Decisions; d != nil {
		if t.rule != prune24.Rule24 {
			reason := fmt.Sprintf("F32 in the ampere format is pruned 1:2 (the hardware's form), which the 2:4 decisions of %s cannot express", d.Path())
			if p.Options.SkipUnsupported {
				return nil, reason, nil
			}
			return nil, "", fmt.Errorf("%s: %w: %s; use --format bitmask or dense (or --skip-unsupported to leave it dense)", where, ErrUnsupported, reason)
		}
		x, err := d.Lookup(info)
		if err != nil {
			return nil, "", err
		}
		t.dec = x
		p.decided[info.Name] = true
	}
	return t, "", nil
}

// checkSkippedDecision checks the decision for a target left dense,
// where the decisions hold one: it must fit the target, but is not
// needed.
func (p *Plan) checkSkippedDecision(info checkpoint.TensorInfo) error {
	d := p.Options.Decisions
	if d == nil || !d.Has(info.Name) {
		return nil
	}
	if _, err := d.Lookup(info); err != nil {
		return err
	}
	p.decided[info.Name] = true
	return nil
}

// checkExtraDecisions refuses decisions for a weight that is no target.
func (p *Plan) checkExtraDecisions() error {
	d := p.Options.Decisions
	if d == nil {
		return nil
	}
	return d.Extra(func(w string) string {
		if p.decided[w] {
			return ""
		}
		if _, _, ok := p.Input.Lookup(w); !ok {
			return fmt.Sprintf("the model has no tensor %s: the decisions were made for another model", w)
		}
		return fmt.Sprintf("%s is not a target of this prune (%s): the decisions must hold those of the targets and no others",
			w, p.Options.Selector.Why(w))
	})
}

// targetSpecs returns the output tensors of one pruned target.
func (p *Plan) targetSpecs(t *target) []checkpoint.TensorSpec {
	base := strings.TrimSuffix(t.info.Name, ".weight")
	shape := checkpoint.TensorSpec{Name: base + ".shape", DType: checkpoint.I64, Shape: []int64{2, 1},
		Src: checkpoint.Member{Group: t, Index: 2}}
	r := int64(t.rows)
	switch p.Options.Format {
	case format.Ampere:
		pb, mb := prune24.AmpereSizes(t.dt, t.rows, t.cols)
		return []checkpoint.TensorSpec{
			{Name: base + ".packed", DType: t.info.DType, Shape: []int64{r, int64(pb) / r / int64(t.dt.Size())}, Src: checkpoint.Member{Group: t, Index: 0}},
			{Name: base + ".meta", DType: checkpoint.I16, Shape: []int64{r, int64(mb) / r / 2}, Src: checkpoint.Member{Group: t, Index: 1}},
			shape,
		}
	case format.Bitmask:
		cb, mb := prune24.BitmaskSizes(t.dt, t.rows, t.cols)
		return []checkpoint.TensorSpec{
			{Name: base + ".compressed", DType: t.info.DType, Shape: []int64{r, int64(cb) / r / int64(t.dt.Size())}, Src: checkpoint.Member{Group: t, Index: 0}},
			{Name: base + ".bitmask", DType: checkpoint.U8, Shape: []int64{r, int64(mb) / r}, Src: checkpoint.Member{Group: t, Index: 1}},
			shape,
		}
	}
	return []checkpoint.TensorSpec{{Name: t.info.Name, DType: t.info.DType, Shape: t.info.Shape, Src: denseSource{t}}}
}

// copySpec passes a tensor through unchanged.
func copySpec(s *checkpoint.File, info checkpoint.TensorInfo) checkpoint.TensorSpec {
	return checkpoint.TensorSpec{Name: info.Name, DType: info.DType, Shape: info.Shape,
		Src: checkpoint.FileRange{File: s, Tensor: info}}
}

// isSingleFile reports whether path names one .safetensors file.
func isSingleFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && strings.HasSuffix(path, ".safetensors")
}

// summarizeNames lists tensor names compactly for an error message,
// folding layer numbers: model.layers.N.mlp.up_proj.weight ×32.
func summarizeNames(names []string) string {
	counts := map[string]int{}
	var order []string
	for _, n := range names {
		k := foldLayer(n)
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	parts := make([]string, 0, len(order))
	for _, k := range order {
		if counts[k] > 1 {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, counts[k]))
		} else {
			parts = append(parts, k)
		}
	}
	const most = 24
	if len(parts) > most {
		parts = append(parts[:most], fmt.Sprintf("… %d more", len(parts)-most))
	}
	return strings.Join(parts, ", ")
}

// foldLayer replaces the first all-digit dotted component with N.
func foldLayer(name string) string {
	parts := strings.Split(name, ".")
	for i, s := range parts {
		if s != "" && strings.Trim(s, "0123456789") == "" {
			parts[i] = "N"
			break
		}
	}
	return strings.Join(parts, ".")
}

// Reshard splits the planned output into shards of at most maxBytes
// tensor bytes (Hugging Face names, greedy, tensor order kept) instead of
// mirroring the input's shards. Each shard's manifest lists the targets
// whose outputs it holds. A single-file input has no directory to shard
// into.
func (p *Plan) Reshard(maxBytes int64) error {
	if p.single {
		return fmt.Errorf("%s: --max-shard-size needs a model directory, not a single .safetensors file", p.Input.Path)
	}
	if maxBytes <= 0 {
		return fmt.Errorf("--max-shard-size must be positive")
	}
	var all []checkpoint.TensorSpec
	for _, s := range p.shards {
		all = append(all, s.Tensors...)
	}
	owner := map[string]*TensorPlan{}
	for _, t := range p.Targets {
		if t.Skip == "" {
			for _, o := range t.Outputs {
				owner[o] = t
			}
		}
	}
	base := map[string]string{}
	for k, v := range p.Input.Shards[0].Metadata {
		base[k] = v
	}
	shards := checkpoint.Reshard(all, maxBytes)
	for i := range shards {
		man := p.manifest()
		for _, sp := range shards[i].Tensors {
			if t, ok := owner[sp.Name]; ok {
				man.Targets[t.Name] = t.Rule
				t.Shard = shards[i].Name
			}
		}
		md := map[string]string{}
		for k, v := range base {
			md[k] = v
		}
		md[format.MetadataKey] = man.Encode()
		shards[i].Metadata = md
	}
	p.shards = shards
	return nil
}

// manifest returns an empty manifest of this plan's output: the rule of
// its method, named when it is a calibrated one.
func (p *Plan) manifest() *format.Manifest {
	m := &format.Manifest{Tool: "sfsurgery", Version: p.Options.Version, Format: p.Options.Format,
		Rule: p.method.Rule(), Targets: map[string]string{}}
	if p.method != format.Magnitude {
		m.Method = p.method
	}
	return m
}
