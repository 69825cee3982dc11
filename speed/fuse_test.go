package speed

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sfsurgery/sfsurgery/llama"
)

func TestFuse(t *testing.T) {
	p := func(mod, op string, n, k int) projection {
		return projection{model: "m", module: mod, op: op, n: n, k: k}
	}
	for _, tc := range []struct {
		name    string
		in, out []projection
	}{
		{"attention and MLP",
			[]projection{p("a", "q", 64, 32), p("a", "k", 16, 32), p("a", "v", 16, 32), p("a", "o", 32, 64),
				p("b", "gate", 96, 32), p("b", "up", 96, 32), p("b", "down", 32, 96)},
			[]projection{p("a", "qkv", 96, 32), p("a", "o", 32, 64), p("b", "gate_up", 192, 32), p("b", "down", 32, 96)}},
		{"stack at the first part's place",
			[]projection{p("a", "o", 32, 64), p("a", "v", 16, 32), p("a", "q", 64, 32), p("a", "k", 16, 32)},
			[]projection{p("a", "o", 32, 64), p("a", "qkv", 96, 32)}},
		{"per module",
			[]projection{p("0", "q", 8, 4), p("1", "q", 8, 4), p("0", "k", 2, 4), p("1", "k", 2, 4), p("0", "v", 2, 4), p("1", "v", 2, 4)},
			[]projection{p("0", "qkv", 12, 4), p("1", "qkv", 12, 4)}},
		{"incomplete group",
			[]projection{p("a", "q", 64, 32), p("a", "k", 16, 32), p("b", "v", 16, 32), p("b", "gate", 96, 32)},
			[]projection{p("a", "q", 64, 32), p("a", "k", 16, 32), p("b", "v", 16, 32), p("b", "gate", 96, 32)}},
		{"K differ",
			[]projection{p("a", "gate", 96, 32), p("a", "up", 96, 64)},
			[]projection{p("a", "gate", 96, 32), p("a", "up", 96, 64)}},
		{"an op twice",
			[]projection{p("a", "gate", 96, 32), p("a", "up", 96, 32), p("a", "up", 96, 32)},
			[]projection{p("a", "gate", 96, 32), p("a", "up", 96, 32), p("a", "up", 96, 32)}},
		{"stacked N past MaxDim",
			[]projection{p("a", "q", MaxDim, 64), p("a", "k", MaxDim/2, 64), p("a", "v", MaxDim/2, 64), p("b", "gate", MaxDim, 64), p("b", "up", 64, 64)},
			[]projection{p("a", "q", MaxDim, 64), p("a", "k", MaxDim/2, 64), p("a", "v", MaxDim/2, 64), p("b", "gate", MaxDim, 64), p("b", "up", 64, 64)}},
		{"stacked N at MaxDim",
			[]projection{p("a", "q", MaxDim/2, 64), p("a", "k", MaxDim/4, 64), p("a", "v", MaxDim/4, 64)},
			[]projection{p("a", "qkv", MaxDim, 64)}},
		{"empty", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			got := fuse(in)
			if !slices.Equal(got, tc.out) {
				t.Errorf("fuse = %v, want %v", got, tc.out)
			}
			if !slices.Equal(in, tc.in) {
				t.Errorf("fuse modified its input: %v", in)
			}
		})
	}
}

// TestFuseProperties fuses random layers: the weights' elements are
// conserved, and a module's group is stacked exactly when it is complete
// (each op once, one K).
func TestFuseProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 24))
	ops := []string{"q", "k", "v", "o", "gate", "up", "down", "lm_head"}
	for trial := range 2000 {
		var in []projection
		for range r.IntN(12) {
			in = append(in, projection{module: string(rune('a' + r.IntN(3))), op: ops[r.IntN(len(ops))],
				n: 1 + r.IntN(4), k: 1 + r.IntN(2)})
		}
		out := fuse(in)
		elems := func(ps []projection) (s int) {
			for _, p := range ps {
				s += p.n * p.k
			}
			return s
		}
		if elems(out) != elems(in) {
			t.Fatalf("trial %d: %v → %v: %d elements, want %d", trial, in, out, elems(out), elems(in))
		}
		for _, g := range llama.Stacks() {
			for _, mod := range []string{"a", "b", "c"} {
				// The group of mod fuses iff each of its ops is there
				// once, all with one K.
				fusable := true
				var k0 int
				for i, op := range g.Parts {
					var ks []int
					for _, p := range in {
						if p.module == mod && p.op == op {
							ks = append(ks, p.k)
						}
					}
					if i == 0 && len(ks) > 0 {
						k0 = ks[0]
					}
					fusable = fusable && len(ks) == 1 && ks[0] == k0
				}
				fused := slices.ContainsFunc(out, func(p projection) bool { return p.module == mod && p.op == g.Op })
				if fused != fusable {
					t.Fatalf("trial %d: %s of module %s fused %v, want %v: %v → %v", trial, g.Op, mod, fused, fusable, in, out)
				}
			}
		}
	}
}

func TestParseShapesFused(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want []Shape
	}{
		{"llama3-70b", []Shape{
			{Model: "llama3-70b", Ops: []string{"qkv"}, N: 10240, K: 8192, Count: 1},
			{Model: "llama3-70b", Ops: []string{"o"}, N: 8192, K: 8192, Count: 1},
			{Model: "llama3-70b", Ops: []string{"gate_up"}, N: 57344, K: 8192, Count: 1},
			{Model: "llama3-70b", Ops: []string{"down"}, N: 8192, K: 28672, Count: 1},
		}},
		{"tinyllama,tinyllama", []Shape{
			{Model: "tinyllama", Ops: []string{"qkv"}, N: 2560, K: 2048, Count: 2},
			{Model: "tinyllama", Ops: []string{"o"}, N: 2048, K: 2048, Count: 2},
			{Model: "tinyllama", Ops: []string{"gate_up"}, N: 11264, K: 2048, Count: 2},
			{Model: "tinyllama", Ops: []string{"down"}, N: 2048, K: 5632, Count: 2},
		}},
		{"q+o=64x32, k=16x32, v=16x32, 96x64", []Shape{
			{Ops: []string{"qkv"}, N: 96, K: 32, Count: 1},
			{Ops: []string{"o"}, N: 64, K: 32, Count: 1},
			{N: 96, K: 64, Count: 1},
		}},
		{"gate=96x32, up=96x64", []Shape{
			{Ops: []string{"gate"}, N: 96, K: 32, Count: 1},
			{Ops: []string{"up"}, N: 96, K: 64, Count: 1},
		}},
	} {
		got, err := ParseShapes(tc.spec, Fused)
		if err != nil {
			t.Fatalf("%q: %v", tc.spec, err)
		}
		if !slices.EqualFunc(got, tc.want, equalShape) {
			t.Errorf("%q: %+v, want %+v", tc.spec, got, tc.want)
		}
	}
}
