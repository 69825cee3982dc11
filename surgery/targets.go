package surgery

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/sfsurgery/sfsurgery/llama"
)

// Scope narrows the default targets to a family of projections.
type Scope string

// The scopes accepted by --scope.
const (
	ScopeAll  Scope = "all"
	ScopeAttn Scope = "attn"
	ScopeMLP  Scope = "mlp"
)

// Selector decides which tensors are targets: a tensor is a target when
// it matches one of Targets (the scope's defaults when Targets is empty:
// llama.AttnPattern and llama.MLPPattern, the projection weights) and
// none of Ignore.
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
			targets = []string{llama.AttnPattern, llama.MLPPattern}
		case ScopeAttn:
			targets, outside = []string{llama.AttnPattern}, []string{llama.MLPPattern}
		case ScopeMLP:
			targets, outside = []string{llama.MLPPattern}, []string{llama.AttnPattern}
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
