package surgery

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/sfsurgery/sfsurgery/format"
)

// compressedTensorsVersion is the compressed-tensors version recorded in
// a sparse-24-bitmask quantization_config: the format exists from 0.9.0
// to 0.14.x (docs/formats.md §3).
const compressedTensorsVersion = "0.9.2"

// outputConfig returns the config.json of the output: unchanged, except
// that the bitmask format adds the compressed-tensors quantization_config
// (without transform_config, which readers before 0.11 reject).
func (p *Plan) outputConfig() ([]byte, error) {
	if p.Options.Format != format.Bitmask {
		return p.Input.Config, nil
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(p.Input.Config, &cfg); err != nil {
		return nil, fmt.Errorf("%s: config.json: %w", p.Input.Path, err)
	}
	if _, ok := cfg["quantization_config"]; ok {
		return nil, fmt.Errorf("%s: config.json already has a quantization_config; pruning a quantized or compressed checkpoint is not supported", p.Input.Path)
	}
	var targets, ignore []string
	var pruned, total int64
	for _, t := range p.Targets {
		module := trimWeight(t.Name)
		n := t.Shape[0] * t.Shape[1]
		if t.Skip != "" {
			ignore = append(ignore, module)
			continue
		}
		targets = append(targets, module)
		pruned += n / 2
	}
	for _, name := range p.Input.Names() {
		_, info, _ := p.Input.Lookup(name)
		total += info.NumElements()
	}
	if ignore == nil {
		ignore = []string{}
	}
	q := map[string]any{
		"quant_method": "compressed-tensors",
		"version":      compressedTensorsVersion,
		"sparsity_config": map[string]any{
			"format":             "sparse-24-bitmask",
			"sparsity_structure": "2:4",
			"global_sparsity":    float64(pruned) / float64(max(total, 1)),
			"targets":            targets,
			"ignore":             ignore,
		},
	}
	raw, err := json.Marshal(q)
	if err != nil {
		return nil, err
	}
	cfg["quantization_config"] = raw
	return marshalConfig(cfg)
}

// marshalConfig writes a config the way transformers does: sorted keys,
// two-space indent, trailing newline.
func marshalConfig(cfg map[string]json.RawMessage) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cfg); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// trimWeight turns a weight name into its module name.
func trimWeight(name string) string {
	if len(name) > 7 && name[len(name)-7:] == ".weight" {
		return name[:len(name)-7]
	}
	return name
}
