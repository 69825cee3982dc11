package surgery

import (
	"fmt"
	"regexp"
	"strings"
)

// Scope narrows the default targets to a family of projections.
type Scope string

// The scopes accepted by --scope.
const (
	ScopeAll  Scope = "all"
	ScopeAttn Scope = "attn"
	ScopeMLP  Scope = "mlp"
)

// The default target patterns: every linear projection of the decoder
// layers of LLaMA-family models that is stored as one [out][in] matrix
// per weight, so that the 2:4 rule runs along its last (input)
// dimension.
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
// [experts][…][…]), which the writers cannot store.
const (
	attnPattern = `^model\.layers\.\d+\.self_attn\.(q|k|v|o|qkv)_proj\.weight$`
	mlpPattern  = `^model\.layers\.\d+\.(` +
		`mlp\.(gate|up|down|gate_up)_proj` +
		`|mlp\.experts\.\d+\.(gate|up|down)_proj` +
		`|mlp\.shared_experts?\.(gate|up|down)_proj` +
		`|block_sparse_moe\.experts\.\d+\.w[123]` +
		`)\.weight$`
)

// Selector decides which tensors are targets: a tensor is a target when
// it matches one of Targets (the scope's defaults when Targets is empty)
// and none of Ignore.
type Selector struct {
	Targets []*regexp.Regexp
	Ignore  []*regexp.Regexp
	// scope is the --scope that narrowed the default targets, and
	// outside the default patterns it left out; both are empty when the
	// targets are the user's or the defaults of every scope.
	scope   Scope
	outside []*regexp.Regexp
	// custom is set when Targets came from --targets.
	custom bool
}

// NewSelector compiles the --targets and --ignore expressions. An empty
// targets list selects the default projections of scope.
func NewSelector(targets, ignore []string, scope Scope) (*Selector, error) {
	s := &Selector{custom: len(targets) > 0}
	if len(targets) == 0 {
		var outside []string
		switch scope {
		case ScopeAll, "":
			targets = []string{attnPattern, mlpPattern}
		case ScopeAttn:
			targets, outside = []string{attnPattern}, []string{mlpPattern}
		case ScopeMLP:
			targets, outside = []string{mlpPattern}, []string{attnPattern}
		default:
			return nil, fmt.Errorf("unknown scope %q (want all, attn or mlp)", scope)
		}
		if outside != nil {
			s.scope = scope
		}
		for _, o := range outside {
			re, err := regexp.Compile(o)
			if err != nil {
				return nil, fmt.Errorf("default pattern %q: %w", o, err)
			}
			s.outside = append(s.outside, re)
		}
	} else if scope != ScopeAll && scope != "" {
		return nil, fmt.Errorf("--scope and --targets cannot be combined")
	}
	for _, t := range targets {
		re, err := regexp.Compile(t)
		if err != nil {
			return nil, fmt.Errorf("--targets %q: %w", t, err)
		}
		s.Targets = append(s.Targets, re)
	}
	for _, t := range ignore {
		re, err := regexp.Compile(t)
		if err != nil {
			return nil, fmt.Errorf("--ignore %q: %w", t, err)
		}
		s.Ignore = append(s.Ignore, re)
	}
	return s, nil
}

// Match reports whether the tensor called name is a target.
func (s *Selector) Match(name string) bool {
	return firstMatch(s.Targets, name) != nil && firstMatch(s.Ignore, name) == nil
}

// Why says why the tensor called name is not a target: it is excluded by
// an --ignore expression, lies outside the --scope, or matches none of
// the targets. It returns "" for a target.
func (s *Selector) Why(name string) string {
	if firstMatch(s.Targets, name) != nil {
		if re := firstMatch(s.Ignore, name); re != nil {
			return fmt.Sprintf("excluded by --ignore %s", re)
		}
		return ""
	}
	if firstMatch(s.outside, name) != nil {
		return fmt.Sprintf("outside --scope %s", s.scope)
	}
	if s.custom {
		return "not matched by --targets"
	}
	return "not matched by the default targets"
}

// firstMatch returns the first of res that matches name, or nil.
func firstMatch(res []*regexp.Regexp, name string) *regexp.Regexp {
	for _, re := range res {
		if re.MatchString(name) {
			return re
		}
	}
	return nil
}

// String lists the patterns, for reports and errors.
func (s *Selector) String() string {
	var b strings.Builder
	for i, re := range s.Targets {
		if i > 0 {
			b.WriteString(" | ")
		}
		b.WriteString(re.String())
	}
	if len(s.Ignore) > 0 {
		b.WriteString(" minus ")
		for i, re := range s.Ignore {
			if i > 0 {
				b.WriteString(" | ")
			}
			b.WriteString(re.String())
		}
	}
	return b.String()
}
