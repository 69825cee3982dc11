package kernels

import (
	"errors"

	"github.com/sfsurgery/sfsurgery/cuda"
)

// workspace is the decode kernels' split-K workspace (launchplan.Workspace):
// counters u32 ticket counters (zero between launches: each launch puts
// back the ones it used), then the f32 partial sums. One serves every
// launch record of a Device, because the Device's launches run one at a
// time on its one stream.
type workspace struct {
	buf      *Buffer // nil until a record needs one
	counters int     // u32 words before the partial sums, a multiple of 32
}

// partials returns the f32 partial sums w holds room for.
func (w *workspace) partials() int64 {
	if w.buf == nil {
		return 0
	}
	return w.buf.n/4 - int64(w.counters)
}

// ptr returns the address of w's partial sums, which the kernels take
// (their counters lie just below).
func (w *workspace) ptr() cuda.DevicePtr { return w.buf.ptr + 4*cuda.DevicePtr(w.counters) }

// growWorkspace makes the Device's workspace hold at least counters
// counters and partials partial sums. A larger workspace replaces the old
// one once the work queued on the device is done, and its counters are
// zeroed on the stream. It runs with the context current and the mutex
// held.
func (d *Device) growWorkspace(counters int, partials int64) error {
	w := &d.dec.work
	counters = ceilDiv(max(counters, w.counters), 32) * 32
	if w.buf != nil && counters <= w.counters && partials <= w.partials() {
		return nil
	}
	partials = max(partials, w.partials())
	if w.buf != nil {
		// Launches still queued may use the old workspace.
		if err := d.drv.CtxSynchronize(); err != nil {
			return err
		}
		old := w.buf
		w.buf, w.counters = nil, 0
		if err := d.free(old); err != nil {
			return err
		}
	}
	b, err := d.alloc(4 * (int64(counters) + partials))
	if err != nil {
		return err
	}
	if err := d.drv.MemsetD32Async(b.ptr, 0, counters, d.stream); err != nil {
		return errors.Join(err, d.free(b))
	}
	w.buf, w.counters = b, counters
	return nil
}
