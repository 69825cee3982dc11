package kernels

import "github.com/sfsurgery/sfsurgery/cuda"

// launch queues kernel fn on the device's stream with smem bytes of
// dynamic shared memory and the options of o (cooperative, clusters).
// args are device pointers or ints widened with cuda.Int32. It runs with
// the context current and the mutex held.
func (d *Device) launch(name string, fn cuda.Function, o cuda.LaunchConfig, args ...uint64) error {
	o.Stream = d.stream
	return d.drv.Launch(name, fn, o, args...)
}

// grid3 builds the cuda.LaunchConfig of a plain launch.
func grid3(grid, block cuda.Dim3, smem int) cuda.LaunchConfig {
	return cuda.LaunchConfig{Grid: grid, Block: block, SharedBytes: smem}
}
