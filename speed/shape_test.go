package speed

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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
	for _, bad := range []string{"", ",", "4096", "0x64", "ax64", "q+=64x64", "llama9", "-1x5", "q|o=64x64", "q\no=64x64",
		"q o=64x64", "é=64x64"} {
		if _, err := ParseShapes(bad, Separate); !errors.Is(err, ErrShape) {
			t.Errorf("ParseShapes(%q) = %v, want ErrShape", bad, err)
		}
	}
}

// FuzzParseShapes: no --shapes value makes ParseShapes panic; an error
// is one line wrapping ErrShape and comes with no shapes; accepted shapes
// have N and K in range and ops that are nonempty, trimmed and listed
// once. Their spelling (shapeSpelling) parses back to the same shapes, and
// stacking them (Fused) keeps every weight element: Σ N·K·Count is the
// same both ways.
func FuzzParseShapes(f *testing.F) {
	for _, s := range []string{
		// Valid: TestParseShapes', TestArchShapes70B's and TestParseShapesFused's.
		"llama3-8b, q+o=512x256, 96x64, 512X256, gate=96x64", "llama3-70b", "tinyllama,tinyllama",
		"q+o=64x32, k=16x32, v=16x32, 96x64", "gate=96x32, up=96x64", " TinyLlama , 1x1073741824 ",
		// Malformed: TestParseShapes' and more.
		"", ",", "4096", "0x64", "ax64", "q+=64x64", "llama9", "-1x5", "q=k=4x4", "1x1x1",
		"1073741825x1", "=4x4", "q+ +o=4x4", "4x", "x4", "q=4x4,,llama9",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		sep, serr := ParseShapes(spec, Separate)
		fused, ferr := ParseShapes(spec, Fused)
		if (serr == nil) != (ferr == nil) {
			t.Fatalf("%q: Separate %v, Fused %v; want both or neither refused", spec, serr, ferr)
		}
		var sums [2]uint64 // Σ N·K·Count of Separate and Fused, mod 2^64
		for i, r := range []struct {
			shapes []Shape
			err    error
			maxN   int // a stack's N is the sum of up to 3 items' N
		}{{sep, serr, MaxDim}, {fused, ferr, 3 * MaxDim}} {
			if r.err != nil {
				if r.shapes != nil || !errors.Is(r.err, ErrShape) || strings.Contains(r.err.Error(), "\n") {
					t.Fatalf("%q: shapes %+v, error %q; want none and one line wrapping ErrShape", spec, r.shapes, r.err)
				}
				continue
			}
			if len(r.shapes) == 0 {
				t.Fatalf("%q: no shapes and no error", spec)
			}
			for _, s := range r.shapes {
				if s.N < 1 || s.N > r.maxN || s.K < 1 || s.K > MaxDim || s.Count < 1 {
					t.Fatalf("%q: accepted %+v", spec, s)
				}
				for j, op := range s.Ops {
					if op == "" || op != strings.TrimSpace(op) || strings.ContainsAny(op, ",+=") || slices.Contains(s.Ops[:j], op) {
						t.Fatalf("%q: accepted op %q in %+v", spec, op, s)
					}
				}
				sums[i] += uint64(s.N) * uint64(s.K) * uint64(s.Count)
			}
		}
		if serr != nil {
			return
		}
		if sums[0] != sums[1] {
			t.Fatalf("%q: Σ N·K·Count is %d separate, %d fused", spec, sums[0], sums[1])
		}
		// Count is not spelled: "q+o=4x4, 4x4" counts 3 of what "q+o=4x4"
		// counts 2.
		back, err := ParseShapes(shapeSpelling(sep), Separate)
		if err != nil || !slices.EqualFunc(back, sep, func(a, b Shape) bool {
			return a.Model == b.Model && slices.Equal(a.Ops, b.Ops) && a.N == b.N && a.K == b.K
		}) {
			t.Fatalf("%q: %+v spelled %q reads back as %+v, %v", spec, sep, shapeSpelling(sep), back, err)
		}
	})
}

// shapeSpelling returns the --shapes value that names shapes, in order:
// an architecture's name at the first of its shapes, OPS=NxK where a
// shape has ops, NxK where it has none.
func shapeSpelling(shapes []Shape) string {
	var items []string
	for i, s := range shapes {
		switch {
		case s.Model != "":
			if !slices.ContainsFunc(shapes[:i], func(p Shape) bool { return p.Model == s.Model }) {
				items = append(items, s.Model)
			}
		case len(s.Ops) > 0:
			items = append(items, fmt.Sprintf("%s=%dx%d", strings.Join(s.Ops, "+"), s.N, s.K))
		default:
			items = append(items, fmt.Sprintf("%dx%d", s.N, s.K))
		}
	}
	return strings.Join(items, ",")
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
