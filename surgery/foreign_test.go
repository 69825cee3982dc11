package surgery_test

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/surgery"
	"github.com/sfsurgery/sfsurgery/verify"
)

// TestUnpackForeignBitmask unpacks a compressed-tensors sparse-24-bitmask
// checkpoint that sfsurgery did not write: no manifest, a config as
// llm-compressor writes it, and degenerate groups whose bits point at
// other zero slots than ours would (torch.topk's tie order is not ours).
func TestUnpackForeignBitmask(t *testing.T) {
	const rows, cols = 8, 16
	// Each group of 4: 2 nonzeros, 1 nonzero or none.
	dense := make([]uint16, rows*cols)
	var comp []uint16
	mask := make([]byte, rows*cols/8)
	for r := range rows {
		for g := range cols / 4 {
			base := r*cols + 4*g
			var keep []int
			switch (r + g) % 3 {
			case 0: // two nonzeros at 1 and 3
				dense[base+1], dense[base+3] = 0x3F80+uint16(r), 0xBF00+uint16(g)
				keep = []int{1, 3}
			case 1: // one nonzero at 2; the foreign writer marks slot 3 too
				dense[base+2] = 0x4000 + uint16(r*8+g)
				keep = []int{2, 3}
			default: // all zero; the foreign writer marks slots 1 and 2
				keep = []int{1, 2}
			}
			for _, k := range keep {
				comp = append(comp, dense[base+k])
				c := 4*g + k
				mask[r*cols/8+c/8] |= 1 << (c % 8)
			}
		}
	}
	le16 := func(v []uint16) []byte {
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], x)
		}
		return b
	}
	shape := make([]byte, 16)
	binary.LittleEndian.PutUint64(shape, rows)
	binary.LittleEndian.PutUint64(shape[8:], cols)
	const p = "model.layers.0.mlp.up_proj"
	in := filepath.Join(t.TempDir(), "foreign")
	cfg := `{"architectures": ["LlamaForCausalLM"], "quantization_config": {"quant_method": "compressed-tensors", "version": "0.10.2",
 "sparsity_config": {"format": "sparse-24-bitmask", "sparsity_structure": "2:4", "global_sparsity": 0.4, "targets": ["Linear"], "ignore": ["lm_head"], "registry_requires_subclass": false},
 "transform_config": {}}, "model_type": "llama"}`
	out := &checkpoint.Output{
		Shards: []checkpoint.Shard{{Name: "model.safetensors", Metadata: map[string]string{"format": "pt"}, Tensors: []checkpoint.TensorSpec{
			{Name: p + ".compressed", DType: checkpoint.BF16, Shape: []int64{rows, cols / 2}, Src: bytesSrc(le16(comp))},
			{Name: p + ".bitmask", DType: checkpoint.U8, Shape: []int64{rows, cols / 8}, Src: bytesSrc(mask)},
			{Name: p + ".shape", DType: checkpoint.I64, Shape: []int64{2, 1}, Src: bytesSrc(shape)},
			{Name: "model.norm.weight", DType: checkpoint.BF16, Shape: []int64{4}, Src: bytesSrc(le16([]uint16{1, 2, 3, 4}))},
		}}},
		Files: []checkpoint.ExtraFile{{Name: "config.json", Data: []byte(cfg)}},
	}
	if err := checkpoint.WriteDir(context.Background(), in, out, nil); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	rep, err := verify.Run(context.Background(), ck, verify.Options{Device: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK {
		t.Errorf("verify of a valid foreign bitmask checkpoint failed: %+v", rep.Results)
	}
	plan, err := surgery.NewUnpackPlan(ck, "test")
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "dense")
	if _, err := plan.Write(context.Background(), dst, checkpoint.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := checkpoint.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	f, info, ok := got.Lookup(p + ".weight")
	if !ok || info.DType != checkpoint.BF16 || info.Shape[0] != rows || info.Shape[1] != cols {
		t.Fatalf("unpacked weight: %v %+v", ok, info)
	}
	if string(f.Data(info)) != string(le16(dense)) {
		t.Error("unpacked weight differs from the dense original")
	}
	for _, name := range []string{p + ".compressed", p + ".bitmask", p + ".shape"} {
		if _, _, ok := got.Lookup(name); ok {
			t.Errorf("%s left in the dense output", name)
		}
	}
	b, err := os.ReadFile(filepath.Join(dst, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "quantization_config") {
		t.Errorf("quantization_config not removed: %s", b)
	}
}
