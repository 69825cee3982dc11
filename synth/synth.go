// Package synth writes synthetic LLaMA-shaped checkpoints: real tensor
// names, shapes and shard layout, random weights. They stand in for real
// models where none can be downloaded (benchmarks, the GPU machine).
package synth

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/internal/half"
	"github.com/sfsurgery/sfsurgery/llama"
)

// Options control Write.
type Options struct {
	// Layers overrides the number of decoder layers (0: the model's).
	Layers int
	// DType is BF16, F16 or F32.
	DType checkpoint.DType
	// MaxShardBytes splits the output into shards (0: 5 GB, as HF).
	MaxShardBytes int64
	// Seed seeds the weights.
	Seed uint64
	// NoEmbeddings leaves out embed_tokens and lm_head (they are large
	// and never pruned).
	NoEmbeddings bool
	Write        checkpoint.WriteOptions
}

// Tensors returns the specs of arch's weights with random contents.
func Tensors(a llama.Arch, opt Options) ([]checkpoint.TensorSpec, error) {
	if opt.DType == "" {
		opt.DType = checkpoint.BF16
	}
	if opt.DType != checkpoint.BF16 && opt.DType != checkpoint.F16 && opt.DType != checkpoint.F32 {
		return nil, fmt.Errorf("synth: dtype %s is not BF16, F16 or F32", opt.DType)
	}
	var specs []checkpoint.TensorSpec
	seed := opt.Seed
	for _, t := range a.Tensors(opt.Layers, !opt.NoEmbeddings) {
		seed++
		specs = append(specs, checkpoint.TensorSpec{Name: t.Name, DType: opt.DType, Shape: t.Shape,
			Src: randomSource{dt: opt.DType, n: product(t.Shape), seed: seed, norm: len(t.Shape) == 1}})
	}
	return specs, nil
}

// Write writes a synthetic model directory at dir: shards, index and a
// config.json.
func Write(ctx context.Context, dir string, a llama.Arch, opt Options) error {
	specs, err := Tensors(a, opt)
	if err != nil {
		return err
	}
	if opt.MaxShardBytes == 0 {
		opt.MaxShardBytes = 5 << 30
	}
	shards := checkpoint.Reshard(specs, opt.MaxShardBytes)
	for i := range shards {
		shards[i].Metadata = map[string]string{"format": "pt"}
	}
	layers := a.Layers
	if opt.Layers > 0 {
		layers = opt.Layers
	}
	cfg := map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
		"hidden_size": a.Hidden, "intermediate_size": a.Intermediate, "num_attention_heads": a.Heads,
		"num_key_value_heads": a.KVHeads, "num_hidden_layers": layers, "vocab_size": a.Vocab,
		"torch_dtype": dtypeName(opt.DType), "sfsurgery_synthetic": a.Name,
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	out := &checkpoint.Output{Shards: shards, Index: len(shards) > 1,
		Files: []checkpoint.ExtraFile{{Name: "config.json", Data: append(b, '\n')}}}
	return checkpoint.WriteDir(ctx, dir, out, &opt.Write)
}

func dtypeName(d checkpoint.DType) string {
	return map[checkpoint.DType]string{checkpoint.BF16: "bfloat16", checkpoint.F16: "float16", checkpoint.F32: "float32"}[d]
}

func product(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// randomSource writes n random elements: weights roughly N(0, 0.02²)
// (a sum of uniforms), norm weights near 1.
type randomSource struct {
	dt   checkpoint.DType
	n    int64
	seed uint64
	norm bool
}

// WriteTo streams the elements in 1 MiB chunks.
func (s randomSource) WriteTo(w io.Writer) (int64, error) {
	rng := rand.New(rand.NewPCG(s.seed, 0x2f4))
	size := int64(s.dt.Size())
	buf := make([]byte, 1<<20)
	var written int64
	for written < s.n*size {
		chunk := buf[:min(int64(len(buf)), s.n*size-written)]
		for i := 0; i < len(chunk); i += int(size) {
			u := rng.Uint64()
			// Three 16-bit uniforms summed: bell-shaped in (-1.5, 1.5).
			v := (float32(u&0xFFFF)+float32(u>>16&0xFFFF)+float32(u>>32&0xFFFF))/65536 - 1.5
			v *= 0.02
			if s.norm {
				v = 1 + v
			}
			putElem(chunk[i:], v, s.dt)
		}
		k, err := w.Write(chunk)
		written += int64(k)
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

func putElem(b []byte, v float32, dt checkpoint.DType) {
	switch dt {
	case checkpoint.F32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(v))
	case checkpoint.BF16:
		binary.LittleEndian.PutUint16(b, half.BF16(v))
	default:
		binary.LittleEndian.PutUint16(b, half.F16(float64(v)))
	}
}
