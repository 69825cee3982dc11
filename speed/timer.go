package speed

import (
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
)

// timer times queued GPU work by per-iteration CUDA events. Before the
// timed runs it queues enough large device-to-device copies (the
// blocker) that the host has queued every run before the GPU reaches the
// first: the events then measure back-to-back GPU work, not the host.
type timer struct {
	blockTime      time.Duration // GPU time of one blocker copy
	hostPerRun     time.Duration // host time to queue one run, as last seen
	warmup, runs   int
	synchronize    func() error
	elapsedEach    func(n int, queue func(i int) error) ([]time.Duration, error)
	queueBlocker   func() error
	sinceHostStart func(time.Time) time.Duration
}

// newTimer returns a timer on dev whose blocker copies src to dst, one
// copy taking blockTime on the GPU.
func newTimer(dev *kernels.Device, src, dst *kernels.Buffer, blockTime time.Duration, warmup, runs int) *timer {
	return &timer{
		blockTime: blockTime, hostPerRun: 50 * time.Microsecond,
		warmup: warmup, runs: max(runs, minRuns),
		synchronize:    dev.Synchronize,
		elapsedEach:    dev.ElapsedEach,
		queueBlocker:   func() error { return dst.CopyFrom(src) },
		sinceHostStart: time.Since,
	}
}

// measure runs run(0 … warmup-1) and waits, then times run(warmup …
// warmup+runs-1) one by one; run(i) should use rotation copy i. It
// returns the summary and whether the GPU may have waited for the host
// even after one retry with a longer blocker.
func (t *timer) measure(run func(i int) error) (Summary, bool, error) {
	for i := range t.warmup {
		if err := run(i); err != nil {
			return Summary{}, false, err
		}
	}
	if err := t.synchronize(); err != nil {
		return Summary{}, false, err
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
			if err := run(t.warmup + i); err != nil {
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
	return Summarize(times), hostBound, nil
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
