package verify

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/prune24"
	"github.com/sfsurgery/sfsurgery/surgery"
)

// prunedAmpere prunes ../testdata into an ampere checkpoint and opens it.
func prunedAmpere(t *testing.T) *checkpoint.Checkpoint {
	t.Helper()
	in, err := checkpoint.Open("../testdata/tiny-llama-bf16")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	p, err := surgery.NewPlan(in, surgery.Options{Format: format.Ampere, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "ampere")
	if _, err := p.Write(context.Background(), out, checkpoint.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}

// TestCancelledPasses: the numeric check and the hashing stop at once on
// a cancelled context, before any work is counted.
func TestCancelledPasses(t *testing.T) {
	ck := prunedAmpere(t)
	comps, err := format.FindCompressed(ck)
	if err != nil || len(comps) == 0 {
		t.Fatalf("FindCompressed: %d, %v", len(comps), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := newCPUNumeric(MaxTokens, 1, "").Compare(ctx, comps[0]); !errors.Is(err, context.Canceled) {
		t.Errorf("Compare: %v, want context.Canceled", err)
	}
	f := ck.Shards[0]
	progressed := false
	if _, err := hashTensor(ctx, f, f.Tensors[0], func(int64) { progressed = true }); !errors.Is(err, context.Canceled) || progressed {
		t.Errorf("hashTensor: %v (progress %v), want context.Canceled and no progress", err, progressed)
	}
	if _, err := walkCompressed(ctx, comps[0], choice{method: format.Magnitude, rule: prune24.Rule24}, true, nil, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("walkCompressed: %v, want context.Canceled", err)
	}
	if _, err := firstDiffChunked(ctx, []byte{1}, []byte{2}); !errors.Is(err, context.Canceled) {
		t.Errorf("firstDiffChunked: %v, want context.Canceled", err)
	}
}

func TestCheckTokens(t *testing.T) {
	tests := []struct {
		tokens int
		set    bool
		ok     bool
	}{
		{0, false, true},
		{1, true, true},
		{MaxTokens, true, true},
		{MaxTokens, false, true},
		{MaxTokens + 1, false, false},
		{0, true, false},
		{-1, false, false},
		{-1 << 62, true, false},
	}
	for _, tt := range tests {
		err := checkTokens(Options{Tokens: tt.tokens, TokensSet: tt.set})
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrTokens)) {
			t.Errorf("checkTokens(%d, set %v) = %v, want ok %v", tt.tokens, tt.set, err, tt.ok)
		}
	}
}
