package kernels

import (
	"errors"
	"fmt"

	"github.com/sfsurgery/sfsurgery/cuda"
)

// Graph is work captured once from a Device's stream (CUDA stream
// capture) and replayed as a single launch, as a serving engine replays a
// decode step: the launches inside run back to back without the host's
// per-launch cost. A Graph replays exactly the launches captured, with
// their arguments (buffers, shapes, plans) as they were then; the buffers
// must outlive it.
type Graph struct {
	d     *Device
	graph cuda.Graph
	exec  cuda.GraphExec
}

// Capture records the work queue puts on d's stream (SparseMatmul,
// DenseMatmul, copies) into a Graph instead of running it. queue must
// only queue work: a call that waits for the device (Synchronize, or a
// first call that must replace the split-K workspace of the decode or the
// prefill kernel) fails the capture, so run the same work once before
// capturing it. The error wraps
// what queue returned or why the driver refused the capture.
func (d *Device) Capture(queue func() error) (*Graph, error) {
	if queue == nil {
		return nil, argError("Capture: nil function")
	}
	if err := d.do(func() error {
		// Relaxed: the Device's calls run on whichever OS thread holds its
		// mutex.
		return d.drv.StreamBeginCapture(d.stream, cuda.CaptureRelaxed)
	}); err != nil {
		return nil, err
	}
	qerr := queue()
	g := &Graph{d: d}
	err := d.do(func() error {
		var err error
		if g.graph, err = d.drv.StreamEndCapture(d.stream); err != nil {
			return err
		}
		if qerr != nil {
			return nil
		}
		g.exec, err = d.drv.GraphInstantiate(g.graph)
		return err
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
	return g.d.do(func() error { return g.d.drv.GraphLaunch(g.exec, g.d.stream) })
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
			errs = append(errs, g.d.drv.GraphExecDestroy(g.exec))
			g.exec = 0
		}
		if g.graph != 0 {
			errs = append(errs, g.d.drv.GraphDestroy(g.graph))
			g.graph = 0
		}
		return errors.Join(errs...)
	})
}
