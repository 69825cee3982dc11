package kernels

import (
	"errors"
	"fmt"
)

// captureRelaxed is CU_STREAM_CAPTURE_MODE_RELAXED: the capture does not
// forbid other threads' calls (the Device's calls run on whichever OS
// thread holds its mutex).
const captureRelaxed = 2

// Graph is work captured once from a Device's stream (CUDA stream
// capture) and replayed as a single launch, as a serving engine replays a
// decode step: the launches inside run back to back without the host's
// per-launch cost. A Graph replays exactly the launches captured, with
// their arguments (buffers, shapes, plans) as they were then; the buffers
// must outlive it.
type Graph struct {
	d     *Device
	graph uintptr
	exec  uintptr
}

// Capture records the work queue puts on d's stream (SparseMatmul,
// DenseMatmul, copies) into a Graph instead of running it. queue must
// only queue work: a call that waits for the device (Synchronize, or a
// first call that must replace the decode kernel's workspace) fails the
// capture, so run the same work once before capturing it. The error wraps
// what queue returned or why the driver refused the capture.
func (d *Device) Capture(queue func() error) (*Graph, error) {
	if queue == nil {
		return nil, argError("Capture: nil function")
	}
	if err := d.do(func() error {
		return d.drv.check("cuStreamBeginCapture", d.drv.cuStreamBeginCapture(d.stream, captureRelaxed))
	}); err != nil {
		return nil, err
	}
	qerr := queue()
	g := &Graph{d: d}
	err := d.do(func() error {
		if err := d.drv.check("cuStreamEndCapture", d.drv.cuStreamEndCapture(d.stream, &g.graph)); err != nil {
			return err
		}
		if qerr != nil {
			return nil
		}
		return d.drv.check("cuGraphInstantiate", d.drv.cuGraphInstantiate(&g.exec, g.graph, 0))
	})
	if qerr != nil || err != nil {
		return nil, errors.Join(fmt.Errorf("capture: %w", errors.Join(qerr, err)), g.Close())
	}
	return g, nil
}

// Launch queues one replay of g on its device's stream.
func (g *Graph) Launch() error {
	if g == nil || g.exec == 0 {
		return argError("Launch: graph is closed")
	}
	return g.d.do(func() error { return g.d.drv.check("cuGraphLaunch", g.d.drv.cuGraphLaunch(g.exec, g.d.stream)) })
}

// Close frees g; replays already queued still run. Closing twice is a
// no-op.
func (g *Graph) Close() error {
	if g == nil || g.graph == 0 && g.exec == 0 {
		return nil
	}
	return g.d.do(func() error {
		var errs []error
		if g.exec != 0 {
			errs = append(errs, g.d.drv.check("cuGraphExecDestroy", g.d.drv.cuGraphExecDestroy(g.exec)))
			g.exec = 0
		}
		if g.graph != 0 {
			errs = append(errs, g.d.drv.check("cuGraphDestroy", g.d.drv.cuGraphDestroy(g.graph)))
			g.graph = 0
		}
		return errors.Join(errs...)
	})
}
