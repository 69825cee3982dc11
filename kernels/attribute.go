package kernels

import "fmt"

// attrL2CacheSize is CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE.
const attrL2CacheSize = 38

// L2CacheBytes returns the size of the device's L2 cache in bytes.
// Benchmarks rotate among enough copies of their inputs to exceed it, so
// that the cache does not flatter them.
func (d *Device) L2CacheBytes() (int64, error) {
	var v int32
	err := d.do(func() error {
		if err := d.drv.check("cuDeviceGetAttribute", d.drv.cuDeviceGetAttribute(&v, attrL2CacheSize, d.dev)); err != nil {
			return fmt.Errorf("reading the L2 cache size: %w", err)
		}
		return nil
	})
	return int64(v), err
}
