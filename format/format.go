package format

import "fmt"

// Format is an output format of prune.
type Format string

// The output formats.
const (
	// Ampere writes P.packed, P.meta and P.shape for each target
	// P.weight: PyTorch's CUTLASS semi-structured layout, byte for byte.
	Ampere Format = "ampere"
	// Bitmask writes compressed-tensors' sparse-24-bitmask:
	// P.compressed, P.bitmask and P.shape, and a quantization_config.
	Bitmask Format = "bitmask"
	// Dense writes the pruned weights in place, under their own
	// names, loadable by any serving engine.
	Dense Format = "dense"
)

// Parse checks a --format value.
func Parse(s string) (Format, error) {
	switch f := Format(s); f {
	case Ampere, Bitmask, Dense:
		return f, nil
	}
	return "", fmt.Errorf("unknown format %q (want ampere, bitmask or dense)", s)
}
