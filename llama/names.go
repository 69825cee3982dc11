package llama

import (
	"fmt"
	"slices"
	"strings"
)

// The patterns of the projection weights of the decoder layers of
// LLaMA-family models that are stored as one [out][in] matrix per
// weight, so that a 2:4 rule runs along its last (input) dimension: the
// default targets of prune, as regular expressions.
//
// Attention: q, k, v, o (TinyLlama, Llama 2/3, Mistral, Qwen2, Mixtral,
// Qwen2-MoE, Qwen3-MoE) and Phi-3's fused qkv.
//
// MLP: gate, up, down and Phi-3's fused gate_up; the experts of Mixtral
// (block_sparse_moe.experts.E.w1, w3 [intermediate][hidden] and w2
// [hidden][intermediate]) and of Qwen2-MoE and Qwen3-MoE
// (mlp.experts.E.gate_proj, up_proj, down_proj), and Qwen2-MoE's shared
// expert (mlp.shared_expert.gate_proj, up_proj, down_proj; DeepSeek's
// mlp.shared_experts likewise).
//
// Embeddings, lm_head, norms and biases never match, nor do the routers
// (block_sparse_moe.gate, mlp.gate, mlp.shared_expert_gate: a few rows of
// [experts][hidden] whose pruning would change which experts run), nor
// experts stacked into one 3-D tensor (experts.gate_up_proj
// [experts][…][…]), which the 2:4 formats cannot store.
const (
	AttnPattern = `^model\.layers\.\d+\.self_attn\.(q|k|v|o|qkv)_proj\.weight$`
	MLPPattern  = `^model\.layers\.\d+\.(` +
		`mlp\.(gate|up|down|gate_up)_proj` +
		`|mlp\.experts\.\d+\.(gate|up|down)_proj` +
		`|mlp\.shared_experts?\.(gate|up|down)_proj` +
		`|block_sparse_moe\.experts\.\d+\.w[123]` +
		`)\.weight$`
)

// The weights outside the decoder layers.
const (
	EmbedTokens = "model.embed_tokens.weight"
	LMHead      = "lm_head.weight"
	FinalNorm   = "model.norm.weight"
)

// ops is the canonical order of the projection ops, each stack after its
// last part.
func ops() []string {
	return []string{"q", "k", "v", "qkv", "o", "gate", "up", "gate_up", "down"}
}

// OpIndex returns the place of op in the canonical order of LLaMA
// projections (q, k, v, qkv, o, gate, up, gate_up, down: each stack after
// its last part), or -1 for any other name.
func OpIndex(op string) int {
	return slices.Index(ops(), op)
}

// SplitProjection splits the name of a projection weight,
// "<module>.<op>_proj.weight" with op one of OpIndex's, into its module
// ("model.layers.3.self_attn", or "" for a bare "q_proj.weight") and op
// ("q"). ok is false for any other name.
func SplitProjection(name string) (module, op string, ok bool) {
	rest, ok := strings.CutSuffix(name, "_proj.weight")
	if !ok {
		return "", "", false
	}
	if i := strings.LastIndexByte(rest, '.'); i >= 0 {
		module, op = rest[:i], rest[i+1:]
	} else {
		op = rest
	}
	if OpIndex(op) < 0 {
		return "", "", false
	}
	return module, op, true
}

// moduleOf returns the module of a decoder layer that holds op: self_attn
// for the attention projections, mlp for the others.
func moduleOf(op string) string {
	switch op {
	case "q", "k", "v", "o", "qkv":
		return "self_attn"
	}
	return "mlp"
}

// Weight returns the name of the weight of projection op in decoder
// layer layer: Weight(3, "q") is "model.layers.3.self_attn.q_proj.weight".
func Weight(layer int, op string) string {
	return fmt.Sprintf("%s%s.%s_proj.weight", layerPrefix(layer), moduleOf(op), op)
}

// layerPrefix returns the prefix of the names of decoder layer layer's
// weights, "model.layers.3.".
func layerPrefix(layer int) string {
	return fmt.Sprintf("model.layers.%d.", layer)
}

// Stack is a set of projections that serving engines (vLLM's
// QKVParallelLinear and MergedColumnParallelLinear, TensorRT-LLM) stack
// into one matrix: their rows one after another, so that N is the sum
// and K the shared input.
type Stack struct {
	Op    string   // the stacked matrix's op, as vLLM names the module
	Parts []string // the projections, in the order their rows are stacked
}

// Stacks returns the stacks of a decoder layer: qkv and gate_up.
func Stacks() []Stack {
	return []Stack{{"qkv", []string{"q", "k", "v"}}, {"gate_up", []string{"gate", "up"}}}
}
