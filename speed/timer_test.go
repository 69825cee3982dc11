package speed

import (
	"errors"
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
	sum, hostBound, err := tm.measure(func(i int) error { calls = append(calls, i); return nil })
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
	_, hostBound, err := tm.measure(func(i int) error { return nil })
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
	if _, _, err := tm.measure(func(i int) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("warm-up error: %v", err)
	}
	if _, _, err := tm.measure(func(i int) error {
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
	row := s.checked(Row{Backend: Ours, N: 64, K: 64, M: 1},
		func() (float64, error) { return 0.9, ErrWrong }, run, 4608, 4, dense)
	if row.Timed() || row.Error == "" || row.MedianUS != 0 || row.Speedup != 0 || ran != 0 {
		t.Errorf("wrong result reported as %+v after %d runs", row, ran)
	}
	row = s.checked(Row{Backend: Ours, N: 64, K: 64, M: 1},
		func() (float64, error) { return 1e-6, nil }, run, 4608, 4, dense)
	if !row.Timed() || row.Speedup != 2 || row.RelErr != 1e-6 || row.TFLOPS <= 0 || row.FloorUS <= 0 ||
		row.Bound != "memory" || ran != 22 {
		t.Errorf("right result: %+v after %d runs", row, ran)
	}
}
