package cuda

// Stream is a CUstream: a queue of work that runs in order.
type Stream uintptr

// StreamCreate creates a stream.
func (d *Driver) StreamCreate() (Stream, error) {
	var s uintptr
	if err := d.check("cuStreamCreate", d.cuStreamCreate(&s, 0)); err != nil {
		return 0, err
	}
	return Stream(s), nil
}

// StreamDestroy destroys a stream; work queued on it still runs.
func (d *Driver) StreamDestroy(s Stream) error {
	return d.check("cuStreamDestroy_v2", d.cuStreamDestroy(uintptr(s)))
}
