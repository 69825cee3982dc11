package speed

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// table builds rows for one shape from dense and sparse times (µs) per M;
// a zero time is a row that was not timed.
func table(s Shape, ms []int, dense []float64, sparse map[string][]float64) []Row {
	var rows []Row
	for i, m := range ms {
		base := Row{Model: s.Model, Ops: s.Ops, N: s.N, K: s.K, M: m}
		d := base
		d.Backend, d.MedianUS = Dense, dense[i]
		if dense[i] == 0 {
			d.Error = "failed"
		}
		rows = append(rows, d)
		for backend, ts := range sparse {
			r := base
			r.Backend, r.MedianUS = backend, ts[i]
			if ts[i] == 0 {
				r.Error = "wrong result"
			}
			rows = append(rows, r)
		}
	}
	return rows
}

var testShape = Shape{Model: "m", Ops: []string{"gate", "up"}, N: 4096, K: 1024, Count: 2}

func TestDerivePolicy(t *testing.T) {
	ms := []int{1, 16, 64, 256, 1024, 4096, 16384}
	dense := []float64{10, 10, 12, 20, 50, 200, 800}
	for _, c := range []struct {
		name   string
		sparse map[string][]float64
		want   []Range
	}{
		{"never faster", map[string][]float64{Ours: {11, 12, 13, 21, 60, 250, 900}}, []Range{}},
		{"4% is not enough, 5% is", map[string][]float64{Ours: {10 / 1.04, 10 / 1.05, 13, 21, 60, 250, 900}},
			[]Range{{MinM: 16, MaxM: 16, Backend: Ours, Speedup: 1.05}}},
		{"prefill range merged and extended to the last measured M",
			map[string][]float64{Ours: {11, 11, 13, 21, 40, 100, 400}},
			[]Range{{MinM: 1024, MaxM: 16384, Backend: Ours, Speedup: 1.25}}},
		{"best backend per M, ranges split between backends",
			map[string][]float64{Ours: {8, 8, 13, 21, 45, 180, 700}, CuSPARSELt: {9, 9, 13, 21, 40, 120, 500}},
			[]Range{{MinM: 1, MaxM: 16, Backend: Ours, Speedup: 1.25}, {MinM: 1024, MaxM: 16384, Backend: CuSPARSELt, Speedup: 1.25}}},
		{"a wrong (untimed) sparse row never wins", map[string][]float64{Ours: {0, 0, 0, 0, 0, 0, 0}}, []Range{}},
		{"gap at a losing M splits ranges",
			map[string][]float64{Ours: {5, 5, 13, 10, 25, 250, 400}},
			[]Range{{MinM: 1, MaxM: 16, Backend: Ours, Speedup: 2}, {MinM: 256, MaxM: 1024, Backend: Ours, Speedup: 2},
				{MinM: 16384, MaxM: 16384, Backend: Ours, Speedup: 2}}},
		{"the gap between two backends' wins stays dense",
			map[string][]float64{Ours: {13, 13, 13, 10, 60, 250, 900}, CuSPARSELt: {13, 13, 13, 21, 25, 250, 900}},
			[]Range{{MinM: 256, MaxM: 256, Backend: Ours, Speedup: 2}, {MinM: 1024, MaxM: 1024, Backend: CuSPARSELt, Speedup: 2}}},
	} {
		rows := table(testShape, ms, dense, c.sparse)
		got := DerivePolicy([]Shape{testShape}, rows, DefaultMinSpeedup)
		if len(got) != 1 || !reflect.DeepEqual(got[0].Sparse, c.want) {
			t.Errorf("%s: ranges %+v, want %+v", c.name, got[0].Sparse, c.want)
		}
	}
}

// TestDerivePolicyPlans checks that a range of ours names the plan that
// won at each of its measured M, in order, and that other backends' and
// plan-less (older) rows give none.
func TestDerivePolicyPlans(t *testing.T) {
	ms := []int{1, 16, 64, 256}
	rows := table(testShape, ms, []float64{10, 10, 12, 20}, map[string][]float64{Ours: {8, 8, 9, 30}, CuSPARSELt: {20, 20, 20, 15}})
	plans := map[int]string{1: "decode sc4 w4 kw1 s1 xw8 wg", 16: "decode sc4 w4 kw1 s2 xw8 wg", 64: "decode sc4 w4 kw1 s2 xw8 wg tok32"}
	for i := range rows {
		if rows[i].Backend == Ours {
			rows[i].Plan = plans[rows[i].M]
		}
	}
	got := DerivePolicy([]Shape{testShape}, rows, DefaultMinSpeedup)
	want := []Range{
		{MinM: 1, MaxM: 64, Backend: Ours, Speedup: 1.25, Plans: []PlanAt{{M: 1, Plan: plans[1], Measured: true}, {M: 16, Plan: plans[16], Measured: true}, {M: 64, Plan: plans[64], Measured: true}}},
		{MinM: 256, MaxM: 256, Backend: CuSPARSELt, Speedup: 20.0 / 15},
	}
	if !reflect.DeepEqual(got[0].Sparse, want) {
		t.Errorf("ranges %+v, want %+v", got[0].Sparse, want)
	}
	var b strings.Builder
	writePolicy(&b, got, DefaultMinSpeedup)
	if !strings.Contains(b.String(), "with the launch plan of ours") {
		t.Errorf("the policy's document does not say it names plans:\n%s", b.String())
	}
	for i := range rows {
		rows[i].Plan = ""
	}
	got = DerivePolicy([]Shape{testShape}, rows, DefaultMinSpeedup)
	if got[0].Sparse[0].Plans != nil {
		t.Errorf("plans from rows without them: %+v", got[0].Sparse[0].Plans)
	}
	b.Reset()
	writePolicy(&b, got, DefaultMinSpeedup)
	if strings.Contains(b.String(), "launch plan") {
		t.Errorf("the policy's document speaks of plans it does not hold:\n%s", b.String())
	}
}

func TestDerivePolicyNoDense(t *testing.T) {
	ms := []int{1, 16}
	rows := table(testShape, ms, []float64{0, 0}, map[string][]float64{Ours: {1, 1}})
	got := DerivePolicy([]Shape{testShape}, rows, DefaultMinSpeedup)
	if len(got[0].Sparse) != 0 {
		t.Errorf("sparse chosen without a dense baseline: %+v", got[0].Sparse)
	}
}

// TestPolicyNeverSparseWhereSlower checks on random tables that every M
// a policy sends to a sparse backend measured at least the threshold
// with that backend, and that every measured M where no sparse backend
// did is dense.
func TestPolicyNeverSparseWhereSlower(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ms := []int{1, 16, 64, 256, 1024, 4096, 16384}
	for trial := range 2000 {
		dense := make([]float64, len(ms))
		sparse := map[string][]float64{Ours: make([]float64, len(ms)), CuSPARSELt: make([]float64, len(ms))}
		for i := range ms {
			dense[i] = 1 + rng.Float64()*100
			for _, ts := range sparse {
				ts[i] = dense[i] * (0.7 + 0.6*rng.Float64())
				if rng.IntN(10) == 0 {
					ts[i] = 0
				}
			}
		}
		rows := table(testShape, ms, dense, sparse)
		e := DerivePolicy([]Shape{testShape}, rows, DefaultMinSpeedup)[0]
		for i, m := range ms {
			best := 0.0
			for _, ts := range sparse {
				if ts[i] > 0 {
					best = max(best, dense[i]/ts[i])
				}
			}
			b := e.Backend(m)
			if best < DefaultMinSpeedup && b != PolicyDense {
				t.Fatalf("trial %d M=%d: best sparse %.3fx but policy says %s (%+v)", trial, m, best, b, e.Sparse)
			}
			if best >= DefaultMinSpeedup {
				ts := sparse[b]
				if b == PolicyDense || ts[i] == 0 || dense[i]/ts[i] < DefaultMinSpeedup {
					t.Fatalf("trial %d M=%d: policy picks %s, which did not win (%+v)", trial, m, b, e.Sparse)
				}
			}
		}
		for j, r := range e.Sparse {
			if r.MinM > r.MaxM || (j > 0 && e.Sparse[j-1].MaxM >= r.MinM) {
				t.Fatalf("trial %d: ranges not ascending and disjoint: %+v", trial, e.Sparse)
			}
			if j > 0 && e.Sparse[j-1].Backend == r.Backend && e.Sparse[j-1].MaxM+1 == r.MinM {
				t.Fatalf("trial %d: adjacent ranges of one backend not merged: %+v", trial, e.Sparse)
			}
		}
		if b := e.Backend(100000); b != PolicyDense {
			t.Fatalf("trial %d: M beyond the measured range is %s", trial, b)
		}
	}
}

func TestNewPolicy(t *testing.T) {
	rep := &Report{Tool: "sfsurgery test", DType: "BF16", Ms: []int{1, 16},
		Env:    Env{GPU: "NVIDIA H200", Capability: "9.0", Driver: "13.0", CublasLt: 130100, CuSPARSELt: "0.8.0"},
		Method: Method{MinSpeedup: DefaultMinSpeedup}}
	p := NewPolicy(rep, nil)
	if p.Schema != PolicySchema || p.GPU != "NVIDIA H200" || p.Driver != "13.0" || p.CuSPARSELt != "0.8.0" ||
		p.CublasLt != 130100 || p.Default != PolicyDense || p.MinSpeedup != 1.05 || p.Rule == "" {
		t.Errorf("NewPolicy = %+v", p)
	}
}

// TestPolicyLaunches checks the launch records a report with device
// limits puts in its policy: every M of a range of ours up to 64, the
// winner's record where bench recorded one, the planner's first
// elsewhere; none without limits.
func TestPolicyLaunches(t *testing.T) {
	s := Shape{Model: "m", Ops: []string{"q", "o"}, N: 4096, K: 4096, Count: 1}
	lim := launchplan.KnownLimits()["h100"]
	c1, err := launchplan.Candidates(1, s.N, s.K, lim, launchplan.Options{}, launchplan.MaxCandidates)
	if err != nil || len(c1) < 2 {
		t.Fatalf("%d candidates, %v", len(c1), err)
	}
	rows := table(s, []int{1, 64, 256}, []float64{10, 12, 30}, map[string][]float64{Ours: {6, 8, 90}})
	for i := range rows {
		if rows[i].Backend == Ours && rows[i].M == 1 {
			rows[i].Plan = c1[1].String() // the second candidate won at M = 1
		}
	}
	rep := &Report{DType: "BF16", Shapes: []Shape{s}, Rows: rows, Method: Method{MinSpeedup: DefaultMinSpeedup}}
	if plans := rep.Policy().Entries[0].Sparse[0].Plans; len(plans) != 1 || plans[0].Launch != nil {
		t.Fatalf("without limits: plans %+v, want the measured one without a record", plans)
	}
	if pf := rep.Policy().Entries[0].Prefill; pf != nil {
		t.Errorf("without limits: %d prefill records", len(pf))
	}
	rep.Env.Limits = &lim
	want, err := launchplan.PrefillRecords("BF16", s.N, s.K, lim)
	if err != nil {
		t.Fatal(err)
	}
	if pf := rep.Policy().Entries[0].Prefill; !reflect.DeepEqual(pf, want) {
		t.Errorf("prefill records %+v, want launchplan.PrefillRecords'", pf)
	}
	a100 := launchplan.KnownLimits()["a100"]
	rep.Env.Limits = &a100
	if pf := rep.Policy().Entries[0].Prefill; pf != nil {
		t.Errorf("an sm_80 device: %d prefill records", len(pf))
	}
	rep.Env.Limits = &lim
	rg := rep.Policy().Entries[0].Sparse[0]
	if rg.MinM != 1 || rg.MaxM != 64 || len(rg.Plans) != 64 {
		t.Fatalf("range %d–%d with %d plans, want 1–64 with 64", rg.MinM, rg.MaxM, len(rg.Plans))
	}
	for _, at := range rg.Plans {
		want := c1[1]
		if at.M != 1 {
			var err error
			if want, err = launchplan.Choose(at.M, s.N, s.K, lim, launchplan.Options{}); err != nil {
				t.Fatal(err)
			}
		}
		l, err := want.Launch("BF16", at.M, s.N, s.K)
		if err != nil {
			t.Fatal(err)
		}
		if at.Launch == nil || !reflect.DeepEqual(*at.Launch, l) || at.Plan != want.String() || at.Measured != (at.M == 1) {
			t.Errorf("M=%d: plan %q measured %v record %v; want %q measured %v", at.M, at.Plan, at.Measured, at.Launch != nil,
				want.String(), at.M == 1)
		}
	}
}

// TestReportWithout: leaving cuSPARSELt out of a report removes its rows,
// names it nowhere, and gives ours the ranges where it beats dense, which
// cuSPARSELt held when it was faster still; the original report is
// untouched.
func TestReportWithout(t *testing.T) {
	s := Shape{Model: "m", Ops: []string{"q", "o"}, N: 4096, K: 4096, Count: 1}
	ms := []int{1, 256, 4096}
	rows := table(s, ms, []float64{10, 30, 100}, map[string][]float64{Ours: {6, 40, 80}, CuSPARSELt: {20, 20, 60}})
	rep := &Report{DType: "BF16", Shapes: []Shape{s}, Rows: rows, Method: Method{MinSpeedup: DefaultMinSpeedup, GEMMShare: 0.7}}
	rep.Env.CuSPARSELt = "0.8.0"
	rep.Estimates = Estimates(rep.Shapes, rep.Rows, rep.Policy().Entries, rep.Method.GEMMShare)
	if got := fmt.Sprint(rep.Policy().Entries[0].Sparse); !strings.Contains(got, CuSPARSELt) {
		t.Fatalf("with cuSPARSELt: %s", got)
	}
	one := rep.Without(CuSPARSELt)
	for _, r := range one.Rows {
		if r.Backend == CuSPARSELt {
			t.Fatalf("a cuSPARSELt row is left: %+v", r)
		}
	}
	if one.Env.CuSPARSELt != "" || len(rep.Rows) != 9 || rep.Env.CuSPARSELt == "" {
		t.Errorf("Without changed the original or kept the library: %d rows, %q", len(rep.Rows), one.Env.CuSPARSELt)
	}
	sp := one.Policy().Entries[0].Sparse
	if len(sp) != 2 || sp[0].Backend != Ours || sp[0].MinM != 1 || sp[1].Backend != Ours || sp[1].MinM != 4096 {
		t.Errorf("one-copy policy %+v, want ours at 1 and at 4096, dense at 256", sp)
	}
	if len(one.Estimates) != len(rep.Estimates) || one.Estimates[0].GEMMShare != 0.7 {
		t.Errorf("estimates %+v", one.Estimates)
	}
	for i := range one.Estimates {
		if one.Estimates[i].M == 4096 && one.Estimates[i].GEMMSpeedup >= rep.Estimates[i].GEMMSpeedup {
			t.Errorf("M=4096: one copy %.3f, not below the policy with cuSPARSELt %.3f", one.Estimates[i].GEMMSpeedup, rep.Estimates[i].GEMMSpeedup)
		}
	}
}
