package surgery

import (
	"bytes"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// TestSideEitherOrder writes each compressed target's value and side
// tensors in both orders: side first (its own pass) and values first
// (the side filled in by the values' pass) must give the same bytes.
func TestSideEitherOrder(t *testing.T) {
	for _, f := range []Format{FormatAmpere, FormatBitmask} {
		ck, err := checkpoint.Open("../testdata/tiny-llama-bf16")
		if err != nil {
			t.Fatal(err)
		}
		first := func(sideFirst bool) map[string][]byte {
			p, err := NewPlan(ck, Options{Format: f, Version: "test"})
			if err != nil {
				t.Fatal(err)
			}
			out := map[string][]byte{}
			for _, s := range p.shards {
				specs := s.Tensors
				for i := 0; i+1 < len(specs); i++ {
					a, b := specs[i], specs[i+1]
					if _, ok := b.Src.(metaSource); !ok {
						if _, ok := b.Src.(bitmaskSource); !ok {
							continue
						}
					}
					order := []checkpoint.TensorSpec{a, b}
					if sideFirst {
						order = []checkpoint.TensorSpec{b, a}
					}
					for _, sp := range order {
						var buf bytes.Buffer
						if _, err := sp.Src.WriteTo(&buf); err != nil {
							t.Fatal(err)
						}
						out[sp.Name] = buf.Bytes()
					}
				}
			}
			return out
		}
		a, b := first(false), first(true)
		if len(a) != 2*28 {
			t.Fatalf("%s: %d tensors written, want 56", f, len(a))
		}
		for name, want := range a {
			if !bytes.Equal(b[name], want) {
				t.Errorf("%s: %s differs when the side tensor is written first", f, name)
			}
		}
		ck.Close()
	}
}
