package surgery

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
)

// NewUnpackPlan plans turning a compressed checkpoint (sfsurgery's ampere
// or bitmask output, or a compressed-tensors sparse-24-bitmask checkpoint
// written by other tools) back into dense weights. The output is
// byte-identical to what prune --format dense writes for the same input.
func NewUnpackPlan(ck *checkpoint.Checkpoint, version string) (*Plan, error) {
	comps, err := format.FindCompressed(ck)
	if err != nil {
		return nil, err
	}
	if len(comps) == 0 {
		return nil, fmt.Errorf("%s: nothing to unpack: no P.packed/P.meta or P.compressed/P.bitmask tensors", ck.Path)
	}
	man, err := format.ReadManifest(ck)
	if err != nil && err != format.ErrNoManifest {
		return nil, err
	}
	byShard := map[*checkpoint.File][]*format.Compressed{}
	for _, c := range comps {
		byShard[c.File] = append(byShard[c.File], c)
	}
	p := &Plan{Input: ck, Options: Options{Format: format.Dense, Version: version}, single: isSingleFile(ck.Path),
		noReport: true, method: format.Magnitude}
	if man != nil {
		// The weights are what the input's method decided: the output's
		// manifest says so, as prune --format dense's would.
		p.method = man.Method.OrMagnitude()
	}
	for _, s := range ck.Shards {
		shard := checkpoint.Shard{Name: filepath.Base(s.Path()), Metadata: map[string]string{}}
		skip := map[string]bool{}
		outMan := p.manifest()
		decoded := map[string]*format.Compressed{}
		for _, c := range byShard[s] {
			skip[c.Values.Name], skip[c.Index.Name], skip[c.Shape.Name] = true, true, true
			decoded[c.Values.Name] = c
			rule := "2:4"
			if man != nil && man.Targets[c.Name] != "" {
				rule = man.Targets[c.Name]
			}
			outMan.Targets[c.Name] = rule
			p.Targets = append(p.Targets, &TensorPlan{Target: format.Target{Name: c.Name, Shard: shard.Name, DType: c.Values.DType,
				Shape: []int64{int64(c.Rows), int64(c.Cols)}, Rule: rule, Outputs: []string{c.Name}}})
		}
		for _, t := range s.Tensors {
			if c, ok := decoded[t.Name]; ok {
				src := &decodeSource{c: c, chunk: chunkBytes}
				p.decoders = append(p.decoders, src)
				shard.Tensors = append(shard.Tensors, checkpoint.TensorSpec{Name: c.Name, DType: c.Values.DType,
					Shape: []int64{int64(c.Rows), int64(c.Cols)}, Src: src})
				continue
			}
			if skip[t.Name] {
				continue
			}
			if _, clash := s.Tensor(strings.TrimSuffix(t.Name, ".weight") + ".packed"); clash && strings.HasSuffix(t.Name, ".weight") {
				return nil, fmt.Errorf("%s: tensor %q exists beside its compressed form", s.Path(), t.Name)
			}
			shard.Tensors = append(shard.Tensors, copySpec(s, t))
		}
		for k, v := range s.Metadata {
			shard.Metadata[k] = v
		}
		if len(outMan.Targets) > 0 || man != nil {
			shard.Metadata[format.MetadataKey] = outMan.Encode()
		}
		p.shards = append(p.shards, shard)
	}
	if !p.single && ck.Config != nil {
		cfg, err := denseConfig(ck)
		if err != nil {
			return nil, err
		}
		p.config = cfg
	}
	return p, nil
}

// denseConfig removes sfsurgery's quantization_config or a sparse-only
// compressed-tensors one.
// A config that also quantizes is refused: its weights are not plain
// dense values once decompressed.
func denseConfig(ck *checkpoint.Checkpoint) ([]byte, error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(ck.Config, &cfg); err != nil {
		return nil, fmt.Errorf("%s: config.json: %w", ck.Path, err)
	}
	raw, ok := cfg["quantization_config"]
	if !ok {
		return ck.Config, nil
	}
	var q map[string]json.RawMessage
	if err := json.Unmarshal(raw, &q); err != nil {
		return nil, fmt.Errorf("%s: config.json quantization_config: %w", ck.Path, err)
	}
	if string(q["quant_method"]) == `"`+QuantMethod+`"` {
		// sfsurgery's own (ampere): it only names the pruned modules.
		delete(cfg, "quantization_config")
		return marshalConfig(cfg)
	}
	for k := range q {
		switch k {
		case "quant_method", "version", "sparsity_config", "transform_config", "registry_requires_subclass":
		default:
			if string(q[k]) != "null" && string(q[k]) != "{}" && string(q[k]) != "[]" {
				return nil, fmt.Errorf("%s: config.json quantization_config has %q: quantized checkpoints are not supported", ck.Path, k)
			}
		}
	}
	delete(cfg, "quantization_config")
	return marshalConfig(cfg)
}

// decodeSource writes the dense weight decoded from its compressed form,
// chunk bytes of it at a time.
type decodeSource struct {
	c     *format.Compressed
	chunk int
}

func (s *decodeSource) WriteTo(w io.Writer) (int64, error) {
	c := s.c
	rowBytes := c.Cols * c.DType.Size()
	a := c.RowAlign()
	step := max(s.chunk/max(rowBytes, 1)/a*a, a)
	buf := make([]byte, min(step, c.Rows)*rowBytes)
	var scratch []byte
	var written int64
	for r0 := 0; r0 < c.Rows; r0 += step {
		n := min(step, c.Rows-r0)
		var err error
		if scratch, err = c.DecodeRows(buf[:n*rowBytes], r0, n, scratch); err != nil {
			return written, err
		}
		k, err := w.Write(buf[:n*rowBytes])
		written += int64(k)
		if err != nil {
			return written, err
		}
	}
	return written, nil
}
