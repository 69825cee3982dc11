package kernels

import (
	"fmt"

	"github.com/sfsurgery/sfsurgery/cuda"
)

// Info describes an opened GPU.
type Info struct {
	Name         string // e.g. "NVIDIA H100 80GB HBM3"
	Major, Minor int    // compute capability, e.g. 9, 0
	SMs          int    // streaming multiprocessors
	MemBytes     int64  // total device memory
	Driver       int    // CUDA driver API version, e.g. 13000 for 13.0
}

// String returns a one-line summary such as
// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.2 GiB, driver 13.0)".
func (i Info) String() string {
	return fmt.Sprintf("%s (sm_%d%d, %d SMs, %.1f GiB, driver %s)",
		i.Name, i.Major, i.Minor, i.SMs, float64(i.MemBytes)/(1<<30), cuda.VersionString(i.Driver))
}
