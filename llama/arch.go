package llama

import (
	"fmt"
	"sort"
	"strings"
)

// Arch is the shape of a LLaMA-family model.
type Arch struct {
	Name         string
	Hidden       int
	Intermediate int
	Heads        int
	KVHeads      int
	Layers       int
	Vocab        int
}

// Archs returns the known shapes by name: tinyllama (TinyLlama 1.1B),
// llama3-8b and llama3-70b.
func Archs() map[string]Arch {
	return map[string]Arch{
		"tinyllama":  {Name: "tinyllama", Hidden: 2048, Intermediate: 5632, Heads: 32, KVHeads: 4, Layers: 22, Vocab: 32000},
		"llama3-8b":  {Name: "llama3-8b", Hidden: 4096, Intermediate: 14336, Heads: 32, KVHeads: 8, Layers: 32, Vocab: 128256},
		"llama3-70b": {Name: "llama3-70b", Hidden: 8192, Intermediate: 28672, Heads: 64, KVHeads: 8, Layers: 80, Vocab: 128256},
	}
}

// ArchNames lists Archs' names, sorted.
func ArchNames() []string {
	var n []string
	for k := range Archs() {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// ParseArch looks an Arch up by name, in any case.
func ParseArch(name string) (Arch, error) {
	a, ok := Archs()[strings.ToLower(name)]
	if !ok {
		return Arch{}, fmt.Errorf("unknown model shape %q (want one of %s)", name, strings.Join(ArchNames(), ", "))
	}
	return a, nil
}

// Projection is one projection weight of a decoder layer: its op and its
// shape, N×K (out × in, as nn.Linear stores it).
type Projection struct {
	Op   string
	N, K int
}

// Projections returns the projections of one decoder layer of a, in the
// canonical order: q, k, v, o, gate, up, down.
func (a Arch) Projections() []Projection {
	h, kv, in := a.Hidden, a.Hidden/a.Heads*a.KVHeads, a.Intermediate
	return []Projection{{"q", h, h}, {"k", kv, h}, {"v", kv, h}, {"o", h, h}, {"gate", in, h}, {"up", in, h}, {"down", h, in}}
}

// Tensor is one weight of a checkpoint: its name and shape.
type Tensor struct {
	Name  string
	Shape []int64
}

// Tensors returns the weights of a checkpoint of a with layers decoder
// layers (a.Layers when layers is 0): EmbedTokens and LMHead when
// embeddings is set, FinalNorm, then for every layer its
// input_layernorm and post_attention_layernorm and its projections in
// the order of Projections.
func (a Arch) Tensors(layers int, embeddings bool) []Tensor {
	if layers <= 0 {
		layers = a.Layers
	}
	h := int64(a.Hidden)
	var ts []Tensor
	if embeddings {
		ts = append(ts, Tensor{EmbedTokens, []int64{int64(a.Vocab), h}}, Tensor{LMHead, []int64{int64(a.Vocab), h}})
	}
	ts = append(ts, Tensor{FinalNorm, []int64{h}})
	for l := range layers {
		p := layerPrefix(l)
		ts = append(ts, Tensor{p + "input_layernorm.weight", []int64{h}}, Tensor{p + "post_attention_layernorm.weight", []int64{h}})
		for _, pr := range a.Projections() {
			ts = append(ts, Tensor{Weight(l, pr.Op), []int64{int64(pr.N), int64(pr.K)}})
		}
	}
	return ts
}
