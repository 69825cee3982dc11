package speed

import (
	"slices"

	"github.com/sfsurgery/sfsurgery/llama"
)

// Fusion says whether shapes are the matrices a checkpoint stores or the
// ones a serving engine multiplies.
type Fusion int

const (
	// Separate keeps every projection its own matrix, as checkpoints
	// store them.
	Separate Fusion = iota
	// Fused stacks, per layer, q, k and v into one qkv matrix and gate
	// and up into one gate_up matrix (their rows one after another, so N
	// is the sum and K the shared input), as vLLM (QKVParallelLinear,
	// MergedColumnParallelLinear) and TensorRT-LLM load them. Projections
	// whose group is incomplete in a layer, whose K differ, or whose
	// stacked N would pass MaxDim, stay apart.
	Fused
)

// projection is one target weight before shapes are merged: the model
// and module it belongs to (the module is the unit of fusion: a layer's
// attention or MLP), its op and its shape.
type projection struct {
	model, module string
	op            string
	n, k          int
}

// moduleOf returns the module of a weight name, the name without its
// ".<op>_proj.weight" tail ("model.layers.3.self_attn"), or the name
// itself for weights that are no LLaMA projection.
func moduleOf(name string) string {
	if module, _, ok := llama.SplitProjection(name); ok {
		return module
	}
	return name
}

// fuse returns ps with each complete stack of a module (llama.Stacks:
// every op of the stack present once, all with one K) replaced by one
// projection named for the stack, at the place of the stack's first op.
// ps is not modified.
func fuse(ps []projection) []projection {
	out := slices.Clone(ps)
	for _, g := range llama.Stacks() {
		var modules []string
		for _, p := range out {
			if p.op == g.Parts[0] && !slices.Contains(modules, p.module) {
				modules = append(modules, p.module)
			}
		}
		for _, mod := range modules {
			out = fuseModule(out, mod, g)
		}
	}
	return out
}

// fuseModule fuses stack g within module mod of ps, if it is complete
// there and its stacked N is at most MaxDim.
func fuseModule(ps []projection, mod string, g llama.Stack) []projection {
	at := make([]int, len(g.Parts))
	for i, op := range g.Parts {
		at[i] = -1
		for j, p := range ps {
			if p.module != mod || p.op != op {
				continue
			}
			if at[i] >= 0 {
				return ps // the op twice: not one layer's group
			}
			at[i] = j
		}
		if at[i] < 0 || ps[at[i]].k != ps[at[0]].k {
			return ps
		}
	}
	stacked := projection{model: ps[at[0]].model, module: mod, op: g.Op, k: ps[at[0]].k}
	for _, j := range at {
		stacked.n += ps[j].n
	}
	if stacked.n > MaxDim {
		return ps // a matrix no kernel takes: the parts stay apart
	}
	first := slices.Min(at)
	out := make([]projection, 0, len(ps)-len(at)+1)
	for j, p := range ps {
		switch {
		case j == first:
			out = append(out, stacked)
		case !slices.Contains(at, j):
			out = append(out, p)
		}
	}
	return out
}
