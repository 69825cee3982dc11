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

// The default target patterns: the attention and MLP projections of
// LLaMA-family models (TinyLlama, Llama 2/3, Mistral, Qwen2 share these
// names). Embeddings, lm_head, norms and biases never match.
const (
	attnPattern = `^model\.layers\.\d+\.self_attn\.(q|k|v|o)_proj\.weight$`
	mlpPattern  = `^model\.layers\.\d+\.mlp\.(gate|up|down)_proj\.weight$`
)

// Selector decides which tensors are targets: a tensor is a target when
// it matches one of Targets (the scope's defaults when Targets is empty)
// and none of Ignore.
type Selector struct {
	Targets []*regexp.Regexp
	Ignore  []*regexp.Regexp
}

// NewSelector compiles the --targets and --ignore expressions. An empty
// targets list selects the default projections of scope.
func NewSelector(targets, ignore []string, scope Scope) (*Selector, error) {
	s := &Selector{}
	if len(targets) == 0 {
		switch scope {
		case ScopeAll, "":
			targets = []string{attnPattern, mlpPattern}
		case ScopeAttn:
			targets = []string{attnPattern}
		case ScopeMLP:
			targets = []string{mlpPattern}
		default:
			return nil, fmt.Errorf("unknown scope %q (want all, attn or mlp)", scope)
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
	hit := false
	for _, re := range s.Targets {
		if re.MatchString(name) {
			hit = true
			break
		}
	}
	if !hit {
		return false
	}
	for _, re := range s.Ignore {
		if re.MatchString(name) {
			return false
		}
	}
	return true
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
