package verify_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/verify"
)

// bigTarget writes and prunes (ampere, without its report) a checkpoint
// of one 2048×4096 BF16 target, 16 MiB dense: several chunks of the walk.
func bigTarget(t *testing.T) string {
	t.Helper()
	const rows, cols = 2048, 4096
	in := filepath.Join(t.TempDir(), "big.safetensors")
	writeModel(t, in, []tensor{{"model.layers.0.mlp.up_proj.weight", checkpoint.BF16, rows, cols, randomWeight(rows*cols, checkpoint.BF16, 9)}})
	out := filepath.Join(t.TempDir(), "big-2of4.safetensors")
	pruneFile(t, in, out, format.Ampere)
	if err := os.Remove(format.ReportPath(out, true)); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCancel(t *testing.T) {
	ck, err := checkpoint.Open(bigTarget(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()

	t.Run("before Run", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		rep, err := verify.Run(ctx, ck, verify.Options{Device: "cpu"})
		if !errors.Is(err, context.Canceled) || rep != nil {
			t.Errorf("Run = %v, %v; want no report and context.Canceled", rep, err)
		}
	})

	// The first Progress call (the walk's first chunk) cancels: the walk
	// stops before its next chunk and the numeric check never starts, so
	// Run reports the cancellation rather than a verdict.
	t.Run("from Progress", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var calls atomic.Int64
		var total int64
		opt := verify.Options{Device: "cpu", Tokens: verify.MaxTokens, Workers: 1,
			ProgressTotal: func(n int64) { total = n },
			Progress: func(int64) {
				calls.Add(1)
				cancel()
			}}
		rep, err := verify.Run(ctx, ck, opt)
		if !errors.Is(err, context.Canceled) || rep != nil {
			t.Fatalf("Run = %v, %v; want no report and context.Canceled", rep, err)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("%d Progress calls after the cancel, want none after the first", n-1)
		}
		if total != 2048*4096*2 {
			t.Errorf("ProgressTotal %d, want the dense bytes %d", total, 2048*4096*2)
		}
	})
}

func TestTokens(t *testing.T) {
	ck, err := checkpoint.Open(pruned(t, format.Ampere))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	tests := []struct {
		tokens int
		set    bool
		ok     bool
	}{
		{0, false, true}, // the default
		{1, true, true},
		{0, true, false},
		{-1, false, false},
		{-8, true, false},
		{verify.MaxTokens + 1, true, false},
		{100_000_000, true, false},
	}
	for _, tt := range tests {
		rep, err := verify.Run(context.Background(), ck, verify.Options{Device: "cpu", Tokens: tt.tokens, TokensSet: tt.set})
		switch {
		case tt.ok && err != nil:
			t.Errorf("Tokens %d (set %v): %v", tt.tokens, tt.set, err)
		case !tt.ok && !errors.Is(err, verify.ErrTokens):
			t.Errorf("Tokens %d (set %v): err %v, want ErrTokens", tt.tokens, tt.set, err)
		case !tt.ok && rep != nil:
			t.Errorf("Tokens %d (set %v): a report besides the error", tt.tokens, tt.set)
		}
	}
}
