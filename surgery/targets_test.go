package surgery_test

import (
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/surgery"
)

// TestDefaultTargetsByFamily runs the default selector over the tensor
// names of each supported family: every linear projection stored as one
// matrix is a target, routers, embeddings, norms and biases never are.
func TestDefaultTargetsByFamily(t *testing.T) {
	tests := []struct {
		family, name string
		want         bool
	}{
		// LLaMA (TinyLlama, Llama 2/3) and Mistral share these names.
		{"llama", "model.layers.0.self_attn.q_proj.weight", true},
		{"llama", "model.layers.12.self_attn.k_proj.weight", true},
		{"llama", "model.layers.12.self_attn.v_proj.weight", true},
		{"llama", "model.layers.31.self_attn.o_proj.weight", true},
		{"llama", "model.layers.31.mlp.gate_proj.weight", true},
		{"llama", "model.layers.31.mlp.up_proj.weight", true},
		{"llama", "model.layers.31.mlp.down_proj.weight", true},
		{"llama", "model.embed_tokens.weight", false},
		{"llama", "lm_head.weight", false},
		{"llama", "model.norm.weight", false},
		{"llama", "model.layers.0.input_layernorm.weight", false},
		{"llama", "model.layers.0.post_attention_layernorm.weight", false},
		{"mistral", "model.layers.7.self_attn.k_proj.weight", true},
		{"mistral", "model.layers.7.mlp.down_proj.weight", true},
		// Qwen2: biases on q, k, v.
		{"qwen2", "model.layers.3.self_attn.q_proj.weight", true},
		{"qwen2", "model.layers.3.self_attn.q_proj.bias", false},
		{"qwen2", "model.layers.3.self_attn.v_proj.bias", false},
		// Qwen2-MoE: experts, a shared expert and two routers.
		{"qwen2-moe", "model.layers.2.mlp.experts.0.gate_proj.weight", true},
		{"qwen2-moe", "model.layers.2.mlp.experts.59.up_proj.weight", true},
		{"qwen2-moe", "model.layers.2.mlp.experts.59.down_proj.weight", true},
		{"qwen2-moe", "model.layers.2.mlp.shared_expert.gate_proj.weight", true},
		{"qwen2-moe", "model.layers.2.mlp.shared_expert.up_proj.weight", true},
		{"qwen2-moe", "model.layers.2.mlp.shared_expert.down_proj.weight", true},
		{"qwen2-moe", "model.layers.2.mlp.gate.weight", false},
		{"qwen2-moe", "model.layers.2.mlp.shared_expert_gate.weight", false},
		// Qwen3-MoE: experts and a router, no shared expert.
		{"qwen3-moe", "model.layers.47.mlp.experts.127.gate_proj.weight", true},
		{"qwen3-moe", "model.layers.47.mlp.experts.127.down_proj.weight", true},
		{"qwen3-moe", "model.layers.47.mlp.gate.weight", false},
		{"qwen3-moe", "model.layers.47.self_attn.q_norm.weight", false},
		// Mixtral: w1, w3 [intermediate][hidden], w2 [hidden][intermediate].
		{"mixtral", "model.layers.0.block_sparse_moe.experts.0.w1.weight", true},
		{"mixtral", "model.layers.0.block_sparse_moe.experts.7.w2.weight", true},
		{"mixtral", "model.layers.31.block_sparse_moe.experts.3.w3.weight", true},
		{"mixtral", "model.layers.0.block_sparse_moe.gate.weight", false},
		{"mixtral", "model.layers.0.self_attn.o_proj.weight", true},
		// Experts stacked into one 3-D tensor are not stored by any format.
		{"fused experts", "model.layers.0.mlp.experts.gate_up_proj", false},
		{"fused experts", "model.layers.0.mlp.experts.down_proj", false},
		// Phi-3: fused qkv and gate_up.
		{"phi3", "model.layers.5.self_attn.qkv_proj.weight", true},
		{"phi3", "model.layers.5.self_attn.o_proj.weight", true},
		{"phi3", "model.layers.5.mlp.gate_up_proj.weight", true},
		{"phi3", "model.layers.5.mlp.down_proj.weight", true},
	}
	sel, err := surgery.NewSelector(nil, nil, surgery.ScopeAll)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		if got := sel.Match(tt.name); got != tt.want {
			t.Errorf("%s: Match(%s) = %v, want %v", tt.family, tt.name, got, tt.want)
		}
	}
}

// TestScopes checks that --scope splits the default targets into the
// attention and the MLP projections, fused and expert ones included.
func TestScopes(t *testing.T) {
	tests := []struct {
		name      string
		attn, mlp bool
	}{
		{"model.layers.1.self_attn.qkv_proj.weight", true, false},
		{"model.layers.1.self_attn.k_proj.weight", true, false},
		{"model.layers.1.mlp.gate_up_proj.weight", false, true},
		{"model.layers.1.block_sparse_moe.experts.2.w2.weight", false, true},
		{"model.layers.1.mlp.experts.2.up_proj.weight", false, true},
		{"model.layers.1.mlp.shared_expert.down_proj.weight", false, true},
		{"model.layers.1.mlp.gate.weight", false, false},
	}
	attn, err := surgery.NewSelector(nil, nil, surgery.ScopeAttn)
	if err != nil {
		t.Fatal(err)
	}
	mlp, err := surgery.NewSelector(nil, nil, surgery.ScopeMLP)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		if got := attn.Match(tt.name); got != tt.attn {
			t.Errorf("--scope attn: Match(%s) = %v, want %v", tt.name, got, tt.attn)
		}
		if got := mlp.Match(tt.name); got != tt.mlp {
			t.Errorf("--scope mlp: Match(%s) = %v, want %v", tt.name, got, tt.mlp)
		}
	}
}

// TestSelectorWhy checks the reason given for a tensor that is not a
// target.
func TestSelectorWhy(t *testing.T) {
	const down = "model.layers.3.mlp.down_proj.weight"
	tests := []struct {
		what            string
		targets, ignore []string
		scope           surgery.Scope
		name, want      string
	}{
		{"target", nil, nil, surgery.ScopeAll, down, ""},
		{"defaults", nil, nil, surgery.ScopeAll, "model.layers.3.self_attn.q_a_proj.weight", "not matched by the default targets"},
		{"ignore", nil, []string{`layers\.3\.`}, surgery.ScopeAll, down, `excluded by --ignore layers\.3\.`},
		{"scope attn", nil, nil, surgery.ScopeAttn, down, "outside --scope attn"},
		{"scope mlp", nil, nil, surgery.ScopeMLP, "model.layers.3.self_attn.qkv_proj.weight", "outside --scope mlp"},
		{"scope and neither", nil, nil, surgery.ScopeMLP, "model.layers.3.self_attn.q_a_proj.weight", "not matched by the default targets"},
		{"custom", []string{`q_proj`}, nil, surgery.ScopeAll, down, "not matched by --targets"},
	}
	for _, tt := range tests {
		sel, err := surgery.NewSelector(tt.targets, tt.ignore, tt.scope)
		if err != nil {
			t.Fatal(err)
		}
		if got := sel.Why(tt.name); got != tt.want {
			t.Errorf("%s: Why(%s) = %q, want %q", tt.what, tt.name, got, tt.want)
		}
		if sel.Match(tt.name) != (tt.want == "") {
			t.Errorf("%s: Match(%s) disagrees with Why %q", tt.what, tt.name, tt.want)
		}
	}
}

// TestProjectionLike checks which tensors prune lists when they are not
// targets.
func TestProjectionLike(t *testing.T) {
	mat, stack := []int64{64, 64}, []int64{4, 64, 64}
	tests := []struct {
		name  string
		dtype checkpoint.DType
		shape []int64
		want  bool
	}{
		{"model.layers.0.self_attn.q_proj.weight", checkpoint.BF16, mat, true},
		{"model.layers.0.self_attn.q_a_proj.weight", checkpoint.BF16, mat, true},
		{"model.layers.0.self_attn.kv_a_proj_with_mqa.weight", checkpoint.F16, mat, true},
		{"model.layers.0.block_sparse_moe.experts.0.w2.weight", checkpoint.F32, mat, true},
		{"model.layers.0.mlp.experts.gate_up_proj", checkpoint.BF16, stack, true},
		{"model.layers.0.mlp.experts.down_proj", checkpoint.BF16, stack, true},
		{"gpt_neox.layers.0.attention.query_key_value.weight", checkpoint.F16, mat, true},
		{"gpt_neox.layers.0.attention.dense.weight", checkpoint.F16, mat, true},
		{"transformer.h.0.mlp.dense_h_to_4h.weight", checkpoint.BF16, mat, true},
		{"model.decoder.layers.0.fc1.weight", checkpoint.F16, mat, true},
		{"transformer.h.0.attn.c_attn.weight", checkpoint.F32, mat, true},
		{"transformer.blocks.0.attn.Wqkv.weight", checkpoint.BF16, mat, true},
		{"multi_modal_projector.linear_1.weight", checkpoint.BF16, mat, true},
		// Not projection-like.
		{"model.layers.0.self_attn.q_proj.bias", checkpoint.BF16, []int64{64}, false},
		{"model.layers.0.mlp.experts.gate_up_proj_bias", checkpoint.BF16, []int64{4, 128}, false},
		{"model.layers.0.mlp.experts.gate_up_proj_bias", checkpoint.BF16, stack, false},
		{"model.layers.0.mlp.experts.gate_up_proj", checkpoint.BF16, []int64{4, 4, 64, 64}, false},
		{"model.layers.0.mlp.experts.gate_up_proj", checkpoint.BF16, mat, false},
		{"model.layers.0.mlp.experts.gate_up_proj_blocks", checkpoint.U8, stack, false},
		{"model.layers.0.mlp.down_proj.weight", checkpoint.I8, mat, false},
		{"model.layers.0.mlp.down_proj.weight_scale", checkpoint.BF16, mat, false},
		{"model.layers.0.mlp.gate.weight", checkpoint.BF16, mat, false},
		{"model.layers.0.block_sparse_moe.gate.weight", checkpoint.BF16, mat, false},
		{"model.layers.0.mlp.shared_expert_gate.weight", checkpoint.BF16, mat, false},
		{"model.layers.0.mlp.router.proj.weight", checkpoint.BF16, mat, false},
		{"model.layers.0.self_attn.q_norm.weight", checkpoint.BF16, mat, false},
		{"model.embed_tokens.weight", checkpoint.BF16, mat, false},
		{"model.embed_projection.weight", checkpoint.BF16, mat, false},
		{"transformer.wte.weight", checkpoint.BF16, mat, false},
		{"lm_head.weight", checkpoint.BF16, mat, false},
		{"transformer.h.0.ln_1.weight", checkpoint.BF16, mat, false},
	}
	for _, tt := range tests {
		if got := surgery.ProjectionLike(tt.name, tt.dtype, tt.shape); got != tt.want {
			t.Errorf("ProjectionLike(%s, %s, %v) = %v, want %v", tt.name, tt.dtype, tt.shape, got, tt.want)
		}
	}
}

// TestFoldIndices checks the names the summary groups by.
func TestFoldIndices(t *testing.T) {
	tests := []struct{ in, want string }{
		{"model.layers.12.block_sparse_moe.experts.3.w1.weight", "model.layers.N.block_sparse_moe.experts.N.w1.weight"},
		{"model.layers.0.mlp.experts.gate_up_proj", "model.layers.N.mlp.experts.gate_up_proj"},
		{"lm_head.weight", "lm_head.weight"},
		{"fc1.weight", "fc1.weight"},
		{"a..1", "a..N"},
	}
	for _, tt := range tests {
		if got := surgery.FoldIndices(tt.in); got != tt.want {
			t.Errorf("FoldIndices(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
