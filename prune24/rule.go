package prune24

import (
	"fmt"
	"strconv"
)

// Rule is a structured sparsity pattern: how many elements of a group are
// kept.
type Rule int

// The supported rules.
const (
	// Rule24 keeps the 2 largest of every 4 consecutive elements of a row.
	Rule24 Rule = iota
	// Rule12 keeps the larger of every 2 consecutive elements of a row. It
	// is the hardware form of F32 in the Ampere layout.
	Rule12
)

// String returns "2:4" or "1:2", or "Rule(n)" for an invalid r.
func (r Rule) String() string {
	switch r {
	case Rule24:
		return "2:4"
	case Rule12:
		return "1:2"
	}
	return "Rule(" + strconv.Itoa(int(r)) + ")"
}

// checkRule returns an error wrapping ErrInvalidRule unless r is valid.
func checkRule(r Rule) error {
	if r != Rule24 && r != Rule12 {
		return fmt.Errorf("%w: %v", ErrInvalidRule, r)
	}
	return nil
}
