package speed

import (
	"errors"
	"fmt"
	"time"

	"github.com/sfsurgery/sfsurgery/kernels"
)

// Timing defaults: warm-up runs and timed runs per row (METHOD.md: warm
// up, then the median of many).
const (
	DefaultWarmup = 5
	DefaultRuns   = 25
	minRuns       = 20
	maxBlockers   = 64
	// DefaultGraphCalls is the most runs one timed graph replay holds
	// (Options.GraphCalls): at decode sizes the launch gaps between
	// separately timed runs (about 1 µs each) are a tenth of a run.
	DefaultGraphCalls = 20
	// graphBudget bounds a replay's GPU time as estimated from one run:
	// rows of a millisecond or more, whose launch gaps do not matter, are
	// timed run by run.
	graphBudget = 2 * time.Millisecond
	// maxGraphCopies bounds the rotation copies a replay cycles through.
	maxGraphCopies = 64
)

// timer times queued GPU work by per-iteration CUDA events. Before the
// timed runs it queues enough large device-to-device copies (the
// blocker) that the host has queued every run before the GPU reaches the
// first: the events then measure back-to-back GPU work, not the host.
//
// With graphCalls above 1, short runs are captured into a CUDA graph of
// several consecutive runs and each replay is timed instead, as an engine
// replays a decode step: a run's time is then its replay's over the runs
// in it, without the launch gap and the event pair each separately timed
// run carries.
type timer struct {
	blockTime    time.Duration // GPU time of one blocker copy
	hostPerRun   time.Duration // host time to queue one run, as last seen
	warmup, runs int
	graphCalls   int // most runs per replay; 0 or 1: every run timed alone
	synchronize  func() error
	elapsedEach  func(n int, queue func(i int) error) ([]time.Duration, error)
	queueBlocker func() error
	// capture records what queue puts on the stream as a graph and returns
	// its replay and release; nil: no graphs.
	capture        func(queue func() error) (replay, release func() error, err error)
	sinceHostStart func(time.Time) time.Duration
}

// newTimer returns a timer on dev whose blocker copies src to dst, one
// copy taking blockTime on the GPU, replaying graphs of up to graphCalls
// runs.
func newTimer(dev *kernels.Device, src, dst *kernels.Buffer, blockTime time.Duration, warmup, runs,
	graphCalls int) *timer {
	return &timer{
		blockTime: blockTime, hostPerRun: 50 * time.Microsecond,
		warmup: warmup, runs: max(runs, minRuns), graphCalls: graphCalls,
		synchronize:  dev.Synchronize,
		elapsedEach:  dev.ElapsedEach,
		queueBlocker: func() error { return dst.CopyFrom(src) },
		capture: func(queue func() error) (func() error, func() error, error) {
			g, err := dev.Capture(queue)
			if err != nil {
				return nil, nil, err
			}
			return g.Launch, g.Close, nil
		},
		sinceHostStart: time.Since,
	}
}

// measure runs run(0 … warmup-1) and waits, then times run(warmup …
// warmup+runs-1) one by one; run(i) should use rotation copy i of copies.
// Where the timer replays graphs and one run takes less than graphBudget
// over 2, it instead captures run(warmup …) for as many runs as fit in
// graphBudget (at most graphCalls, and at least every rotation copy up to
// maxGraphCopies) and times runs replays. It returns the summary and
// whether the GPU may have waited for the host even after one retry with a
// longer blocker; a capture the driver refuses leaves the runs timed one
// by one, with the reason in the summary.
func (t *timer) measure(copies int, run func(i int) error) (_ Summary, _ bool, err error) {
	for i := range t.warmup {
		if err := run(i); err != nil {
			return Summary{}, false, err
		}
	}
	if err := t.synchronize(); err != nil {
		return Summary{}, false, err
	}
	batch, err := t.batch(copies, run)
	if err != nil {
		return Summary{}, false, err
	}
	why := ""
	timed := func(i int) error { return run(t.warmup + i) }
	if batch > 1 {
		replay, release, cerr := t.capture(func() error {
			for i := range batch {
				if err := run(t.warmup + i); err != nil {
					return err
				}
			}
			return nil
		})
		if cerr != nil {
			batch, why = 1, fmt.Sprintf("timed run by run: %v", cerr)
		} else {
			defer func() { err = errors.Join(err, release()) }()
			timed = func(int) error { return replay() }
		}
	}
	var times []time.Duration
	hostBound := false
	for attempt := range 2 {
		blockers := t.blockers(attempt)
		for range blockers {
			if err := t.queueBlocker(); err != nil {
				return Summary{}, false, fmt.Errorf("speed: blocker copy: %w", err)
			}
		}
		var start time.Time
		var queued time.Duration
		ts, err := t.elapsedEach(t.runs, func(i int) error {
			if i == 0 {
				start = time.Now()
			}
			if err := timed(i); err != nil {
				return err
			}
			if i == t.runs-1 {
				queued = t.sinceHostStart(start)
			}
			return nil
		})
		if err != nil {
			return Summary{}, false, err
		}
		times = ts
		t.hostPerRun = max(queued/time.Duration(t.runs), time.Microsecond)
		// The GPU had work until the blockers finished; if the host was
		// still queueing then, some runs may include its gaps.
		hostBound = queued > time.Duration(blockers)*t.blockTime*9/10
		if !hostBound {
			break
		}
	}
	for i := range times {
		times[i] /= time.Duration(batch)
	}
	sum := Summarize(times)
	sum.Batch, sum.Note = batch, why
	return sum, hostBound, nil
}

// batch returns the runs measure puts in one replay (1: none). It
// estimates a run's time as one run of the warm-up copy 0 on its own,
// waited for.
func (t *timer) batch(copies int, run func(i int) error) (int, error) {
	if t.graphCalls <= 1 || t.capture == nil {
		return 1, nil
	}
	start := time.Now()
	if err := run(0); err != nil {
		return 0, err
	}
	if err := t.synchronize(); err != nil {
		return 0, err
	}
	est := max(t.sinceHostStart(start), time.Microsecond)
	n := min(t.graphCalls, int(graphBudget/est))
	if n < 2 {
		return 1, nil
	}
	return max(n, min(copies, maxGraphCopies)), nil
}

// blockers returns how many blocker copies cover the host's queueing of
// all runs twice over (four times over on a retry).
func (t *timer) blockers(attempt int) int {
	if t.blockTime <= 0 {
		return 1
	}
	need := time.Duration(t.runs) * t.hostPerRun * time.Duration(2<<attempt)
	return int(min(max((need+t.blockTime-1)/t.blockTime, 1), maxBlockers))
}
