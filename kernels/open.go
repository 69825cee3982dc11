package kernels

import "time"

// openNoteAfter is how long OpenNotify waits before its note.
const openNoteAfter = 2 * time.Second

// OpenNotify is Open that calls note once, from another goroutine, if the
// device is not open after 2 s, with a line that says why a command is
// waiting: on the first run on a machine the driver compiles the embedded
// PTX for its GPU, about 20 s on an H100 (a one-row `sfsurgery bench`
// took 22.4 s with an empty cache and 1.3 s with it); later
// runs read the driver's cache (~/.nv/ComputeCache) in about 0.1 s. note
// has returned by the time OpenNotify does.
func OpenNotify(ordinal int, note func(msg string)) (*Device, error) {
	return notifyAfter(func() (*Device, error) { return Open(ordinal) }, openNoteAfter, func() {
		note("compiling the GPU kernels for this GPU: the first run on a machine takes about 20 s " +
			"(on an H100), later runs use the driver's cache")
	})
}

// notifyAfter runs f and, if it has not returned after wait, slow from
// another goroutine; slow has returned by the time notifyAfter does.
func notifyAfter[T any](f func() (T, error), wait time.Duration, slow func()) (T, error) {
	done := make(chan struct{})
	t := time.AfterFunc(wait, func() {
		defer close(done)
		slow()
	})
	v, err := f()
	if !t.Stop() {
		<-done // slow ran or is running
	}
	return v, err
}
