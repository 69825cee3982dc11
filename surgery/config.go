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

// QuantMethod is the quant_method of the quantization_config an ampere
// output's config.json carries: the name under which the Python package
// (python/sfsurgery) registers its loader with transformers.
const QuantMethod = "sfsurgery"

// outputConfig returns the config.json of the output: the input's,
// unchanged for the dense format; with compressed-tensors'
// quantization_config for bitmask (without transform_config, which
// readers before 0.11 reject); with sfsurgery's for ampere, which
// transformers loads once the Python package is imported
// (docs/serve.md).
func (p *Plan) outputConfig() ([]byte, error) {
	if p.Options.Format == format.Dense {
		return p.Input.Config, nil
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(p.Input.Config, &cfg); err != nil {
		return nil, fmt.Errorf("%s: config.json: %w", p.Input.Path, err)
	}
	if _, ok := cfg["quantization_config"]; ok {
		return nil, fmt.Errorf("%s: config.json already has a quantization_config; pruning a quantized or compressed checkpoint is not supported", p.Input.Path)
	}
	targets, ignore := []string{}, []string{}
	var pruned, total int64
	for _, t := range p.Targets {
		module := trimWeight(t.Name)
		if t.Skip != "" {
			ignore = append(ignore, module)
			continue
		}
		targets = append(targets, module)
		pruned += t.Shape[0] * t.Shape[1] / 2
	}
	for _, name := range p.Input.Names() {
		_, info, _ := p.Input.Lookup(name)
		total += info.NumElements()
	}
	var q map[string]any
	switch p.Options.Format {
	case format.Bitmask:
		q = map[string]any{
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
	case format.Ampere:
		q = map[string]any{
			"quant_method":       QuantMethod,
			"format":             string(format.Ampere),
			"sparsity_structure": "2:4",
			"targets":            targets,
			"ignore":             ignore,
		}
	default:
		return nil, fmt.Errorf("format %q: no quantization_config defined", p.Options.Format)
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
