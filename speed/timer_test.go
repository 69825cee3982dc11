package speed

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeTimer returns a timer whose GPU is simulated: each run takes 10 µs,
// queueing one run takes hostPerRun of host time.
func fakeTimer(hostPerRun time.Duration, blockers *int) *timer {
	t := &timer{blockTime: 100 * time.Microsecond, hostPerRun: 50 * time.Microsecond, warmup: 2, runs: 20}
	t.synchronize = func() error { return nil }
	t.queueBlocker = func() error { *blockers++; return nil }
	t.elapsedEach = func(n int, queue func(i int) error) ([]time.Duration, error) {
		out := make([]time.Duration, n)
		for i := range n {
			if err := queue(i); err != nil {
				return nil, err
			}
			out[i] = time.Duration(10+i%3) * time.Microsecond
		}
		return out, nil
	}
	t.sinceHostStart = func(time.Time) time.Duration { return time.Duration(t.runs) * hostPerRun }
	return t
}

func TestTimerMeasure(t *testing.T) {
	var calls []int
	blockers := 0
	tm := fakeTimer(time.Microsecond, &blockers)
	sum, hostBound, err := tm.measure(1, func(i int) error { calls = append(calls, i); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if sum.Runs != 20 || sum.Median != 11*time.Microsecond || hostBound {
		t.Errorf("summary %+v, host-bound %v", sum, hostBound)
	}
	// Warm-up 0, 1, then the timed runs 2 … 21: consecutive rotation
	// copies.
	if len(calls) != 22 || calls[0] != 0 || calls[2] != 2 || calls[21] != 21 {
		t.Errorf("calls %v", calls)
	}
	if blockers < 1 {
		t.Error("no blocker queued before the timed runs")
	}
}

func TestTimerHostBound(t *testing.T) {
	blockers := 0
	// Queueing 20 runs takes 20 ms against blockers of 100 µs each: even
	// the retry's 64 blockers (6.4 ms) do not cover it.
	tm := fakeTimer(time.Millisecond, &blockers)
	_, hostBound, err := tm.measure(1, func(i int) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if !hostBound {
		t.Error("not flagged host-bound")
	}
	if blockers <= maxBlockers/2 || blockers > 2*maxBlockers {
		t.Errorf("%d blockers over two attempts", blockers)
	}
	// The timer learns the host's pace: 1 ms a run, so the next row
	// queues as many blockers as it may.
	if n := tm.blockers(0); n != maxBlockers {
		t.Errorf("blockers after a slow host = %d, want %d", n, maxBlockers)
	}
	// Before any row: 20 runs × 50 µs assumed pace × 2 = 2 ms, 20
	// blockers of 100 µs.
	if n := fakeTimer(time.Microsecond, &blockers).blockers(0); n != 20 {
		t.Errorf("first blockers = %d, want 20", n)
	}
}

func TestTimerErrors(t *testing.T) {
	blockers := 0
	tm := fakeTimer(time.Microsecond, &blockers)
	boom := errors.New("launch failed")
	if _, _, err := tm.measure(1, func(i int) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("warm-up error: %v", err)
	}
	if _, _, err := tm.measure(1, func(i int) error {
		if i >= tm.warmup {
			return boom
		}
		return nil
	}); !errors.Is(err, boom) {
		t.Errorf("timed-run error: %v", err)
	}
}

// TestCheckedNeverTimesWrong checks that a sparse result that fails its
// check is reported with the error and without a time, and that the timed
// runs never start.
func TestCheckedNeverTimesWrong(t *testing.T) {
	blockers := 0
	s := &sweeper{tm: fakeTimer(time.Microsecond, &blockers),
		rep: &Report{Ceilings: Ceilings{BandwidthGBs: 4000, DenseTFLOPS: 800, SparseTFLOPS: 1600}}}
	dense := Row{Backend: Dense, N: 64, K: 64, M: 1, MedianUS: 22}
	ran := 0
	run := func(int) error { ran++; return nil }
	row := s.checked(Row{Backend: Ours, N: 64, K: 64, M: 1}, 1,
		func() (float64, error) { return 0.9, ErrWrong }, run, 4608, 4, dense)
	if row.Timed() || row.Error == "" || row.MedianUS != 0 || row.Speedup != 0 || ran != 0 {
		t.Errorf("wrong result reported as %+v after %d runs", row, ran)
	}
	row = s.checked(Row{Backend: Ours, N: 64, K: 64, M: 1}, 1,
		func() (float64, error) { return 1e-6, nil }, run, 4608, 4, dense)
	if !row.Timed() || row.Speedup != 2 || row.RelErr != 1e-6 || row.TFLOPS <= 0 || row.FloorUS <= 0 ||
		row.Bound != "memory" || ran != 22 {
		t.Errorf("right result: %+v after %d runs", row, ran)
	}
}

// graphTimer is fakeTimer replaying graphs of up to 20 runs: a run takes
// run of host time on its own (the estimate), each run of a replay 10-12
// µs on the GPU; capture fails with refuse when set. *calls must count
// the runs measure makes; the captures record how many each held.
type graphTimer struct {
	*timer
	calls    *int
	captured []int
	released int
}

func newGraphTimer(run time.Duration, refuse error, calls, blockers *int) *graphTimer {
	g := &graphTimer{timer: fakeTimer(time.Microsecond, blockers), calls: calls}
	g.graphCalls = 20
	since := g.sinceHostStart
	estimating := true
	g.sinceHostStart = func(s time.Time) time.Duration {
		if estimating {
			estimating = false
			return run
		}
		return since(s)
	}
	batch := 0
	g.capture = func(queue func() error) (func() error, func() error, error) {
		if refuse != nil {
			return nil, nil, refuse
		}
		before := *g.calls
		if err := queue(); err != nil {
			return nil, nil, err
		}
		batch = *g.calls - before
		g.captured = append(g.captured, batch)
		return func() error { return nil }, func() error { g.released++; return nil }, nil
	}
	g.elapsedEach = func(n int, queue func(i int) error) ([]time.Duration, error) {
		out := make([]time.Duration, n)
		for i := range n {
			before := *g.calls
			if err := queue(i); err != nil {
				return nil, err
			}
			runs := max(batch, 1) // a replay, or one run timed alone
			if *g.calls > before {
				runs = *g.calls - before
			}
			out[i] = time.Duration(runs) * time.Duration(10+i%3) * time.Microsecond
		}
		return out, nil
	}
	return g
}

func TestTimerGraph(t *testing.T) {
	for _, c := range []struct {
		name   string
		run    time.Duration // host time of one run on its own
		copies int
		refuse error
		batch  int // runs per replay; 1: timed one by one
	}{
		{"decode size", 40 * time.Microsecond, 3, nil, 20},
		{"budget bound", 250 * time.Microsecond, 3, nil, 8},
		{"every copy", 40 * time.Microsecond, 30, nil, 30},
		{"copies capped", 40 * time.Microsecond, 1000, nil, maxGraphCopies},
		{"too long for a graph", 1500 * time.Microsecond, 3, nil, 1},
		{"capture refused", 40 * time.Microsecond, 3, errors.New("capture unsupported"), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			blockers, calls := 0, 0
			g := newGraphTimer(c.run, c.refuse, &calls, &blockers)
			var runs []int
			sum, _, err := g.measure(c.copies, func(i int) error { calls++; runs = append(runs, i); return nil })
			if err != nil {
				t.Fatal(err)
			}
			if sum.Batch != c.batch || sum.Runs != g.runs || sum.Median != 11*time.Microsecond {
				t.Errorf("summary %+v, want batch %d, %d runs of a median 11 µs", sum, c.batch, g.runs)
			}
			if (c.refuse != nil) != (sum.Note != "") || c.refuse != nil && !strings.Contains(sum.Note, c.refuse.Error()) {
				t.Errorf("note %q", sum.Note)
			}
			// Warm-up 0, 1; the estimate's run of copy 0; then the
			// captured runs 2 … batch+1 once, or each timed run.
			want := []int{0, 1, 0}
			timed := c.batch
			if c.batch == 1 {
				timed = g.runs
			}
			for i := range timed {
				want = append(want, g.warmup+i)
			}
			if !slices.Equal(runs, want) {
				t.Errorf("runs %v, want %v", runs, want)
			}
			if c.batch > 1 && (!slices.Equal(g.captured, []int{c.batch}) || g.released != 1) {
				t.Errorf("captures %v, %d released", g.captured, g.released)
			}
		})
	}
	// A graph that cannot be freed fails the measurement.
	blockers, calls := 0, 0
	g := newGraphTimer(40*time.Microsecond, nil, &calls, &blockers)
	capture := g.capture
	leak := errors.New("cuGraphDestroy failed")
	g.capture = func(queue func() error) (func() error, func() error, error) {
		replay, _, err := capture(queue)
		return replay, func() error { return leak }, err
	}
	if _, _, err := g.measure(3, func(int) error { calls++; return nil }); !errors.Is(err, leak) {
		t.Errorf("a graph that cannot be freed: %v", err)
	}
	// A run that fails while being captured fails the measurement.
	blockers, calls = 0, 0
	g = newGraphTimer(40*time.Microsecond, nil, &calls, &blockers)
	boom := errors.New("launch failed")
	if _, _, err := g.measure(3, func(i int) error {
		calls++
		if calls > 3 {
			return boom
		}
		return nil
	}); err == nil {
		t.Error("a failing captured run: no error")
	}
}
