package cuda

import "time"

// Event is a CUevent: a marker recorded on a stream.
type Event uintptr

// EventCreate creates an event (with timing).
func (d *Driver) EventCreate() (Event, error) {
	var e uintptr
	if err := d.check("cuEventCreate", d.cuEventCreate(&e, 0)); err != nil {
		return 0, err
	}
	return Event(e), nil
}

// EventRecord records e on s.
func (d *Driver) EventRecord(e Event, s Stream) error {
	return d.check("cuEventRecord", d.cuEventRecord(uintptr(e), uintptr(s)))
}

// EventSynchronize waits until the work before e has run.
func (d *Driver) EventSynchronize(e Event) error {
	return d.check("cuEventSynchronize", d.cuEventSync(uintptr(e)))
}

// EventElapsedTime returns the GPU time between two recorded events, at
// the driver's resolution (about 0.5 µs).
func (d *Driver) EventElapsedTime(start, end Event) (time.Duration, error) {
	var ms float32
	if err := d.check("cuEventElapsedTime", d.cuEventElapsed(&ms, uintptr(start), uintptr(end))); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

// EventDestroy destroys an event.
func (d *Driver) EventDestroy(e Event) error {
	return d.check("cuEventDestroy_v2", d.cuEventDestroy(uintptr(e)))
}
