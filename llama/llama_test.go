package llama

import (
	"regexp"
	"slices"
	"testing"
)

func TestSplitProjection(t *testing.T) {
	for name, want := range map[string][2]string{
		"model.layers.3.self_attn.q_proj.weight":        {"model.layers.3.self_attn", "q"},
		"model.layers.0.mlp.gate_up_proj.weight":        {"model.layers.0.mlp", "gate_up"},
		"model.layers.1.mlp.experts.7.down_proj.weight": {"model.layers.1.mlp.experts.7", "down"},
		"q_proj.weight": {"", "q"},
		"model.layers.0.self_attn.qkv_proj.weight":            {"model.layers.0.self_attn", "qkv"},
		"model.layers.0.block_sparse_moe.experts.0.w1.weight": {},
		"model.layers.0.self_attn.c_proj.weight":              {},
		"model.layers.0.mlp.foo_up_proj.weight":               {},
		"model.layers.0.self_attn.q_proj.bias":                {},
	} {
		module, op, ok := SplitProjection(name)
		if ok != (want[1] != "") || module != want[0] || op != want[1] {
			t.Errorf("SplitProjection(%q) = %q, %q, %v; want %q, %q", name, module, op, ok, want[0], want[1])
		}
	}
}

func TestOpIndexAndStacks(t *testing.T) {
	if OpIndex("q") != 0 || OpIndex("down") != len(ops())-1 || OpIndex("w1") != -1 {
		t.Errorf("OpIndex: q %d, down %d, w1 %d", OpIndex("q"), OpIndex("down"), OpIndex("w1"))
	}
	for _, s := range Stacks() {
		// A stack comes after its last part and before the next op.
		last := OpIndex(s.Parts[len(s.Parts)-1])
		if OpIndex(s.Op) != last+1 {
			t.Errorf("stack %s at %d, its last part at %d", s.Op, OpIndex(s.Op), last)
		}
	}
}

// TestTensorsArePatterns holds the names Tensors writes against the
// default target patterns: every projection matches one, nothing else
// does.
func TestTensorsArePatterns(t *testing.T) {
	attn, mlp := regexp.MustCompile(AttnPattern), regexp.MustCompile(MLPPattern)
	a, err := ParseArch("TinyLlama")
	if err != nil {
		t.Fatal(err)
	}
	ts := a.Tensors(2, true)
	if len(ts) != 3+2*9 {
		t.Fatalf("%d tensors, want %d", len(ts), 3+2*9)
	}
	projections := 0
	for _, tn := range ts {
		_, op, isProj := SplitProjection(tn.Name)
		if matched := attn.MatchString(tn.Name) || mlp.MatchString(tn.Name); matched != isProj {
			t.Errorf("%s: matches the patterns %v, is a projection %v", tn.Name, matched, isProj)
		}
		if isProj {
			projections++
			i := slices.IndexFunc(a.Projections(), func(p Projection) bool { return p.Op == op })
			if p := a.Projections()[i]; tn.Shape[0] != int64(p.N) || tn.Shape[1] != int64(p.K) {
				t.Errorf("%s: shape %v, want [%d %d]", tn.Name, tn.Shape, p.N, p.K)
			}
		}
	}
	if projections != 2*7 {
		t.Errorf("%d projections, want %d", projections, 2*7)
	}
	if k := a.Projections()[1]; k.Op != "k" || k.N != 256 || k.K != 2048 {
		t.Errorf("tinyllama k_proj %+v, want 256×2048", k)
	}
	if got := len(a.Tensors(0, false)); got != 1+a.Layers*9 {
		t.Errorf("all layers without embeddings: %d tensors, want %d", got, 1+a.Layers*9)
	}
	if _, err := ParseArch("gpt2"); err == nil {
		t.Error("unknown shape accepted")
	}
}
