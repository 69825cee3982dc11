package cuda

// Graph is a CUgraph: work captured from a stream.
type Graph uintptr

// GraphExec is a CUgraphExec: a Graph instantiated to be launched.
type GraphExec uintptr

// StreamBeginCapture starts capturing the work queued on s into a graph
// instead of running it.
func (d *Driver) StreamBeginCapture(s Stream, mode CaptureMode) error {
	return d.check("cuStreamBeginCapture", d.cuStreamBeginCapture(uintptr(s), int32(mode)))
}

// StreamEndCapture ends the capture on s and returns its graph.
func (d *Driver) StreamEndCapture(s Stream) (Graph, error) {
	var g uintptr
	err := d.check("cuStreamEndCapture", d.cuStreamEndCapture(uintptr(s), &g))
	return Graph(g), err
}

// GraphInstantiate instantiates g for launches.
func (d *Driver) GraphInstantiate(g Graph) (GraphExec, error) {
	var e uintptr
	if err := d.check("cuGraphInstantiate", d.cuGraphInstantiate(&e, uintptr(g), 0)); err != nil {
		return 0, err
	}
	return GraphExec(e), nil
}

// GraphLaunch queues one replay of e on s.
func (d *Driver) GraphLaunch(e GraphExec, s Stream) error {
	return d.check("cuGraphLaunch", d.cuGraphLaunch(uintptr(e), uintptr(s)))
}

// GraphExecDestroy destroys an instantiated graph.
func (d *Driver) GraphExecDestroy(e GraphExec) error {
	return d.check("cuGraphExecDestroy", d.cuGraphExecDestroy(uintptr(e)))
}

// GraphDestroy destroys a graph.
func (d *Driver) GraphDestroy(g Graph) error {
	return d.check("cuGraphDestroy", d.cuGraphDestroy(uintptr(g)))
}
