package verify

import (
	"errors"
)

// errNoGPUYet is returned until the GPU backend is wired in.
var errNoGPUYet = errors.New("GPU verification not available in this build")

func newGPUNumeric(opt Options) (numeric, error) { return nil, errNoGPUYet }
