package kernels

import (
	"fmt"

	"github.com/sfsurgery/sfsurgery/cuda"
)

// L2CacheBytes returns the size of the device's L2 cache in bytes.
// Benchmarks rotate among enough copies of their inputs to exceed it, so
// that the cache does not flatter them.
func (d *Device) L2CacheBytes() (int64, error) {
	var v int
	err := d.do(func() error {
		var err error
		if v, err = d.drv.DeviceAttribute(d.dev, cuda.AttrL2CacheSize); err != nil {
			return fmt.Errorf("reading the L2 cache size: %w", err)
		}
		return nil
	})
	return int64(v), err
}
