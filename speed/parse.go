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

// maxListed bounds how many token counts ParseMs returns.
const maxListed = 4096

// ParseMs reads token counts M: positive integers up to MaxTokens and
// inclusive ranges A-B of them, comma-separated (empty items are skipped;
// at least one count is needed, at most 4096 in all), in the order given.
func ParseMs(s string) ([]int, error) {
	var out []int
	count := func(item, text string) (int, error) {
		m, err := strconv.Atoi(strings.TrimSpace(text))
		if err != nil || m < 1 || m > MaxTokens {
			return 0, fmt.Errorf("%w: %q: %q is not a token count in [1, %d]", ErrParse, s, item, MaxTokens)
		}
		return m, nil
	}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(item, "-")
		a, err := count(item, lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = count(item, hi); err != nil {
				return nil, err
			}
			if b < a {
				return nil, fmt.Errorf("%w: %q: range %q runs backwards", ErrParse, s, item)
			}
		}
		if len(out)+b-a+1 > maxListed {
			return nil, fmt.Errorf("%w: %q: more than %d token counts", ErrParse, s, maxListed)
		}
		for m := a; m <= b; m++ {
			out = append(out, m)
		}
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

// ParseOutput reads the element type dense and ours write y in for a
// measurement of dt: f32 (also fp32), or dt's own name (ParseDType's), in
// any case.
func ParseOutput(s string, dt checkpoint.DType) (checkpoint.DType, error) {
	if l := strings.ToLower(s); l == "f32" || l == "fp32" {
		return checkpoint.F32, nil
	}
	if got, err := ParseDType(s); err == nil && got == dt {
		return dt, nil
	}
	return "", fmt.Errorf("%w: %q: want f32 or the data type (%s)", ErrParse, s, strings.ToLower(string(dt)))
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
