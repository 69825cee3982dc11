package speed

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestFastest checks the choice among a backend's candidates: the one of
// least median among those whose check passes, a failing one never timed
// and its error kept, candidate 0's median kept (for ours, the plan
// SparseMatmul runs) when it was timed, and an error when none passes.
func TestFastest(t *testing.T) {
	blockers := 0
	tm := fakeTimer(time.Microsecond, &blockers)
	per := []time.Duration{30, 0, 20, 25} // µs per run of each candidate; 1 is wrong
	cur, runs := -1, map[int]int{}
	tm.elapsedEach = func(n int, queue func(i int) error) ([]time.Duration, error) {
		out := make([]time.Duration, n)
		for i := range n {
			if err := queue(i); err != nil {
				return nil, err
			}
			out[i] = per[cur] * time.Microsecond
		}
		return out, nil
	}
	s := &sweeper{tm: tm}
	check := func(cand int) (float64, error) {
		if cand == 1 {
			return 0.5, ErrWrong
		}
		return float64(cand) * 1e-6, nil
	}
	run := func(cand, i int) error { cur = cand; runs[cand]++; return nil }
	f := s.fastest(len(per), 1, check, run)
	if f.cand != 2 || f.sum.Median != 20*time.Microsecond || f.relErr != 2e-6 || f.first != 30*time.Microsecond {
		t.Errorf("fastest %+v, want candidate 2 at 20 µs, candidate 0 at 30", f)
	}
	if want := []time.Duration{30 * time.Microsecond, 0, 20 * time.Microsecond, 25 * time.Microsecond}; !slices.Equal(f.medians, want) {
		t.Errorf("medians %v, want %v", f.medians, want)
	}
	if !errors.Is(f.err, ErrWrong) || !strings.Contains(f.err.Error(), "candidate 2:") {
		t.Errorf("error %v, want candidate 2 (the second) wrong", f.err)
	}
	if runs[1] != 0 || runs[0] == 0 || runs[3] == 0 {
		t.Errorf("runs per candidate %v: the wrong one must never run, the others must", runs)
	}
	if f := s.fastest(2, 1, func(cand int) (float64, error) {
		if cand == 0 {
			return 1, ErrWrong
		}
		return 0, nil
	}, run); f.cand != 1 || f.first != 0 {
		t.Errorf("candidate 0 wrong: %+v, want candidate 1 and no time for candidate 0", f)
	}
	if f := s.fastest(2, 1, func(int) (float64, error) { return 1, ErrWrong }, run); f.cand != -1 || f.err == nil {
		t.Errorf("no right candidate: %+v", f)
	}
	if f := s.fastest(0, 1, check, run); f.cand != -1 || f.err == nil {
		t.Errorf("no candidate: %+v", f)
	}
}
