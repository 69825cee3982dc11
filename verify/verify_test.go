package verify_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/kernels"
	"github.com/sfsurgery/sfsurgery/verify"
)

const testdataModel = "../testdata/tiny-llama-bf16"

// pruned writes testdata pruned in format f into a temp dir.
func pruned(t *testing.T, f format.Format) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), string(f))
	pruneFile(t, testdataModel, out, f)
	return out
}

// run verifies dir, against testdata when withOriginal is set.
func run(t *testing.T, dir string, withOriginal bool) *verify.Report {
	t.Helper()
	orig := ""
	if withOriginal {
		orig = testdataModel
	}
	return verifyPath(t, dir, orig)
}

// patch rewrites byte off of tensor name (in whatever shard holds it)
// with fn.
func patch(t *testing.T, dir, name string, off int64, fn func(byte) byte) {
	t.Helper()
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, info, ok := ck.Lookup(name)
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	path, pos := f.Path(), f.DataOffset+info.Begin+off
	ck.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[pos] = fn(b[pos])
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// failedTensors returns the tensors whose results failed, with the
// names of the failed checks.
func failedTensors(rep *verify.Report) map[string][]string {
	out := map[string][]string{}
	for _, r := range rep.Results {
		for _, c := range r.Checks {
			if !c.OK {
				out[r.Tensor] = append(out[r.Tensor], c.Name)
			}
		}
	}
	return out
}

func TestCleanOutputsPass(t *testing.T) {
	for _, f := range []format.Format{format.Ampere, format.Bitmask, format.Dense} {
		for _, orig := range []bool{false, true} {
			rep := run(t, pruned(t, f), orig)
			if !rep.OK || rep.Failed != 0 {
				t.Errorf("%s (original %v): %v", f, orig, failedTensors(rep))
			}
			for _, r := range rep.Results {
				if r.Format == string(f) && f != format.Dense && (r.RelErr != 0 || r.MaxAbs != 0) {
					t.Errorf("%s: %s: CPU products differ by %g (max %g); they add the same terms in the same order", f, r.Tensor, r.RelErr, r.MaxAbs)
				}
			}
		}
	}
}

func TestCorruptionIsCaught(t *testing.T) {
	const q = "model.layers.1.self_attn.q_proj"
	const up = "model.layers.2.mlp.up_proj"
	tests := []struct {
		name      string
		format    format.Format
		tensor    string // tensor patched
		off       int64
		fn        func(byte) byte
		original  bool
		wantCheck string
		blame     string // the result that must fail
	}{
		// 0x4 (slots 0,1) -> 0x8 (slots 0,2): still a valid nibble, so
		// only the round trip and the products can tell.
		{"meta nibble to another valid one", format.Ampere, q + ".meta", 0, swapNibble, true, "rule", q + ".weight"},
		{"meta nibble to an invalid one", format.Ampere, q + ".meta", 1, func(b byte) byte { return b&0xF0 | 0x0 }, false, "round-trip", q + ".weight"},
		{"packed value", format.Ampere, up + ".packed", 1, func(b byte) byte { return b ^ 0x01 }, true, "rule", up + ".weight"},
		{"bitmask bit", format.Bitmask, up + ".bitmask", 3, func(b byte) byte { return b ^ 0x01 }, false, "round-trip", up + ".weight"},
		{"compressed value", format.Bitmask, up + ".compressed", 5, func(b byte) byte { return b ^ 0x40 }, true, "rule", up + ".weight"},
		{"dense weight", format.Dense, up + ".weight", 0, func(b byte) byte { return b ^ 0x01 }, true, "rule", up + ".weight"},
		{"non-target byte", format.Ampere, "model.norm.weight", 2, func(b byte) byte { return b ^ 0x80 }, true, "identical", "model.norm.weight"},
		{"non-target byte (dense)", format.Dense, "lm_head.weight", 100, func(b byte) byte { return b + 1 }, true, "identical", "lm_head.weight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := pruned(t, tt.format)
			patch(t, dir, tt.tensor, tt.off, tt.fn)
			rep := run(t, dir, tt.original)
			if rep.OK {
				t.Fatal("verify passed a corrupted checkpoint")
			}
			failed := failedTensors(rep)
			checks, ok := failed[tt.blame]
			if !ok {
				t.Fatalf("failure not blamed on %s: %v", tt.blame, failed)
			}
			if !strings.Contains(strings.Join(checks, ","), tt.wantCheck) {
				t.Errorf("%s failed %v, want %s among them", tt.blame, checks, tt.wantCheck)
			}
			// The patched tensor's digest fails too.
			if d := failed[tt.tensor]; !slices.Contains(d, verify.CheckDigest) {
				t.Errorf("the digest of %s did not fail: %v", tt.tensor, failed)
			}
			delete(failed, tt.tensor)
			delete(failed, tt.blame)
			if len(failed) != 0 {
				t.Errorf("other tensors blamed too: %v", failed)
			}
		})
	}
}

// swapNibble changes the lowest meta nibble between 0x4 and 0x8 (or
// 0x9/0xD/0xC/0xE to a neighbour), keeping it valid.
func swapNibble(b byte) byte {
	swap := map[byte]byte{0x4: 0x8, 0x8: 0x4, 0x9: 0xD, 0xD: 0x9, 0xC: 0xE, 0xE: 0xC}
	return b&0xF0 | swap[b&0x0F]
}

func TestNothingToVerify(t *testing.T) {
	ck, err := checkpoint.Open(testdataModel)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if _, err := verify.Run(context.Background(), ck, verify.Options{}); err == nil || !strings.Contains(err.Error(), "nothing to verify") {
		t.Errorf("err = %v, want nothing to verify", err)
	}
}

func TestUnknownDevice(t *testing.T) {
	ck, err := checkpoint.Open(pruned(t, format.Ampere))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if _, err := verify.Run(context.Background(), ck, verify.Options{Device: "tpu"}); err == nil {
		t.Error("unknown device accepted")
	}
	// No machine has GPU 1<<20: cuda fails with an error that says the GPU
	// is unavailable, and auto falls back to the CPU and says why.
	const noGPU = 1 << 20
	if _, err := verify.Run(context.Background(), ck, verify.Options{Device: "cuda", GPU: noGPU}); !errors.Is(err, kernels.ErrUnavailable) {
		t.Errorf("cuda on GPU %d: err = %v, want kernels.ErrUnavailable", noGPU, err)
	}
	rep, err := verify.Run(context.Background(), ck, verify.Options{Device: "auto", GPU: noGPU})
	if err != nil {
		t.Fatalf("auto on GPU %d: %v", noGPU, err)
	}
	if !strings.HasPrefix(rep.Device, "cpu") || !strings.Contains(rep.Device, "GPU unavailable") {
		t.Errorf("auto on GPU %d: device = %q, want the CPU and why", noGPU, rep.Device)
	}
}
