package speed

import (
	"errors"
	"slices"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// TestFromCheckpoint reads the shipped checkpoint's shapes as stored and
// as an engine stacks them.
func TestFromCheckpoint(t *testing.T) {
	ck, err := checkpoint.Open("../testdata/tiny-llama-bf16")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, tc := range []struct {
		f    Fusion
		want []Shape
	}{
		// 4 layers: q/o 256×256, k/v 128×256, gate/up 768×256, down 256×768.
		{Separate, []Shape{
			{Model: "tiny", Ops: []string{"q", "o"}, N: 256, K: 256, Count: 8},
			{Model: "tiny", Ops: []string{"k", "v"}, N: 128, K: 256, Count: 8},
			{Model: "tiny", Ops: []string{"gate", "up"}, N: 768, K: 256, Count: 8},
			{Model: "tiny", Ops: []string{"down"}, N: 256, K: 768, Count: 4},
		}},
		// q, k, v stack to 512×256; gate, up to 1536×256.
		{Fused, []Shape{
			{Model: "tiny", Ops: []string{"qkv"}, N: 512, K: 256, Count: 4},
			{Model: "tiny", Ops: []string{"o"}, N: 256, K: 256, Count: 4},
			{Model: "tiny", Ops: []string{"gate_up"}, N: 1536, K: 256, Count: 4},
			{Model: "tiny", Ops: []string{"down"}, N: 256, K: 768, Count: 4},
		}},
	} {
		got, err := FromCheckpoint(ck, "tiny", tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(got, tc.want, equalShape) {
			t.Errorf("fusion %d: shapes %+v, want %+v", tc.f, got, tc.want)
		}
	}
}

func equalShape(a, b Shape) bool {
	return a.Model == b.Model && slices.Equal(a.Ops, b.Ops) && a.N == b.N && a.K == b.K && a.Count == b.Count
}

func TestParseShapes(t *testing.T) {
	got, err := ParseShapes("llama3-8b, q+o=512x256, 96x64, 512X256, gate=96x64", Separate)
	if err != nil {
		t.Fatal(err)
	}
	want := []Shape{
		{Model: "llama3-8b", Ops: []string{"q", "o"}, N: 4096, K: 4096, Count: 2},
		{Model: "llama3-8b", Ops: []string{"k", "v"}, N: 1024, K: 4096, Count: 2},
		{Model: "llama3-8b", Ops: []string{"gate", "up"}, N: 14336, K: 4096, Count: 2},
		{Model: "llama3-8b", Ops: []string{"down"}, N: 4096, K: 14336, Count: 1},
		{Ops: []string{"q", "o"}, N: 512, K: 256, Count: 3},
		{Ops: []string{"gate"}, N: 96, K: 64, Count: 2},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if !equalShape(got[i], want[i]) {
			t.Errorf("shape %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"", ",", "4096", "0x64", "ax64", "q+=64x64", "llama9", "-1x5"} {
		if _, err := ParseShapes(bad, Separate); !errors.Is(err, ErrShape) {
			t.Errorf("ParseShapes(%q) = %v, want ErrShape", bad, err)
		}
	}
}

func TestArchShapes70B(t *testing.T) {
	got, err := ParseShapes("llama3-70b", Separate)
	if err != nil {
		t.Fatal(err)
	}
	dims := [][2]int{{8192, 8192}, {1024, 8192}, {28672, 8192}, {8192, 28672}}
	for i, d := range dims {
		if got[i].N != d[0] || got[i].K != d[1] {
			t.Errorf("shape %d = %dx%d, want %dx%d", i, got[i].N, got[i].K, d[0], d[1])
		}
	}
}

func TestOpName(t *testing.T) {
	for name, want := range map[string]string{
		"model.layers.3.self_attn.q_proj.weight":    "q",
		"model.layers.10.mlp.down_proj.weight":      "down",
		"model.layers.0.mlp.gate_proj.weight":       "gate",
		"model.layers.7.block_sparse_moe.w1.weight": "model.layers.*.block_sparse_moe.w1",
	} {
		if got := OpName(name); got != want {
			t.Errorf("OpName(%q) = %q, want %q", name, got, want)
		}
	}
	if l := (Shape{Model: "m", Ops: []string{"q", "o"}, N: 4, K: 8}).Label(); l != "m q,o 4x8" {
		t.Errorf("Label = %q", l)
	}
	if l := (Shape{N: 4, K: 8}).Label(); l != "4x8" {
		t.Errorf("bare Label = %q", l)
	}
}
