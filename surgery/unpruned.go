package surgery

import (
	"strings"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
)

// ProjectionLike reports whether a tensor looks like the weight of a
// linear projection, so that prune lists it when it is not a target
// rather than copying it silently. On the dot-separated components of
// name, compared in lower case, the rule is:
//
//   - the tensor is floating point and either a matrix or a 3-D stack of
//     matrices (experts stored as one [experts][…][…] tensor);
//   - its last component is "weight", or, for a 3-D tensor, names a
//     projection itself (experts.gate_up_proj, experts.down_proj);
//   - some component names a projection: it contains "proj" (q_proj,
//     qkv_proj, gate_up_proj, c_proj, out_proj), starts with "dense" or
//     "linear", or is experts, shared_expert(s), w1, w2, w3, wq, wk, wv,
//     wo, wqkv, fc1, fc2, c_fc, c_attn, query_key_value, query, key or
//     value;
//   - no component names an embedding (contains "embed", wte, wpe),
//     lm_head, a norm (contains "norm", ln, ln_*), a bias (bias, *_bias)
//     or a router (gate, shared_expert_gate, contains "router").
func ProjectionLike(name string, dtype checkpoint.DType, shape []int64) bool {
	if len(shape) != 2 && len(shape) != 3 {
		return false
	}
	if d := string(dtype); !strings.HasPrefix(d, "F") && dtype != checkpoint.BF16 {
		return false
	}
	parts := strings.Split(strings.ToLower(name), ".")
	last := parts[len(parts)-1]
	if last != "weight" && !(len(shape) == 3 && projectionWord(last)) {
		return false
	}
	proj := false
	for _, c := range parts {
		if excludedWord(c) {
			return false
		}
		proj = proj || projectionWord(c)
	}
	return proj
}

// projectionWord reports whether a name component names a projection.
func projectionWord(c string) bool {
	switch c {
	case "experts", "shared_expert", "shared_experts", "w1", "w2", "w3", "wq", "wk", "wv", "wo", "wqkv",
		"fc1", "fc2", "c_fc", "c_attn", "query_key_value", "query", "key", "value":
		return true
	}
	return strings.Contains(c, "proj") || strings.HasPrefix(c, "dense") || strings.HasPrefix(c, "linear")
}

// excludedWord reports whether a name component marks an embedding,
// lm_head, a norm, a bias or a router.
func excludedWord(c string) bool {
	switch c {
	case "wte", "wpe", "lm_head", "ln", "bias", "gate", "shared_expert_gate":
		return true
	}
	return strings.Contains(c, "embed") || strings.Contains(c, "norm") || strings.HasPrefix(c, "ln_") ||
		strings.HasSuffix(c, "_bias") || strings.Contains(c, "router")
}

// noteNotPruned records a tensor that is not a target when it is
// projection-like, with the reason.
func (p *Plan) noteNotPruned(info checkpoint.TensorInfo) {
	if !ProjectionLike(info.Name, info.DType, info.Shape) {
		return
	}
	reason := p.Options.Selector.Why(info.Name)
	if len(info.Shape) == 3 {
		reason += "; a 3-D tensor (experts stacked in one tensor), which the 2:4 formats cannot store"
	}
	p.NotPruned = append(p.NotPruned, format.NotPruned{Name: info.Name, DType: info.DType, Shape: info.Shape, Reason: reason})
}

// FoldIndices replaces every all-digit dotted component of a tensor name
// (layer and expert numbers) with N, so that a listing can count the
// tensors of one kind: model.layers.N.block_sparse_moe.experts.N.w1.weight.
func FoldIndices(name string) string {
	parts := strings.Split(name, ".")
	for i, s := range parts {
		if s != "" && strings.Trim(s, "0123456789") == "" {
			parts[i] = "N"
		}
	}
	return strings.Join(parts, ".")
}
