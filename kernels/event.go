package kernels

import (
	"errors"
	"time"
)

// Elapsed returns the GPU time taken by the work that queue puts on d
// (SparseMatmul, DenseMatmul, DecodeAmpere): it records a CUDA event on the
// device's stream, calls queue, records a second event, waits for it and
// returns the time between the two. Benchmarks call it after a warm-up.
func (d *Device) Elapsed(queue func() error) (elapsed time.Duration, err error) {
	if queue == nil {
		return 0, argError("Elapsed: nil function")
	}
	var start, stop uintptr
	defer func() {
		if start == 0 && stop == 0 {
			return
		}
		derr := d.do(func() error { return errors.Join(d.destroyEvent(start), d.destroyEvent(stop)) })
		if err == nil {
			err = derr
		}
	}()
	err = d.do(func() error {
		drv := d.drv
		if err := drv.check("cuEventCreate", drv.cuEventCreate(&start, 0)); err != nil {
			return err
		}
		if err := drv.check("cuEventCreate", drv.cuEventCreate(&stop, 0)); err != nil {
			return err
		}
		return drv.check("cuEventRecord", drv.cuEventRecord(start, d.stream))
	})
	if err != nil {
		return 0, err
	}
	if err := queue(); err != nil {
		return 0, err
	}
	var ms float32
	err = d.do(func() error {
		drv := d.drv
		if err := drv.check("cuEventRecord", drv.cuEventRecord(stop, d.stream)); err != nil {
			return err
		}
		if err := drv.check("cuEventSynchronize", drv.cuEventSync(stop)); err != nil {
			return err
		}
		return drv.check("cuEventElapsedTime", drv.cuEventElapsed(&ms, start, stop))
	})
	if err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

// destroyEvent destroys e if it was created. It runs with the context
// current and the mutex held.
func (d *Device) destroyEvent(e uintptr) error {
	if e == 0 {
		return nil
	}
	return d.drv.check("cuEventDestroy_v2", d.drv.cuEventDestroy(e))
}
