package verify_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/verify"
)

// TestGPUInfWeights runs the GPU numeric check on weights holding ±Inf
// (q's row 9 holds both, so its products are NaN): the sparse and dense
// products agree by class and verify passes. It skips without a GPU.
func TestGPUInfWeights(t *testing.T) {
	in := infModel(t)
	out := filepath.Join(t.TempDir(), "ampere.safetensors")
	pruneFile(t, in, out, format.Ampere)
	ck, err := checkpoint.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	o, err := checkpoint.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	for _, orig := range []*checkpoint.Checkpoint{nil, o} {
		rep, err := verify.Run(context.Background(), ck, verify.Options{Device: "cuda", Original: orig})
		if err != nil {
			if strings.HasPrefix(err.Error(), "--device cuda") {
				t.Skipf("no GPU: %v", err)
			}
			t.Fatal(err)
		}
		if !rep.OK {
			for _, r := range rep.Results {
				if !r.OK {
					t.Errorf("original %v: %s: %+v", orig != nil, r.Tensor, r.Checks)
				}
			}
		}
		for _, name := range []string{infQ, infV} {
			r := result(t, rep, name)
			for _, c := range r.Checks {
				if c.Name == verify.CheckNumeric && !strings.Contains(c.Detail, "non-finite in both") {
					t.Errorf("original %v: %s: numeric detail %q", orig != nil, name, c.Detail)
				}
			}
		}
		t.Logf("original %v: %s", orig != nil, rep.Device)
	}
}
