package verify

import (
	"fmt"
)

// newNumeric picks the backend of the numerical check from opt.Device.
func newNumeric(opt Options) (numeric, error) {
	switch opt.Device {
	case "", "cpu":
		return newCPUNumeric(opt.Tokens, opt.Seed, ""), nil
	case "cuda", "auto":
		g, err := newGPUNumeric(opt)
		if err == nil {
			return g, nil
		}
		if opt.Device == "cuda" {
			return nil, fmt.Errorf("--device cuda: %w", err)
		}
		return newCPUNumeric(opt.Tokens, opt.Seed, "GPU unavailable: "+err.Error()), nil
	}
	return nil, fmt.Errorf("unknown device %q (want cpu, cuda or auto)", opt.Device)
}
