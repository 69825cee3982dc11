package kernels

import (
	"errors"
	"time"

	"github.com/sfsurgery/sfsurgery/cuda"
)

// Elapsed returns the GPU time taken by the work that queue puts on d
// (SparseMatmul, DenseMatmul, DecodeAmpere): it records a CUDA event on the
// device's stream, calls queue, records a second event, waits for it and
// returns the time between the two. Benchmarks call it after a warm-up.
func (d *Device) Elapsed(queue func() error) (elapsed time.Duration, err error) {
	if queue == nil {
		return 0, argError("Elapsed: nil function")
	}
	var start, stop cuda.Event
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
		var err error
		if start, err = d.drv.EventCreate(); err != nil {
			return err
		}
		if stop, err = d.drv.EventCreate(); err != nil {
			return err
		}
		return d.drv.EventRecord(start, d.stream)
	})
	if err != nil {
		return 0, err
	}
	if err := queue(); err != nil {
		return 0, err
	}
	err = d.do(func() error {
		if err := d.drv.EventRecord(stop, d.stream); err != nil {
			return err
		}
		if err := d.drv.EventSynchronize(stop); err != nil {
			return err
		}
		elapsed, err = d.drv.EventElapsedTime(start, stop)
		return err
	})
	if err != nil {
		return 0, err
	}
	return elapsed, nil
}

// destroyEvent destroys e if it was created. It runs with the context
// current and the mutex held.
func (d *Device) destroyEvent(e cuda.Event) error {
	if e == 0 {
		return nil
	}
	return d.drv.EventDestroy(e)
}
