package surgery_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/surgery"
)

// weightSpec names a tensor of a hand-made model and whether the default
// targets prune it.
type weightSpec struct {
	name   string
	shape  []int64
	target bool
}

// familyModel returns the tensors of a one-layer model of family with
// hidden size 64 and intermediate size 128 (multiples of 64, so that
// every target passes the ampere guard).
func familyModel(family string) []weightSpec {
	const h, i = 64, 128
	common := []weightSpec{
		{"model.embed_tokens.weight", []int64{256, h}, false},
		{"model.norm.weight", []int64{h}, false},
		{"model.layers.0.input_layernorm.weight", []int64{h}, false},
		{"model.layers.0.post_attention_layernorm.weight", []int64{h}, false},
		{"model.layers.0.self_attn.o_proj.weight", []int64{h, h}, true},
		{"lm_head.weight", []int64{256, h}, false},
	}
	qkv := []weightSpec{
		{"model.layers.0.self_attn.q_proj.weight", []int64{h, h}, true},
		{"model.layers.0.self_attn.k_proj.weight", []int64{h / 2, h}, true},
		{"model.layers.0.self_attn.v_proj.weight", []int64{h / 2, h}, true},
	}
	var out []weightSpec
	switch family {
	case "mixtral":
		out = append(common, qkv...)
		out = append(out, weightSpec{"model.layers.0.block_sparse_moe.gate.weight", []int64{4, h}, false})
		for _, e := range []string{"0", "1", "2", "3"} {
			p := "model.layers.0.block_sparse_moe.experts." + e
			out = append(out,
				weightSpec{p + ".w1.weight", []int64{i, h}, true},
				weightSpec{p + ".w2.weight", []int64{h, i}, true},
				weightSpec{p + ".w3.weight", []int64{i, h}, true})
		}
	case "qwen2-moe":
		out = append(common, qkv...)
		out = append(out,
			weightSpec{"model.layers.0.self_attn.q_proj.bias", []int64{h}, false},
			weightSpec{"model.layers.0.mlp.gate.weight", []int64{4, h}, false},
			weightSpec{"model.layers.0.mlp.shared_expert_gate.weight", []int64{1, h}, false},
			weightSpec{"model.layers.0.mlp.shared_expert.gate_proj.weight", []int64{i, h}, true},
			weightSpec{"model.layers.0.mlp.shared_expert.up_proj.weight", []int64{i, h}, true},
			weightSpec{"model.layers.0.mlp.shared_expert.down_proj.weight", []int64{h, i}, true})
		for _, e := range []string{"0", "1"} {
			p := "model.layers.0.mlp.experts." + e
			out = append(out,
				weightSpec{p + ".gate_proj.weight", []int64{i, h}, true},
				weightSpec{p + ".up_proj.weight", []int64{i, h}, true},
				weightSpec{p + ".down_proj.weight", []int64{h, i}, true})
		}
	case "phi3":
		out = append(common,
			weightSpec{"model.layers.0.self_attn.qkv_proj.weight", []int64{3 * h, h}, true},
			weightSpec{"model.layers.0.mlp.gate_up_proj.weight", []int64{2 * i, h}, true},
			weightSpec{"model.layers.0.mlp.down_proj.weight", []int64{h, i}, true})
	}
	return out
}

// writeSpecs writes specs with random BF16 values as one file.
func writeSpecs(t *testing.T, path string, specs []weightSpec) {
	t.Helper()
	var ts []tensor
	for k, s := range specs {
		n := int64(1)
		for _, d := range s.shape {
			n *= d
		}
		ts = append(ts, tensor{s.name, checkpoint.BF16, s.shape, randomBF16(int(n), uint64(k+1))})
	}
	writeModel(t, path, ts)
}

// tensorBytes returns the bytes of the tensor called name in ck.
func tensorBytes(t *testing.T, ck *checkpoint.Checkpoint, name string) []byte {
	t.Helper()
	f, info, ok := ck.Lookup(name)
	if !ok {
		t.Fatalf("%s: no tensor %s", ck.Path, name)
	}
	return f.Data(info)
}

// TestPruneMoEAndFused prunes Mixtral-, Qwen2-MoE- and Phi-3-named
// models in every format: the experts, the shared expert and the fused
// projections are pruned, the routers and everything else copied.
func TestPruneMoEAndFused(t *testing.T) {
	for _, family := range []string{"mixtral", "qwen2-moe", "phi3"} {
		t.Run(family, func(t *testing.T) {
			specs := familyModel(family)
			dir := t.TempDir()
			in := filepath.Join(dir, "in.safetensors")
			writeSpecs(t, in, specs)
			var want []string
			for _, s := range specs {
				if s.target {
					want = append(want, s.name)
				}
			}
			slices.Sort(want)
			for _, f := range formats {
				out := filepath.Join(dir, string(f)+".safetensors")
				r := prune(t, in, out, surgery.Options{Format: f}, checkpoint.WriteOptions{})
				var got []string
				for _, tr := range r.Tensors {
					got = append(got, tr.Name)
					if tr.Skip != "" {
						t.Errorf("%s: %s left dense: %s", f, tr.Name, tr.Skip)
					}
				}
				if !slices.Equal(got, want) || r.Pruned != len(want) {
					t.Errorf("%s: pruned %d %v, want %d %v", f, r.Pruned, got, len(want), want)
				}
				if len(r.NotPruned) != 0 {
					t.Errorf("%s: not pruned %v, want none", f, r.NotPruned)
				}
				verifyOK(t, out, in)
				checkOutputNames(t, in, out, f, specs)
			}
		})
	}
}

// checkOutputNames checks that every target of specs is stored in the
// format's tensors and every other tensor is copied byte for byte.
func checkOutputNames(t *testing.T, in, out string, f format.Format, specs []weightSpec) {
	t.Helper()
	ick, err := checkpoint.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer ick.Close()
	ock, err := checkpoint.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ock.Close()
	suffixes := map[format.Format][]string{
		format.Ampere:  {".packed", ".meta", ".shape"},
		format.Bitmask: {".compressed", ".bitmask", ".shape"},
		format.Dense:   {".weight"},
	}[f]
	for _, s := range specs {
		if !s.target {
			if !bytes.Equal(tensorBytes(t, ick, s.name), tensorBytes(t, ock, s.name)) {
				t.Errorf("%s: %s was not copied unchanged", f, s.name)
			}
			continue
		}
		base := strings.TrimSuffix(s.name, ".weight")
		for _, suf := range suffixes {
			if _, _, ok := ock.Lookup(base + suf); !ok {
				t.Errorf("%s: the output has no %s%s", f, base, suf)
			}
		}
		if f == format.Dense && bytes.Equal(tensorBytes(t, ick, s.name), tensorBytes(t, ock, s.name)) {
			t.Errorf("dense: %s is unchanged", s.name)
		}
	}
}

// TestNotPrunedListed checks that projection-like tensors that are not
// targets are listed in the plan and the report with the reason, and
// that nothing else is.
func TestNotPrunedListed(t *testing.T) {
	const (
		qa      = "model.layers.0.self_attn.q_a_proj.weight"
		stacked = "model.layers.0.mlp.experts.gate_up_proj"
		fc1     = "model.vision_tower.layers.0.fc1.weight"
		down    = "model.layers.0.mlp.down_proj.weight"
		up      = "model.layers.0.mlp.up_proj.weight"
		gate    = "model.layers.0.mlp.gate_proj.weight"
		q       = "model.layers.0.self_attn.q_proj.weight"
		o       = "model.layers.0.self_attn.o_proj.weight"
	)
	const stack3D = "; a 3-D tensor (experts stacked in one tensor), which the 2:4 formats cannot store"
	specs := []weightSpec{
		{"model.embed_tokens.weight", []int64{256, 64}, false},
		{"lm_head.weight", []int64{256, 64}, false},
		{"model.layers.0.input_layernorm.weight", []int64{64}, false},
		{q, []int64{64, 64}, true},
		{"model.layers.0.self_attn.q_proj.bias", []int64{64}, false},
		{o, []int64{64, 64}, true},
		{gate, []int64{128, 64}, true},
		{up, []int64{128, 64}, true},
		{down, []int64{64, 128}, true},
		{"model.layers.0.mlp.gate.weight", []int64{4, 64}, false},
		{qa, []int64{64, 64}, false},
		{stacked, []int64{4, 256, 64}, false},
		{fc1, []int64{128, 64}, false},
	}
	in := filepath.Join(t.TempDir(), "in.safetensors")
	writeSpecs(t, in, specs)
	tests := []struct {
		what            string
		targets, ignore []string
		scope           surgery.Scope
		want            map[string]string // name -> reason
	}{
		{"defaults", nil, nil, surgery.ScopeAll, map[string]string{
			qa:      "not matched by the default targets",
			stacked: "not matched by the default targets" + stack3D,
			fc1:     "not matched by the default targets",
		}},
		{"ignore", nil, []string{`down_proj`}, surgery.ScopeAll, map[string]string{
			qa:      "not matched by the default targets",
			stacked: "not matched by the default targets" + stack3D,
			fc1:     "not matched by the default targets",
			down:    "excluded by --ignore down_proj",
		}},
		{"scope attn", nil, nil, surgery.ScopeAttn, map[string]string{
			qa:      "not matched by the default targets",
			stacked: "not matched by the default targets" + stack3D,
			fc1:     "not matched by the default targets",
			gate:    "outside --scope attn",
			up:      "outside --scope attn",
			down:    "outside --scope attn",
		}},
		{"targets", []string{`^model\.layers\.\d+\.self_attn\..*\.weight$`}, nil, surgery.ScopeAll, map[string]string{
			stacked: "not matched by --targets" + stack3D,
			fc1:     "not matched by --targets",
			gate:    "not matched by --targets",
			up:      "not matched by --targets",
			down:    "not matched by --targets",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			sel, err := surgery.NewSelector(tt.targets, tt.ignore, tt.scope)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "out.safetensors")
			r := prune(t, in, out, surgery.Options{Format: format.Dense, Selector: sel}, checkpoint.WriteOptions{})
			got := map[string]string{}
			var names []string
			for _, n := range r.NotPruned {
				got[n.Name] = n.Reason
				names = append(names, n.Name)
			}
			if !slices.IsSorted(names) {
				t.Errorf("not pruned %v is not sorted by name", names)
			}
			for name, reason := range tt.want {
				if got[name] != reason {
					t.Errorf("%s: reason %q, want %q", name, got[name], reason)
				}
			}
			for name := range got {
				if _, ok := tt.want[name]; !ok {
					t.Errorf("%s listed as not pruned: %s", name, got[name])
				}
			}
			if r.Pruned+r.Skipped+len(r.NotPruned) != 5+3 {
				t.Errorf("pruned %d, left dense %d, not pruned %d: want 8 projection-like tensors in all",
					r.Pruned, r.Skipped, len(r.NotPruned))
			}
		})
	}
}

// TestPruneAgainRefused checks that the output of prune, in any format,
// and the output of unpack and a compressed checkpoint without a
// manifest cannot be pruned again.
func TestPruneAgainRefused(t *testing.T) {
	dir := t.TempDir()
	for _, f := range formats {
		out := filepath.Join(dir, string(f))
		prune(t, testdataModel, out, surgery.Options{Format: f}, checkpoint.WriteOptions{})
		for _, again := range formats {
			err := planAndWrite(t, context.Background(), out, filepath.Join(dir, "again"), surgery.Options{Format: again}, checkpoint.WriteOptions{})
			if !errors.Is(err, surgery.ErrAlreadyPruned) {
				t.Fatalf("%s output pruned again to %s: err = %v, want ErrAlreadyPruned", f, again, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "already pruned (format "+string(f)+", by sfsurgery test)") ||
				!strings.Contains(msg, "prune the original") || strings.Contains(msg, "\n") {
				t.Errorf("%s output pruned again: %q does not say what it is and what to do on one line", f, msg)
			}
		}
	}
	// unpack's output is the dense format, with its manifest.
	unpacked := filepath.Join(dir, "unpacked")
	ck, err := checkpoint.Open(filepath.Join(dir, string(format.Ampere)))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	up, err := surgery.NewUnpackPlan(ck, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up.Write(context.Background(), unpacked, checkpoint.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = planAndWrite(t, context.Background(), unpacked, filepath.Join(dir, "again"), surgery.Options{Format: format.Ampere}, checkpoint.WriteOptions{})
	if !errors.Is(err, surgery.ErrAlreadyPruned) || !strings.Contains(err.Error(), "format dense") {
		t.Errorf("unpacked output pruned again: err = %v, want ErrAlreadyPruned (format dense)", err)
	}
	// Compressed weights without a manifest: another tool's output.
	for _, f := range []format.Format{format.Ampere, format.Bitmask} {
		src, err := checkpoint.Open(filepath.Join(dir, string(f)))
		if err != nil {
			t.Fatal(err)
		}
		var specs []checkpoint.TensorSpec
		for _, name := range src.Names() {
			file, info, _ := src.Lookup(name)
			specs = append(specs, checkpoint.TensorSpec{Name: name, DType: info.DType, Shape: info.Shape,
				Src: checkpoint.FileRange{File: file, Tensor: info}})
		}
		bare := filepath.Join(dir, string(f)+"-bare.safetensors")
		err = checkpoint.WriteFile(context.Background(), bare, specs, nil, nil)
		src.Close()
		if err != nil {
			t.Fatal(err)
		}
		err = planAndWrite(t, context.Background(), bare, filepath.Join(dir, "again.safetensors"), surgery.Options{Format: format.Dense}, checkpoint.WriteOptions{})
		if !errors.Is(err, surgery.ErrAlreadyPruned) || !strings.Contains(err.Error(), "already pruned (format "+string(f)+", not by sfsurgery") {
			t.Errorf("%s weights without a manifest: err = %v, want ErrAlreadyPruned naming the format", f, err)
		}
	}
}
