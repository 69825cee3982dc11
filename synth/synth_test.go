package synth

import (
	"context"
	"encoding/binary"
	"math"
	"path/filepath"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/llama"
)

func TestArchShapes(t *testing.T) {
	a, err := llama.ParseArch("llama3-8b")
	if err != nil {
		t.Fatal(err)
	}
	specs, err := Tensors(a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 3+32*9 {
		t.Fatalf("%d tensors, want %d", len(specs), 3+32*9)
	}
	want := map[string][]int64{
		"model.layers.0.self_attn.q_proj.weight": {4096, 4096},
		"model.layers.7.self_attn.k_proj.weight": {1024, 4096},
		"model.layers.31.mlp.gate_proj.weight":   {14336, 4096},
		"model.layers.31.mlp.down_proj.weight":   {4096, 14336},
		"lm_head.weight":                         {128256, 4096},
	}
	var total int64
	for _, s := range specs {
		if w, ok := want[s.Name]; ok && (len(s.Shape) != 2 || s.Shape[0] != w[0] || s.Shape[1] != w[1]) {
			t.Errorf("%s: shape %v, want %v", s.Name, s.Shape, w)
		}
		n, _ := checkpoint.TensorSize(s.DType, s.Shape)
		total += n
	}
	// Llama-3-8B has 8.03 B parameters: 16.06 GB in BF16.
	if total < 16.0e9 || total > 16.1e9 {
		t.Errorf("total %d bytes, want about 16.06e9", total)
	}
	if _, err := llama.ParseArch("gpt2"); err == nil {
		t.Error("unknown shape accepted")
	}
}

func TestWriteSmall(t *testing.T) {
	a := llama.Arch{Name: "mini", Hidden: 64, Intermediate: 128, Heads: 4, KVHeads: 2, Layers: 2, Vocab: 32}
	dir := filepath.Join(t.TempDir(), "m")
	for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16, checkpoint.F32} {
		if err := Write(context.Background(), dir, a, Options{DType: dt, MaxShardBytes: 40000, Write: checkpoint.WriteOptions{Force: true}}); err != nil {
			t.Fatal(err)
		}
		ck, err := checkpoint.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(ck.Shards) < 2 || ck.Index == nil || ck.Architecture() != "LlamaForCausalLM" {
			t.Errorf("%s: %d shards, index %v, arch %q", dt, len(ck.Shards), ck.Index != nil, ck.Architecture())
		}
		f, info, ok := ck.Lookup("model.layers.1.mlp.down_proj.weight")
		if !ok || info.DType != dt || info.Shape[0] != 64 || info.Shape[1] != 128 {
			t.Fatalf("%s: down_proj %+v", dt, info)
		}
		// Weights are small, finite and not all equal; norms are near 1.
		data := f.Data(info)
		size := dt.Bits() / 8
		seen := map[float64]bool{}
		for i := 0; i < len(data); i += size {
			v := value(data[i:], dt)
			if math.IsNaN(v) || math.Abs(v) > 0.05 {
				t.Fatalf("%s: weight %v out of range", dt, v)
			}
			seen[v] = true
		}
		if len(seen) < 100 {
			t.Errorf("%s: only %d distinct values", dt, len(seen))
		}
		f, info, _ = ck.Lookup("model.norm.weight")
		if v := value(f.Data(info), dt); math.Abs(v-1) > 0.05 {
			t.Errorf("%s: norm weight %v, want about 1", dt, v)
		}
		ck.Close()
	}
}

// value decodes one element (test reference, through math only).
func value(b []byte, dt checkpoint.DType) float64 {
	switch dt {
	case checkpoint.F32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case checkpoint.BF16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	}
	h := binary.LittleEndian.Uint16(b)
	e, m := int(h>>10&0x1F), float64(h&0x3FF)
	v := math.Ldexp(1+m/1024, e-15)
	if e == 0 {
		v = math.Ldexp(m/1024, -14)
	}
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}
