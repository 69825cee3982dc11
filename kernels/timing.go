package kernels

import (
	"errors"
	"time"

	"github.com/sfsurgery/sfsurgery/cuda"
)

// maxRepetitions bounds ElapsedEach's n: a CUDA event each.
const maxRepetitions = 1 << 20

// ElapsedEach times n pieces of work one by one. It records a CUDA event
// on the device's stream, then for i = 0 … n-1 calls queue(i) and records
// another event, waits for the last and returns the GPU time between each
// pair of consecutive events: out[i] is the time of the work queue(i) put
// on the stream.
//
// The times include any wait of the GPU for the host. To time the work
// alone, queue enough GPU work first (a large [Buffer.CopyFrom]) that the
// host has queued all n pieces before the GPU reaches the first event.
// n is at most 1<<20 (a CUDA event each).
func (d *Device) ElapsedEach(n int, queue func(i int) error) (out []time.Duration, err error) {
	if queue == nil {
		return nil, argError("ElapsedEach: nil function")
	}
	if n < 1 || n > maxRepetitions {
		return nil, argError("ElapsedEach: %d repetitions (want 1 to %d)", n, maxRepetitions)
	}
	events := make([]cuda.Event, n+1)
	defer func() {
		derr := d.do(func() error {
			var errs []error
			for _, e := range events {
				errs = append(errs, d.destroyEvent(e))
			}
			return errors.Join(errs...)
		})
		if err == nil {
			err = derr
		}
	}()
	if err := d.do(func() error {
		for i := range events {
			var err error
			if events[i], err = d.drv.EventCreate(); err != nil {
				return err
			}
		}
		return d.record(events[0])
	}); err != nil {
		return nil, err
	}
	for i := range n {
		if err := queue(i); err != nil {
			return nil, err
		}
		if err := d.do(func() error { return d.record(events[i+1]) }); err != nil {
			return nil, err
		}
	}
	out = make([]time.Duration, n)
	err = d.do(func() error {
		if err := d.drv.EventSynchronize(events[n]); err != nil {
			return err
		}
		for i := range n {
			var err error
			if out[i], err = d.drv.EventElapsedTime(events[i], events[i+1]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// record records event e on the device's stream. It runs with the context
// current and the mutex held.
func (d *Device) record(e cuda.Event) error {
	return d.drv.EventRecord(e, d.stream)
}
