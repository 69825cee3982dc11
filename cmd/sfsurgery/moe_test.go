package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
)

// randomTensor is a BF16 tensor source of random values in (-1, 1).
type randomTensor []byte

func (b randomTensor) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b)
	return int64(n), err
}

func newRandomTensor(shape []int64, seed uint64) randomTensor {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	rng := rand.New(rand.NewPCG(seed, 2))
	b := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(float32(rng.Float64()*2-1))>>16))
	}
	return b
}

// writeMixtral writes a model directory of one Mixtral layer (4 experts,
// hidden 64, intermediate 128) and one layer whose experts are stacked
// into 3-D tensors, as transformers' fused experts store them.
func writeMixtral(t *testing.T, dir string) {
	t.Helper()
	const h, i = 64, 128
	type named struct {
		name  string
		shape []int64
	}
	shapes := []named{
		{"model.embed_tokens.weight", []int64{256, h}},
		{"model.norm.weight", []int64{h}},
		{"lm_head.weight", []int64{256, h}},
		{"model.layers.0.input_layernorm.weight", []int64{h}},
		{"model.layers.0.self_attn.q_proj.weight", []int64{h, h}},
		{"model.layers.0.self_attn.k_proj.weight", []int64{h / 2, h}},
		{"model.layers.0.self_attn.v_proj.weight", []int64{h / 2, h}},
		{"model.layers.0.self_attn.o_proj.weight", []int64{h, h}},
		{"model.layers.0.block_sparse_moe.gate.weight", []int64{4, h}},
		{"model.layers.1.mlp.gate.weight", []int64{4, h}},
		{"model.layers.1.mlp.experts.gate_up_proj", []int64{4, 2 * i, h}},
		{"model.layers.1.mlp.experts.down_proj", []int64{4, h, i}},
	}
	for _, e := range []string{"0", "1", "2", "3"} {
		p := "model.layers.0.block_sparse_moe.experts." + e
		shapes = append(shapes,
			named{p + ".w1.weight", []int64{i, h}},
			named{p + ".w2.weight", []int64{h, i}},
			named{p + ".w3.weight", []int64{i, h}})
	}
	var specs []checkpoint.TensorSpec
	for k, s := range shapes {
		specs = append(specs, checkpoint.TensorSpec{Name: s.name, DType: checkpoint.BF16, Shape: s.shape,
			Src: newRandomTensor(s.shape, uint64(k+1))})
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.WriteFile(context.Background(), filepath.Join(dir, "model.safetensors"), specs, nil, nil); err != nil {
		t.Fatal(err)
	}
	cfg := `{"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": 4}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPruneVerifyMixtral prunes a Mixtral-named model through the CLI in
// every format, verifies the output against the original, checks the
// summary and the report's count of projection-like tensors not pruned,
// and that pruning the output again fails on one line.
func TestPruneVerifyMixtral(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "mixtral")
	writeMixtral(t, in)
	const stacked = "not matched by the default targets; a 3-D tensor (experts stacked in one tensor), which the 2:4 formats cannot store"
	for _, f := range []string{"ampere", "bitmask", "dense"} {
		t.Run(f, func(t *testing.T) {
			out := filepath.Join(dir, f)
			code, stdout, errs := sfs(t, "prune", in, "-o", out, "--format", f)
			if code != exitOK {
				t.Fatalf("prune: exit %d: %s", code, errs)
			}
			for _, want := range []string{
				"pruned 16 tensors, 0 left dense, 2 projection-like tensors not pruned\n",
				"not pruned: model.layers.N.mlp.experts.down_proj ×1: " + stacked + "\n",
				"not pruned: model.layers.N.mlp.experts.gate_up_proj ×1: " + stacked + "\n",
			} {
				if !strings.Contains(stdout, want) {
					t.Errorf("summary lacks %q:\n%s", want, stdout)
				}
			}
			code, stdout, _ = sfs(t, "verify", out, "--original", in, "--device", "cpu")
			if code != exitOK || !strings.Contains(stdout, "PASS") {
				t.Errorf("verify: exit %d\n%s", code, stdout)
			}
			var rep format.Report
			b, err := os.ReadFile(filepath.Join(out, "sfsurgery.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			if rep.Pruned != 16 || len(rep.NotPruned) != 2 || rep.NotPruned[0].Reason != stacked {
				t.Errorf("report: pruned %d, not pruned %+v", rep.Pruned, rep.NotPruned)
			}
			code, _, errs = sfs(t, "prune", out, "-o", filepath.Join(dir, f+"-again"))
			if code != exitError || strings.Count(errs, "\n") != 1 ||
				!strings.Contains(errs, "already pruned (format "+f+", by sfsurgery "+toolVersion()+")") {
				t.Errorf("prune of the output: exit %d, stderr %q", code, errs)
			}
		})
	}
}
