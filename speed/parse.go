package speed

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// MaxTokens is the largest token count ParseMs accepts.
const MaxTokens = 1 << 20

// ErrParse is wrapped by the errors of ParseMs and ParseDType.
var ErrParse = errors.New("invalid value")

// ParseMs reads token counts M: positive integers up to MaxTokens,
// comma-separated (empty items are skipped; at least one is needed).
func ParseMs(s string) ([]int, error) {
	var out []int
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		m, err := strconv.Atoi(item)
		if err != nil || m < 1 || m > MaxTokens {
			return nil, fmt.Errorf("%w: %q: %q is not a token count in [1, %d]", ErrParse, s, item, MaxTokens)
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %q names no token count", ErrParse, s)
	}
	return out, nil
}

// ParseDType reads the element type of a measurement: bf16, or f16 (also
// fp16), in any case.
func ParseDType(s string) (checkpoint.DType, error) {
	switch strings.ToLower(s) {
	case "bf16":
		return checkpoint.BF16, nil
	case "f16", "fp16":
		return checkpoint.F16, nil
	}
	return "", fmt.Errorf("%w: %q: want bf16 or f16", ErrParse, s)
}

// WriteShapes lists shapes, one a line: the model, the stacked
// projections, N, K and how many of the model's layers have the shape.
func WriteShapes(w io.Writer, shapes []Shape) error {
	var b strings.Builder
	for _, s := range shapes {
		fmt.Fprintf(&b, "%-14s %-12s N=%-6d K=%-6d count=%d\n", s.Model, strings.Join(s.Ops, ","), s.N, s.K, s.Count)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
