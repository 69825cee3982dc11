package verify

import (
	"errors"
	"fmt"
)

// MaxTokens is the largest token count (M) the numerical check accepts.
// Its memory grows with M times the weight's shape. On the CPU, X is M×K
// float64, one copy for all tensors of the same K: at M = 1024 and the
// widest K of the supported families (Qwen2-72B's MLP, 29568, beside a
// hidden size of 8192) that is 300 MiB. On the GPU each of up to 16
// workers holds X on the host (M×K, 10 bytes an element: the raw half and
// its float64 value) and both products (M×N float32, twice): at most
// about 370 MiB a worker at M = 1024, 6 GiB in all. A larger M would ask
// for tens of GiB without making the check any stricter: a wrong nibble
// or value shows at every M.
const MaxTokens = 1024

// defaultCPUTokens is the CPU check's token count when none is asked for.
const defaultCPUTokens = 8

// ErrTokens is wrapped by the error of Run for a token count outside
// 1 to MaxTokens.
var ErrTokens = errors.New("token count out of range")

// checkTokens validates opt.Tokens: 0 without TokensSet means the
// default; anything else must lie in [1, MaxTokens].
func checkTokens(opt Options) error {
	if opt.Tokens == 0 && !opt.TokensSet {
		return nil
	}
	if opt.Tokens < 1 || opt.Tokens > MaxTokens {
		return fmt.Errorf("verify: Tokens = %d: %w: want 1 to %d", opt.Tokens, ErrTokens, MaxTokens)
	}
	return nil
}
