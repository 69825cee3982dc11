package surgery_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/surgery"
	"github.com/sfsurgery/sfsurgery/verify"
)

var formats = []format.Format{format.Ampere, format.Bitmask, format.Dense}

// verifyOK runs the CPU verifier with the original and fails the test on
// any failed check.
func verifyOK(t *testing.T, out, orig string) *verify.Report {
	t.Helper()
	ck, err := checkpoint.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	o, err := checkpoint.Open(orig)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	rep, err := verify.Run(context.Background(), ck, verify.Options{Original: o, Device: "cpu", Tokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK {
		for _, r := range rep.Results {
			if !r.OK {
				t.Errorf("verify %s: %s: %+v", out, r.Tensor, r.Checks)
			}
		}
	}
	return rep
}

func TestPruneVerifyUnpack(t *testing.T) {
	inputs := []struct{ name, path string }{
		{"testdata", testdataModel},
		{"tiny-llama-fp16", fixture(t, "tiny-llama-fp16")},
		{"fp16-single-file", fixture(t, filepath.Join("tiny-llama-fp16", "model.safetensors"))},
	}
	for _, in := range inputs {
		t.Run(in.name, func(t *testing.T) {
			before := treeHashes(t, in.path)
			dir := t.TempDir()
			outs := map[format.Format]string{}
			for _, f := range formats {
				out := filepath.Join(dir, string(f))
				if strings.HasSuffix(in.path, ".safetensors") {
					out += ".safetensors"
				}
				r := prune(t, in.path, out, surgery.Options{Format: f}, checkpoint.WriteOptions{})
				if r.Pruned != 28 || r.Skipped != 0 {
					t.Errorf("%s: pruned %d skipped %d, want 28 and 0", f, r.Pruned, r.Skipped)
				}
				if r.KeptFraction <= 0.5 || r.KeptFraction >= 1 {
					t.Errorf("%s: kept fraction %v not in (0.5, 1)", f, r.KeptFraction)
				}
				verifyOK(t, out, in.path)
				outs[f] = out
			}
			dense := outs[format.Dense]
			for _, f := range []format.Format{format.Ampere, format.Bitmask} {
				un := outs[f] + "-unpacked"
				if strings.HasSuffix(outs[f], ".safetensors") {
					un = strings.TrimSuffix(outs[f], ".safetensors") + "-unpacked.safetensors"
				}
				ck, err := checkpoint.Open(outs[f])
				if err != nil {
					t.Fatal(err)
				}
				p, err := surgery.NewUnpackPlan(ck, "test")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := p.Write(context.Background(), un, checkpoint.WriteOptions{}); err != nil {
					t.Fatal(err)
				}
				ck.Close()
				want, got := treeHashes(t, dense), treeHashes(t, un)
				delete(want, "sfsurgery.json")
				if strings.Join(sortedKeys(want), ",") != strings.Join(sortedKeys(got), ",") {
					t.Errorf("unpack of %s has files %v, dense has %v", f, sortedKeys(got), sortedKeys(want))
				}
				for name, h := range want {
					if got[name] != h {
						t.Errorf("unpack of %s: %s differs from the dense output", f, name)
					}
				}
			}
			after := treeHashes(t, in.path)
			for k, v := range before {
				if after[k] != v {
					t.Errorf("input %s changed", k)
				}
			}
		})
	}
}

func TestWorkersGiveIdenticalBytes(t *testing.T) {
	dir := t.TempDir()
	for _, f := range formats {
		var first map[string]string
		for _, w := range []int{1, 2, 5} {
			out := filepath.Join(dir, string(f)+"-"+string(rune('0'+w)))
			prune(t, testdataModel, out, surgery.Options{Format: f}, checkpoint.WriteOptions{Workers: w})
			h := treeHashes(t, out)
			// The report names its output path; the rest must agree.
			var rep map[string]any
			if err := json.Unmarshal(fileBytes(t, filepath.Join(out, "sfsurgery.json")), &rep); err != nil {
				t.Fatal(err)
			}
			delete(rep, "output")
			b, _ := json.Marshal(rep)
			h["sfsurgery.json"] = string(b)
			if first == nil {
				first = h
				continue
			}
			for name, sum := range first {
				if h[name] != sum {
					t.Errorf("%s: %s differs between --workers 1 and %d", f, name, w)
				}
			}
		}
	}
}

func TestBitmaskConfig(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bm")
	prune(t, testdataModel, out, surgery.Options{Format: format.Bitmask}, checkpoint.WriteOptions{})
	var cfg struct {
		Q struct {
			QuantMethod string `json:"quant_method"`
			Version     string `json:"version"`
			Sparsity    struct {
				Format    string   `json:"format"`
				Structure string   `json:"sparsity_structure"`
				Targets   []string `json:"targets"`
				Ignore    []string `json:"ignore"`
				Global    float64  `json:"global_sparsity"`
			} `json:"sparsity_config"`
			Transform *json.RawMessage `json:"transform_config"`
		} `json:"quantization_config"`
		Arch []string `json:"architectures"`
	}
	if err := json.Unmarshal(fileBytes(t, filepath.Join(out, "config.json")), &cfg); err != nil {
		t.Fatal(err)
	}
	q := cfg.Q
	if q.QuantMethod != "compressed-tensors" || q.Sparsity.Format != "sparse-24-bitmask" || q.Sparsity.Structure != "2:4" {
		t.Errorf("quantization_config = %+v", q)
	}
	if q.Transform != nil {
		t.Error("transform_config must be omitted (readers before 0.11 reject it)")
	}
	if len(q.Sparsity.Targets) != 28 || q.Sparsity.Targets[0] != "model.layers.0.mlp.down_proj" {
		t.Errorf("targets = %v", q.Sparsity.Targets)
	}
	if q.Sparsity.Global <= 0 || q.Sparsity.Global >= 0.5 {
		t.Errorf("global_sparsity = %v", q.Sparsity.Global)
	}
	if len(cfg.Arch) != 1 || cfg.Arch[0] != "LlamaForCausalLM" {
		t.Errorf("the rest of config.json was not carried over: architectures = %v", cfg.Arch)
	}
	// The dense format carries config.json over byte for byte.
	o := filepath.Join(t.TempDir(), "dense")
	prune(t, testdataModel, o, surgery.Options{Format: format.Dense}, checkpoint.WriteOptions{})
	if string(fileBytes(t, filepath.Join(o, "config.json"))) != string(fileBytes(t, filepath.Join(testdataModel, "config.json"))) {
		t.Error("dense: config.json changed")
	}
}

// TestAmpereConfig holds the quantization_config an ampere output's
// config.json carries for the Python package's transformers loader, the
// rest of the input's config unchanged. (TestPruneVerifyUnpack holds that
// unpack takes it out again.)
func TestAmpereConfig(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ampere")
	prune(t, testdataModel, out, surgery.Options{Format: format.Ampere}, checkpoint.WriteOptions{})
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(fileBytes(t, filepath.Join(out, "config.json")), &cfg); err != nil {
		t.Fatal(err)
	}
	var q struct {
		QuantMethod string   `json:"quant_method"`
		Format      string   `json:"format"`
		Structure   string   `json:"sparsity_structure"`
		Targets     []string `json:"targets"`
		Ignore      []string `json:"ignore"`
	}
	if err := json.Unmarshal(cfg["quantization_config"], &q); err != nil {
		t.Fatalf("quantization_config: %v", err)
	}
	if q.QuantMethod != surgery.QuantMethod || q.Format != "ampere" || q.Structure != "2:4" {
		t.Errorf("quantization_config = %+v", q)
	}
	if len(q.Targets) != 28 || q.Targets[0] != "model.layers.0.mlp.down_proj" || q.Ignore == nil || len(q.Ignore) != 0 {
		t.Errorf("targets = %v, ignore = %v", q.Targets, q.Ignore)
	}
	var in map[string]json.RawMessage
	if err := json.Unmarshal(fileBytes(t, filepath.Join(testdataModel, "config.json")), &in); err != nil {
		t.Fatal(err)
	}
	delete(cfg, "quantization_config")
	for k, v := range in {
		if string(cfg[k]) != string(v) {
			t.Errorf("config.json %q = %s, want the input's %s", k, cfg[k], v)
		}
	}
	if len(cfg) != len(in) {
		t.Errorf("config.json has %d keys besides quantization_config, the input %d", len(cfg), len(in))
	}
}

func TestDefaultOutput(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(t.TempDir(), "models--TinyLlama--TinyLlama-1.1B-Chat-v1.0", "snapshots", strings.Repeat("ab", 20))
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ in, suffix, want string }{
		{"/m/model.safetensors", "-2of4", "model-2of4.safetensors"},
		{"/m/model.safetensors", "-dense", "model-dense.safetensors"},
		{dir, "-2of4", filepath.Base(dir) + "-2of4"},
		{dir + "/", "-2of4", filepath.Base(dir) + "-2of4"},
		{"/m/llama/model.safetensors.index.json", "-2of4", "llama-2of4"},
		{"/m/llama/model.safetensors.index.json", "-dense", "llama-dense"},
		{cache, "-2of4", "TinyLlama-1.1B-Chat-v1.0-2of4"},
		{cache + "/model.safetensors.index.json", "-dense", "TinyLlama-1.1B-Chat-v1.0-dense"},
		{cache + "/model.safetensors", "-2of4", "model-2of4.safetensors"},
		{"/", "-2of4", "model-2of4"},
	}
	for _, tt := range tests {
		if got := surgery.DefaultOutput(tt.in, tt.suffix); got != tt.want {
			t.Errorf("DefaultOutput(%q, %q) = %q, want %q", tt.in, tt.suffix, got, tt.want)
		}
	}
	// "." is named after the current directory.
	t.Chdir(dir)
	if got, want := surgery.DefaultOutput(".", "-2of4"), filepath.Base(dir)+"-2of4"; got != want {
		t.Errorf("DefaultOutput(\".\") = %q, want %q", got, want)
	}
}

func TestSelector(t *testing.T) {
	names := []string{
		"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
		"model.layers.0.input_layernorm.weight", "model.layers.0.self_attn.q_proj.weight",
		"model.layers.0.self_attn.q_proj.bias", "model.layers.11.self_attn.k_proj.weight",
		"model.layers.3.self_attn.v_proj.weight", "model.layers.3.self_attn.o_proj.weight",
		"model.layers.3.mlp.gate_proj.weight", "model.layers.3.mlp.up_proj.weight",
		"model.layers.30.mlp.down_proj.weight",
	}
	tests := []struct {
		name            string
		targets, ignore []string
		scope           surgery.Scope
		want            int
	}{
		{"default", nil, nil, surgery.ScopeAll, 7},
		{"attn", nil, nil, surgery.ScopeAttn, 4},
		{"mlp", nil, nil, surgery.ScopeMLP, 3},
		{"ignore layer 3", nil, []string{`layers\.3\.`}, surgery.ScopeAll, 3},
		{"custom", []string{`down_proj`}, nil, surgery.ScopeAll, 1},
		{"lm_head on request", []string{`^lm_head\.weight$`}, nil, surgery.ScopeAll, 1},
	}
	for _, tt := range tests {
		s, err := surgery.NewSelector(tt.targets, tt.ignore, tt.scope)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, name := range names {
			if s.Match(name) {
				n++
				if tt.targets == nil && (strings.Contains(name, "embed") || strings.Contains(name, "lm_head") ||
					strings.Contains(name, "norm") || strings.HasSuffix(name, "bias")) {
					t.Errorf("%s: default targets matched %s", tt.name, name)
				}
			}
		}
		if n != tt.want {
			t.Errorf("%s: %d matched, want %d", tt.name, n, tt.want)
		}
	}
	if _, err := surgery.NewSelector([]string{"("}, nil, surgery.ScopeAll); err == nil {
		t.Error("a bad regexp was accepted")
	}
	if _, err := surgery.NewSelector(nil, nil, "ffn"); err == nil {
		t.Error("an unknown scope was accepted")
	}
}

func TestNoTargetsListsContents(t *testing.T) {
	ck, err := checkpoint.Open(testdataModel)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	sel, _ := surgery.NewSelector([]string{`^nothing$`}, nil, surgery.ScopeAll)
	_, err = surgery.NewPlan(ck, surgery.Options{Format: format.Dense, Selector: sel})
	if !errors.Is(err, surgery.ErrNoTargets) {
		t.Fatalf("err = %v, want ErrNoTargets", err)
	}
	if !strings.Contains(err.Error(), "model.layers.N.mlp.up_proj.weight ×4") {
		t.Errorf("error does not list the checkpoint's tensors: %v", err)
	}
}
