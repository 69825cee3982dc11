package surgery_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/surgery"
)

// TestTorchGolden compares the ampere output with PyTorch's own
// sparse_semi_structured_from_dense_cutlass on the same pruned weights:
// testdata/torch/*.json holds the SHA-256 of what torch produced, made by
// testdata/torch/cutlass_oracle.py on the GPU machine (torch 2.11).
func TestTorchGolden(t *testing.T) {
	cases := []struct{ golden, input string }{
		{"tiny-llama-bf16-ampere.json", testdataModel},
		{"tiny-llama-fp16-ampere.json", fixture(t, "tiny-llama-fp16")},
	}
	for _, c := range cases {
		t.Run(c.golden, func(t *testing.T) {
			var g struct {
				Torch   string `json:"torch"`
				Tensors map[string]struct {
					Packed string `json:"packed_sha256"`
					Meta   string `json:"meta_sha256"`
				} `json:"tensors"`
			}
			if err := json.Unmarshal(fileBytes(t, filepath.Join("..", "testdata", "torch", c.golden)), &g); err != nil {
				t.Fatal(err)
			}
			if len(g.Tensors) != 28 {
				t.Fatalf("golden has %d tensors", len(g.Tensors))
			}
			out := filepath.Join(t.TempDir(), "ampere")
			prune(t, c.input, out, surgery.Options{Format: format.Ampere}, checkpoint.WriteOptions{})
			ck, err := checkpoint.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			for name, want := range g.Tensors {
				base := strings.TrimSuffix(name, ".weight")
				for suffix, hash := range map[string]string{".packed": want.Packed, ".meta": want.Meta} {
					f, info, ok := ck.Lookup(base + suffix)
					if !ok {
						t.Errorf("no %s%s", base, suffix)
						continue
					}
					sum := sha256.Sum256(f.Data(info))
					if got := hex.EncodeToString(sum[:]); got != hash {
						t.Errorf("%s%s differs from torch %s's bytes", base, suffix, g.Torch)
					}
				}
			}
		})
	}
}
