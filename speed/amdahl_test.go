package speed

import (
	"math"
	"testing"
)

func TestAmdahl(t *testing.T) {
	for _, c := range []struct{ share, speedup, want float64 }{
		{0.7, 1, 1},
		{1, 2, 2},
		{0, 5, 1},
		{0.5, 2, 1 / 0.75},
		{0.7, 1.5, 1 / (0.3 + 0.7/1.5)},
		{0.7, 0.8, 1 / (0.3 + 0.7/0.8)},
	} {
		if got := Amdahl(c.share, c.speedup); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Amdahl(%v, %v) = %v, want %v", c.share, c.speedup, got, c.want)
		}
	}
	for _, bad := range [][2]float64{{-0.1, 2}, {1.1, 2}, {0.5, 0}} {
		if got := Amdahl(bad[0], bad[1]); got != 0 {
			t.Errorf("Amdahl(%v) = %v, want 0", bad, got)
		}
	}
	if Regime(1) != "decode" || Regime(64) != "decode" || Regime(256) != "between" || Regime(1024) != "prefill" {
		t.Error("Regime boundaries")
	}
}

func TestEstimates(t *testing.T) {
	a := Shape{Model: "m", Ops: []string{"q", "o"}, N: 64, K: 64, Count: 2}
	b := Shape{Model: "m", Ops: []string{"down"}, N: 128, K: 64, Count: 1}
	ms := []int{1, 4096}
	rows := append(table(a, ms, []float64{10, 100}, map[string][]float64{Ours: {20, 50}}),
		table(b, ms, []float64{30, 300}, map[string][]float64{Ours: {40, 150}})...)
	policy := DerivePolicy([]Shape{a, b}, rows, DefaultMinSpeedup)
	got := Estimates([]Shape{a, b}, rows, policy, 0.5)
	if len(got) != 2 {
		t.Fatalf("estimates %+v", got)
	}
	// M=1: sparse loses everywhere, the policy keeps dense: 1x.
	if got[0].M != 1 || got[0].GEMMSpeedup != 1 || got[0].EndToEnd != 1 || got[0].Regime != "decode" {
		t.Errorf("M=1: %+v", got[0])
	}
	// M=4096: dense 2·100 + 300 = 500 µs, policy 2·50 + 150 = 250: 2x on
	// the projections, 1/(0.5 + 0.25) end to end.
	if got[1].GEMMSpeedup != 2 || math.Abs(got[1].EndToEnd-1/0.75) > 1e-12 || got[1].Regime != "prefill" {
		t.Errorf("M=4096: %+v", got[1])
	}
	// A model with a missing dense time at an M gets no estimate there.
	rows[0].Error = "failed"
	if got := Estimates([]Shape{a, b}, rows, policy, 0.5); len(got) != 1 || got[0].M != 4096 {
		t.Errorf("with a failed baseline: %+v", got)
	}
}
