package speed

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// replanShapes are Llama-3-8B's projections stacked as the serving
// package runs them (qkv, o, gate_up, down) and a small k/v-like shape
// whose decode records include split-K, cooperative and clustered
// launches.
func replanShapes() []Shape {
	return []Shape{{N: 6144, K: 4096}, {N: 4096, K: 4096}, {N: 28672, K: 4096}, {N: 4096, K: 14336}, {N: 1024, K: 4096}}
}

// replanDevice is a named H100's limits for BF16.
func replanDevice() Device {
	return Device{Limits: launchplan.KnownLimits()["h100"], Name: "h100 (named limits)", DType: checkpoint.BF16}
}

// planned returns PlanLaunches' document of the replan shapes at every M
// on dev, as JSON decoded into a generic value for tampering.
func planned(t *testing.T, dev Device) map[string]any {
	t.Helper()
	var ms []int
	for m := 1; m <= launchplan.MaxTokens; m++ {
		ms = append(ms, m)
	}
	l, err := PlanLaunches(replanShapes(), ms, dev.DType, dev.Limits, dev.Name)
	if err != nil {
		t.Fatal(err)
	}
	return toGeneric(t, l)
}

func toGeneric(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var g map[string]any
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// at walks a generic JSON value along path (object keys and array
// indices).
func at(v any, path ...any) any {
	for _, p := range path {
		switch p := p.(type) {
		case string:
			v = v.(map[string]any)[p]
		case int:
			v = v.([]any)[p]
		}
	}
	return v
}

// record returns the launch record of shape s at the j-th token count.
func record(doc map[string]any, s, j int) map[string]any {
	return at(doc, "shapes", s, "launches", j, "launch").(map[string]any)
}

// TestReplanUntampered: the planner's own document comes back as it
// went in, record for record.
func TestReplanUntampered(t *testing.T) {
	dev := replanDevice()
	doc := planned(t, dev)
	got, err := Replan(mustJSON(t, doc), "f.json", replanShapes(), dev)
	if err != nil {
		t.Fatal(err)
	}
	want := toGeneric(t, got)
	if !reflect.DeepEqual(want["shapes"], doc["shapes"]) {
		t.Error("Replan of the planner's own document differs from it")
	}
}

// TestReplanTampered changes one field of one record at a time: every
// geometry field of a decode record and of its fallback, the kernel
// parameters, the entry point and module, the prefill records, the
// document's limits and dtype. Each is refused, naming the place and the
// field.
func TestReplanTampered(t *testing.T) {
	dev := replanDevice()
	base := planned(t, dev)
	// Records with a fallback, split-K and the mma.sp entry points are
	// needed for the cases below to mean anything.
	var coop, split [2]int
	haveCoop, haveSplit := false, false
	for s := range replanShapes() {
		for j := 0; j < launchplan.MaxTokens; j++ {
			r := record(base, s, j)
			if r["fallback"] != nil && !haveCoop {
				coop, haveCoop = [2]int{s, j}, true
			}
			if at(r, "workspace", "counters").(float64) > 0 && !haveSplit {
				split, haveSplit = [2]int{s, j}, true
			}
		}
	}
	if !haveCoop || !haveSplit {
		t.Fatalf("no record with a fallback (%v) or split-K (%v): the cases prove nothing", haveCoop, haveSplit)
	}
	mul := func(path []any, f float64) func(map[string]any) {
		return func(d map[string]any) {
			parent := at(d, path[:len(path)-1]...)
			switch p := path[len(path)-1].(type) {
			case string:
				m := parent.(map[string]any)
				m[p] = m[p].(float64) * f
			case int:
				a := parent.([]any)
				a[p] = a[p].(float64) * f
			}
		}
	}
	set := func(path []any, v any) func(map[string]any) {
		return func(d map[string]any) {
			parent := at(d, path[:len(path)-1]...)
			switch p := path[len(path)-1].(type) {
			case string:
				parent.(map[string]any)[p] = v
			case int:
				parent.([]any)[p] = v
			}
		}
	}
	rec := func(sj [2]int, rest ...any) []any {
		return append([]any{"shapes", sj[0], "launches", sj[1], "launch"}, rest...)
	}
	param := func(sj [2]int, name string) []any {
		for i, p := range at(base, rec(sj, "params")...).([]any) {
			if p.(map[string]any)["name"] == name {
				return rec(sj, "params", i, "value")
			}
		}
		t.Fatalf("no parameter %s", name)
		return nil
	}
	cases := []struct {
		name   string
		tamper func(map[string]any)
		want   string // in the error
	}{
		{"grid.x doubled", mul(rec(split, "grid", 0), 2), "launch.grid is"},
		{"grid.y times 4", mul(rec(split, "grid", 1), 4), "launch.grid is"},
		{"grid.z times 2", mul(rec(split, "grid", 2), 2), "launch.grid is"},
		{"block of 32 threads", set(rec(split, "block", 0), 32.0), "launch.block is [32 1 1]"},
		{"cluster", set(rec(coop, "cluster"), []any{1.0, 4.0, 1.0}), "launch.cluster is"},
		{"shared bytes 1024", set(rec(split, "shared_bytes"), 1024.0), "launch.shared_bytes is 1024"},
		{"shared bytes doubled", mul(rec(split, "shared_bytes"), 2), "launch.shared_bytes is"},
		{"cooperative flipped", func(d map[string]any) {
			r := at(d, rec(split)...).(map[string]any)
			r["cooperative"] = !r["cooperative"].(bool)
		}, "launch.cooperative is"},
		{"workspace partials 1", set(rec(split, "workspace", "partials"), 1.0), "launch.workspace.partials is 1,"},
		{"workspace counters 0", set(rec(split, "workspace", "counters"), 0.0), "launch.workspace.counters is 0,"},
		{"xwin 100000", set(param(split, "xwin"), 100000.0), "int xwin = 100000, the planner's"},
		{"M", set(param(split, "M"), 64.0), "int M = 64"},
		{"N", mul(param(split, "N"), 2), "int N ="},
		{"K", mul(param(split, "K"), 2), "int K ="},
		{"parameter source swapped", set(rec(split, "params", 0, "source"), "x"), "launch.params[0] is void* Y from x"},
		{"parameter dropped", func(d map[string]any) {
			r := at(d, rec(split)...).(map[string]any)
			r["params"] = r["params"].([]any)[:11]
		}, "launch.params has 11 parameters"},
		{"entry swapped", set(rec(split, "entry"), "gemv_hy_bf16_t1_s4"), "launch.entry gemv_hy_bf16_t1_s4 is not among"},
		{"module swapped", set(rec(coop, "module"), launchplan.ModuleSM80), "launch.module is kernels/ptx/sfsurgery.ptx"},
		{"fallback grid", mul(rec(coop, "fallback", "grid", 1), 2), "launch.fallback.grid is"},
		{"fallback entry", set(rec(coop, "fallback", "entry"), "gemv_wg_pair_bf16_t1_s4"), "launch.fallback.entry"},
		{"fallback dropped", set(rec(coop, "fallback"), nil), "launch.fallback is none"},
		{"fallback shared bytes", set(rec(coop, "fallback", "shared_bytes"), 1024.0), "launch.fallback.shared_bytes is 1024"},
		{"plan name of another candidate", set([]any{"shapes", split[0], "launches", split[1], "plan"}, "decode sc2 w8 kw1 s1 xw0"),
			"names another launch than its record"},
		{"m out of range", set([]any{"shapes", 0, "launches", 0, "m"}, 65.0), "m = 65: not the planner's launch records for this device: m is not 1…64"},
		{"prefill shared bytes", set([]any{"shapes", 1, "prefill", 0, "shared_bytes"}, 1024.0), "prefill[0].shared_bytes is 1024"},
		{"prefill tokens", set([]any{"shapes", 1, "prefill", 0, "tokens"}, 192.0), "prefill[0].tokens is 192"},
		{"prefill range", set([]any{"shapes", 1, "prefill", 0, "to"}, 100000.0), "prefill[0].to is 100000"},
		{"prefill entry", set([]any{"shapes", 1, "prefill", 0, "entry"}, "spmm_wg_bf16_r256_t192"), "prefill[0].entry is"},
		{"prefill record dropped", func(d map[string]any) {
			s := at(d, "shapes", 1).(map[string]any)
			s["prefill"] = s["prefill"].([]any)[1:]
		}, "prefill[0]"},
		{"limits", set([]any{"limits", "sms"}, 114.0), "planned for h100 (named limits) (114 SMs"},
		{"limits warpgroup", set([]any{"limits", "warpgroup"}, false), "warpgroup false"},
		{"dtype", set([]any{"dtype"}, "F16"), "records for F16, the weights are BF16"},
		{"schema", set([]any{"schema"}, "sfsurgery-launches/0"), `schema "sfsurgery-launches/0"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := toGeneric(t, base)
			tc.tamper(doc)
			_, err := Replan(mustJSON(t, doc), "f.json", replanShapes(), dev)
			if !errors.Is(err, ErrNotPlanned) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "f.json: ") {
				t.Fatalf("error %v; want ErrNotPlanned naming %q", err, tc.want)
			}
		})
	}
}

// TestReplanMalformed: what is not the JSON of a launch document or
// policy wraps ErrParse; a shape without records wraps ErrNoRecords.
func TestReplanMalformed(t *testing.T) {
	dev := replanDevice()
	good := mustJSON(t, planned(t, dev))
	for _, tc := range []struct {
		name, data string
		err        error
	}{
		{"not JSON", "{oops", ErrParse},
		{"array", "[]", ErrParse},
		{"trailing data", string(good) + "{}", ErrParse},
		{"unknown field", strings.Replace(string(good), `"shapes":`, `"extra":1,"shapes":`, 1), ErrParse},
		{"grid overflows uint32", strings.Replace(string(good), `"grid":[`, `"grid":[4294967296,`, 1), ErrParse},
		{"string for a number", strings.Replace(string(good), `"shared_bytes":`, `"shared_bytes":"1"`+`,"x":`, 1), ErrParse},
		{"empty", "", ErrParse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Replan([]byte(tc.data), "f.json", replanShapes(), dev)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v; want %v", err, tc.err)
			}
		})
	}
	_, err := Replan(good, "f.json", append(replanShapes(), Shape{N: 2048, K: 2048}), dev)
	if !errors.Is(err, ErrNoRecords) || !strings.Contains(err.Error(), "2048x2048") {
		t.Errorf("a shape the file lacks: %v", err)
	}
	a100 := Device{Limits: launchplan.KnownLimits()["a100"], Name: "a100", DType: checkpoint.BF16}
	withPrefill := planned(t, dev)
	withPrefill["limits"] = toGeneric(t, map[string]any{"x": a100.Limits})["x"]
	_, err = Replan(mustJSON(t, withPrefill), "f.json", replanShapes(), a100)
	if !errors.Is(err, ErrNotPlanned) {
		t.Errorf("H100 records checked on A100 limits: %v", err)
	}
}

// replanPolicy returns a policy whose ranges of ours at token counts ms
// of each replan shape pick candidate cand there (by record, or by name
// only where byName), with the shape's prefill records.
func replanPolicy(t *testing.T, dev Device, ms []int, cand int, byName bool) *Policy {
	t.Helper()
	p := &Policy{Schema: PolicySchema, GPU: "NVIDIA H100 80GB HBM3", DType: string(dev.DType), Default: PolicyDense}
	for _, s := range replanShapes() {
		e := PolicyEntry{N: s.N, K: s.K}
		var plans []PlanAt
		for _, m := range ms {
			ps, err := launchplan.Candidates(m, s.N, s.K, dev.Limits, launchplan.Options{}, launchplan.MaxCandidates)
			if err != nil {
				t.Fatal(err)
			}
			c := ps[min(cand, len(ps)-1)]
			l, err := c.Launch(dev.DType, m, s.N, s.K)
			if err != nil {
				t.Fatal(err)
			}
			pa := PlanAt{M: m, Plan: c.String(), Measured: true, Launch: &l}
			if byName {
				pa.Launch = nil
			}
			plans = append(plans, pa)
		}
		e.Sparse = []Range{
			{MinM: ms[0], MaxM: ms[len(ms)-1], Backend: Ours, Speedup: 1.5, Plans: plans},
			{MinM: 1024, MaxM: 16384, Backend: CuSPARSELt, Speedup: 1.4},
		}
		pre, err := launchplan.PrefillRecords(dev.DType, s.N, s.K, dev.Limits)
		if err != nil {
			t.Fatal(err)
		}
		e.Prefill = pre
		p.Entries = append(p.Entries, e)
	}
	return p
}

// TestReplanPolicy: a policy may pick any of the planner's candidates,
// by record or by name; the result holds the planner's record of that
// candidate at the policy's token counts only. Another GPU, a record of
// no candidate, and a plan outside its range are refused.
func TestReplanPolicy(t *testing.T) {
	dev := replanDevice()
	dev.GPU = "NVIDIA H100 80GB HBM3"
	ms := []int{1, 2, 3, 8, 16, 32, 33, 64}
	for _, byName := range []bool{false, true} {
		pol := replanPolicy(t, dev, ms, 3, byName)
		got, err := Replan(mustJSON(t, pol), "p.json", replanShapes(), dev)
		if err != nil {
			t.Fatalf("byName %v: %v", byName, err)
		}
		for i, s := range got.Shapes {
			if len(s.Launches) != len(ms) || len(s.Prefill) == 0 {
				t.Fatalf("%dx%d: %d launches, %d prefill records", s.N, s.K, len(s.Launches), len(s.Prefill))
			}
			for j, at := range s.Launches {
				want := pol.Entries[i].Sparse[0].Plans[j]
				if at.M != want.M || at.Plan != want.Plan {
					t.Errorf("%dx%d: got m %d plan %q, want m %d plan %q", s.N, s.K, at.M, at.Plan, want.M, want.Plan)
				}
				ps, _ := launchplan.Candidates(at.M, s.N, s.K, dev.Limits, launchplan.Options{}, launchplan.MaxCandidates)
				l, _ := ps[min(3, len(ps)-1)].Launch(dev.DType, at.M, s.N, s.K)
				if !reflect.DeepEqual(*at.Launch, l) {
					t.Errorf("%dx%d m %d: not the planner's record of the chosen candidate", s.N, s.K, at.M)
				}
			}
		}
	}
	refused := []struct {
		name   string
		tamper func(*Policy)
		want   string
	}{
		{"another GPU", func(p *Policy) { p.GPU = "NVIDIA A100-SXM4-80GB" }, "measured on NVIDIA A100-SXM4-80GB, this GPU is NVIDIA H100"},
		{"dtype", func(p *Policy) { p.DType = "F16" }, "measured for F16"},
		{"record of no candidate", func(p *Policy) { p.Entries[1].Sparse[0].Plans[2].Launch.Grid[0] *= 2 }, "entries[1] (4096x4096) sparse[0] m = 3: "},
		{"unknown plan name", func(p *Policy) {
			p.Entries[0].Sparse[0].Plans[0].Launch = nil
			p.Entries[0].Sparse[0].Plans[0].Plan = "decode sc9"
		}, `plan "decode sc9" is not one of the planner's`},
		{"plan outside its range", func(p *Policy) { p.Entries[0].Sparse[0].MinM = 2 }, "outside its range 2…64"},
		{"prefill", func(p *Policy) { p.Entries[2].Prefill[0].Block = 128 }, "prefill[0].block is 128"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			pol := replanPolicy(t, dev, ms, 3, false)
			tc.tamper(pol)
			_, err := Replan(mustJSON(t, pol), "p.json", replanShapes(), dev)
			if !errors.Is(err, ErrNotPlanned) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want ErrNotPlanned naming %q", err, tc.want)
			}
		})
	}
	// Named limits compare no GPU name: the records are still the limits'.
	named := replanDevice()
	pol := replanPolicy(t, named, ms, 0, false)
	pol.GPU = "some other GPU"
	if _, err := Replan(mustJSON(t, pol), "p.json", replanShapes(), named); err != nil {
		t.Errorf("named limits: %v", err)
	}
}

// FuzzReplan: no input makes Replan panic, and whatever it accepts is
// the planner's own: every record a launch of a candidate for its shape
// and token count, every prefill record PrefillRecords'.
func FuzzReplan(f *testing.F) {
	dev := replanDevice()
	dev.GPU = "NVIDIA H100 80GB HBM3"
	shapes := []Shape{{N: 1024, K: 4096}, {N: 4096, K: 4096}}
	l, err := PlanLaunches(shapes, []int{1, 7, 33, 64}, dev.DType, dev.Limits, dev.Name)
	if err != nil {
		f.Fatal(err)
	}
	b, _ := json.Marshal(l)
	f.Add(b)
	pb, _ := json.Marshal(&Policy{Schema: PolicySchema, GPU: dev.GPU, DType: "BF16", Entries: []PolicyEntry{
		{N: 1024, K: 4096, Sparse: []Range{{MinM: 1, MaxM: 8, Backend: Ours, Plans: []PlanAt{{M: 2, Plan: "decode sc4 w4 kw1 s1 xw0 wg"}}}}},
		{N: 4096, K: 4096},
	}})
	f.Add(pb)
	f.Add([]byte(`{"schema":"sfsurgery-launches/1"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Replan(data, "f", shapes, dev)
		if err != nil {
			return
		}
		for _, s := range got.Shapes {
			for _, at := range s.Launches {
				ps, err := launchplan.Candidates(at.M, s.N, s.K, dev.Limits, launchplan.Options{}, launchplan.MaxCandidates)
				if err != nil {
					t.Fatalf("accepted m %d for %dx%d, which the planner refuses: %v", at.M, s.N, s.K, err)
				}
				found := false
				for _, p := range ps {
					l, err := p.Launch(dev.DType, at.M, s.N, s.K)
					found = found || err == nil && reflect.DeepEqual(l, *at.Launch) && p.String() == at.Plan
				}
				if !found {
					t.Fatalf("accepted a record of no candidate: %dx%d m %d %+v", s.N, s.K, at.M, at.Launch)
				}
			}
			if len(s.Prefill) > 0 {
				want, _ := launchplan.PrefillRecords(dev.DType, s.N, s.K, dev.Limits)
				if !reflect.DeepEqual(s.Prefill, want) {
					t.Fatalf("accepted prefill records that are not the planner's: %+v", s.Prefill)
				}
			}
		}
	})
}
