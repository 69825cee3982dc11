package speed

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
	"github.com/sfsurgery/sfsurgery/llama"
)

// ErrShape is wrapped by errors about shapes: a malformed --shapes item,
// a checkpoint without target weights.
var ErrShape = errors.New("speed: bad shape")

// Shape is one weight shape of a sweep: W is N×K (out × in, as
// nn.Linear stores it) and the product is y[M][N] = x[M][K]·Wᵀ.
type Shape struct {
	// Model names the model the shape comes from: an architecture name
	// (llama3-8b) or the checkpoint's name; empty for a bare NxK.
	Model string `json:"model,omitempty"`
	// Ops lists the projections that have this shape (q, k, v, o, gate,
	// up, down), in that order.
	Ops []string `json:"ops,omitempty"`
	N   int      `json:"n"`
	K   int      `json:"k"`
	// Count is how many weights of the model have this shape, used to
	// weigh shapes in the end-to-end estimate.
	Count int `json:"count"`
}

// Label returns a short name: "llama3-8b q,o 4096x4096" or "4096x4096".
func (s Shape) Label() string {
	var parts []string
	if s.Model != "" {
		parts = append(parts, s.Model)
	}
	if len(s.Ops) > 0 {
		parts = append(parts, strings.Join(s.Ops, ","))
	}
	return strings.Join(append(parts, fmt.Sprintf("%dx%d", s.N, s.K)), " ")
}

// opRank orders op names: LLaMA projections first, in their canonical
// order (llama.OpIndex), then the others by name.
func opRank(a, b string) int {
	ia, ib := llama.OpIndex(a), llama.OpIndex(b)
	switch {
	case ia >= 0 && ib >= 0:
		return ia - ib
	case ia >= 0:
		return -1
	case ib >= 0:
		return 1
	}
	return strings.Compare(a, b)
}

// layerRE finds a layer index, replaced by * in labels of other targets.
var layerRE = regexp.MustCompile(`\.\d+\.`)

// OpName returns the op label of a weight name: "q" … "down" for the
// LLaMA projections ("qkv", "gate_up" for stacked ones, as Phi-3 stores
// them), else the name with its layer index replaced by "*" and ".weight"
// dropped.
func OpName(name string) string {
	if _, op, ok := llama.SplitProjection(name); ok {
		return op
	}
	return strings.TrimSuffix(layerRE.ReplaceAllString(name, ".*."), ".weight")
}

// shapeSet collects shapes by (model, N, K), merging ops and counts.
type shapeSet struct {
	order []shapeKey
	byKey map[shapeKey]*Shape
}

type shapeKey struct {
	model string
	n, k  int
}

func newShapeSet() *shapeSet { return &shapeSet{byKey: make(map[shapeKey]*Shape)} }

// add records count weights of op with shape n×k.
func (s *shapeSet) add(model, op string, n, k, count int) {
	key := shapeKey{model, n, k}
	sh, ok := s.byKey[key]
	if !ok {
		sh = &Shape{Model: model, N: n, K: k}
		s.byKey[key] = sh
		s.order = append(s.order, key)
	}
	sh.Count += count
	if op != "" && !slices.Contains(sh.Ops, op) {
		sh.Ops = append(sh.Ops, op)
		slices.SortFunc(sh.Ops, opRank)
	}
}

// shapes returns the shapes in the order they were first seen.
func (s *shapeSet) shapes() []Shape {
	out := make([]Shape, 0, len(s.order))
	for _, k := range s.order {
		out = append(out, *s.byKey[k])
	}
	return out
}

// FromCheckpoint returns the unique (out, in) shapes of ck's target
// weights, labelled with model and the op names that use them, in the
// order of their first op. Targets are the default projections of prune
// (attention q/k/v/o, MLP gate/up/down) stored dense, and every weight
// stored compressed (a checkpoint written by prune). With Fused, each
// layer's q, k, v and gate, up count as the stacks an engine multiplies.
func FromCheckpoint(ck *checkpoint.Checkpoint, model string, f Fusion) ([]Shape, error) {
	var targets []*regexp.Regexp
	for _, p := range []string{llama.AttnPattern, llama.MLPPattern} {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("speed: target pattern %q: %w", p, err)
		}
		targets = append(targets, re)
	}
	type weight struct {
		name string
		n, k int
	}
	var ws []weight
	for _, name := range ck.Names() {
		if !slices.ContainsFunc(targets, func(re *regexp.Regexp) bool { return re.MatchString(name) }) {
			continue
		}
		_, t, _ := ck.Lookup(name)
		if len(t.Shape) != 2 {
			return nil, fmt.Errorf("%w: %s: target %q has shape %v, want 2 dimensions", ErrShape, model, name, t.Shape)
		}
		ws = append(ws, weight{name, int(t.Shape[0]), int(t.Shape[1])})
	}
	comp, err := format.FindCompressed(ck)
	if err != nil {
		return nil, fmt.Errorf("speed: %s: %w", model, err)
	}
	for _, c := range comp {
		ws = append(ws, weight{c.Name, c.Rows, c.Cols})
	}
	if len(ws) == 0 {
		return nil, fmt.Errorf("%w: %s has no target weights (q/k/v/o/gate/up/down projections)", ErrShape, model)
	}
	ps := make([]projection, len(ws))
	for i, w := range ws {
		ps[i] = projection{model: model, module: moduleOf(w.name), op: OpName(w.name), n: w.n, k: w.k}
	}
	if f == Fused {
		ps = fuse(ps)
	}
	slices.SortStableFunc(ps, func(a, b projection) int { return opRank(a.op, b.op) })
	set := newShapeSet()
	for _, p := range ps {
		set.add(p.model, p.op, p.n, p.k, 1)
	}
	return set.shapes(), nil
}

// archProjections returns the projections of one layer of a LLaMA-family
// architecture, in module mod.
func archProjections(a llama.Arch, mod string) []projection {
	var ps []projection
	for _, p := range a.Projections() {
		ps = append(ps, projection{model: a.Name, module: mod, op: p.Op, n: p.N, k: p.K})
	}
	return ps
}

// ArchShapes returns the projection shapes of a LLaMA-family architecture,
// one of each op per layer (Count is per layer).
func ArchShapes(a llama.Arch) []Shape {
	set := newShapeSet()
	for _, p := range archProjections(a, "") {
		set.add(a.Name, p.op, p.n, p.k, 1)
	}
	return set.shapes()
}

// MaxDim is the largest N or K a shape may have: the kernels' limit.
const MaxDim = launchplan.MaxDim

// ParseShapes reads the --shapes flag: comma-separated items, each an
// architecture name (tinyllama, llama3-8b, llama3-70b: all its projection
// shapes), NxK (a bare shape), or OPS=NxK with OPS op names joined by "+"
// (q+o=4096x4096). Repeated shapes are merged. With Fused, an
// architecture's q, k, v and gate, up are measured as their stacks, and
// so are the OPS=NxK items' where they name a whole group (q=…,k=…,v=…).
func ParseShapes(spec string, f Fusion) ([]Shape, error) {
	var ps []projection
	for i, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if a, err := llama.ParseArch(item); err == nil {
			// Each architecture item is one layer of its own.
			ps = append(ps, archProjections(a, fmt.Sprint("item ", i))...)
			continue
		}
		ops, dims, labelled := strings.Cut(item, "=")
		if !labelled {
			dims, ops = ops, ""
		}
		n, k, err := parseDims(dims)
		if err != nil {
			return nil, fmt.Errorf("%w: --shapes item %q: %w (want NxK, OPS=NxK or one of %s)", ErrShape, item, err,
				strings.Join(llama.ArchNames(), ", "))
		}
		if ops == "" {
			ps = append(ps, projection{n: n, k: k})
			continue
		}
		for op := range strings.SplitSeq(ops, "+") {
			if op = strings.TrimSpace(op); op == "" {
				return nil, fmt.Errorf("%w: --shapes item %q: empty op name", ErrShape, item)
			}
			if !opName(op) {
				return nil, fmt.Errorf("%w: --shapes item %q: op name %q: want letters, digits, '_', '-' and '.'", ErrShape, item, op)
			}
			ps = append(ps, projection{op: op, n: n, k: k}) // bare items share the module ""
		}
	}
	if f == Fused {
		ps = fuse(ps)
	}
	set := newShapeSet()
	for _, p := range ps {
		set.add(p.model, p.op, p.n, p.k, 1)
	}
	out := set.shapes()
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: --shapes %q names no shape", ErrShape, spec)
	}
	return out, nil
}

// opName reports whether op is a name the reports can print as it is in
// a Markdown table cell and a line of text: ASCII letters, digits, '_',
// '-' and '.' (q, gate_proj, w1.a).
func opName(op string) bool {
	for _, r := range op {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// parseDims reads "NxK" with positive N and K.
func parseDims(s string) (n, k int, err error) {
	a, b, ok := strings.Cut(strings.ToLower(s), "x")
	if !ok {
		return 0, 0, errors.New("no 'x'")
	}
	n, err1 := strconv.Atoi(strings.TrimSpace(a))
	k, err2 := strconv.Atoi(strings.TrimSpace(b))
	if err1 != nil || err2 != nil || n < 1 || k < 1 || n > MaxDim || k > MaxDim {
		return 0, 0, fmt.Errorf("N and K must be integers in [1, %d]", MaxDim)
	}
	return n, k, nil
}
