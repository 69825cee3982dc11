package launchplan

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// decodeParams returns the parameters of a decode entry point for m, n, k,
// window xwin and last (kw for the mma.sp form, coop for the sm_90a
// module's), in the order of the CUDA sources: the bias and the out flag
// come after last.
func decodeParams(m, n, k, xwin int, lastName string, last int) []Param {
	return []Param{
		{Name: "Y", CType: "void*", Source: SourceY},
		{Name: "X", CType: "const uint16_t*", Source: SourceX},
		{Name: "P", CType: "const uint16_t*", Source: SourcePacked},
		{Name: "U", CType: "const uint32_t*", Source: SourceMeta},
		{Name: "W", CType: "float*", Source: SourceWorkspace},
		{Name: "M", CType: "int", Source: SourceValue, Value: m},
		{Name: "N", CType: "int", Source: SourceValue, Value: n},
		{Name: "K", CType: "int", Source: SourceValue, Value: k},
		{Name: "xwin", CType: "int", Source: SourceValue, Value: xwin},
		{Name: lastName, CType: "int", Source: SourceValue, Value: last},
		{Name: "B", CType: "const uint16_t*", Source: SourceBias},
		{Name: "out", CType: "int", Source: SourceOut},
	}
}

// TestLaunchRecords checks the launch records of known plans: the one
// Choose makes for each shape (or with the options given), in each form,
// with and without split-K, clusters and the cooperative sum, and their
// fallbacks (the same launch without the cooperative sum or the clusters,
// the plan's shared memory).
func TestLaunchRecords(t *testing.T) {
	for _, c := range []struct {
		name    string
		dt      checkpoint.DType
		m, n, k int
		lim     Limits
		o       Options
		plan    string
		want    Launch
	}{
		{"mma one slice", checkpoint.BF16, 1, 14336, 4096, h100Limits(), Options{}, "decode sc4 w4 kw1 s1 xw8",
			Launch{Module: ModuleSM80, Entry: "gemv_bf16_t1_s4", Grid: [3]uint32{112, 1, 1}, Block: [3]uint32{128, 1, 1},
				SharedBytes: 114752, Params: decodeParams(1, 14336, 4096, 8, "kw", 1)}},
		{"mma F16 64 tokens", checkpoint.F16, 64, 32, 64, h100Limits(), Options{}, "decode sc2 w4 kw1 s1 xw0",
			Launch{Module: ModuleSM80, Entry: "gemv_f16_t8_s2", Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{128, 1, 1},
				SharedBytes: 83088, Params: decodeParams(64, 32, 64, 0, "kw", 1)}},
		{"hybrid pair", checkpoint.BF16, 1, 1024, 4096, warpgroupLimits(), Options{}, "decode sc4 w4 kw1 s2 xw0 wg r32 pair",
			Launch{Module: ModuleSM90a, Entry: "gemv_hy_pair_bf16_t1_s4", Grid: [3]uint32{32, 2, 1}, Block: [3]uint32{160, 1, 1},
				Cluster: [3]uint32{1, 2, 1}, SharedBytes: 123112, Workspace: Workspace{Counters: 32, Partials: 2 * 1 * 1024},
				Params: decodeParams(1, 1024, 4096, 0, "coop", 0),
				Fallback: &Launch{Module: ModuleSM90a, Entry: "gemv_hy_bf16_t1_s4", Grid: [3]uint32{32, 2, 1}, Block: [3]uint32{160, 1, 1},
					SharedBytes: 123112, Workspace: Workspace{Counters: 32, Partials: 2 * 1 * 1024},
					Params: decodeParams(1, 1024, 4096, 0, "coop", 0)}}},
		{"64-row pair", checkpoint.BF16, 16, 4096, 4096, warpgroupLimits(), Options{}, "decode sc2 w4 kw1 s2 xw16 wg r64 pair",
			Launch{Module: ModuleSM90a, Entry: "gemv_wg64_pair_bf16_t2_s2", Grid: [3]uint32{64, 2, 1}, Block: [3]uint32{160, 1, 1},
				Cluster: [3]uint32{1, 2, 1}, SharedBytes: 146576, Workspace: Workspace{Counters: 128, Partials: 2 * 16 * 4096},
				Params: decodeParams(16, 4096, 4096, 16, "coop", 0),
				Fallback: &Launch{Module: ModuleSM90a, Entry: "gemv_wg64_bf16_t2_s2", Grid: [3]uint32{64, 2, 1}, Block: [3]uint32{160, 1, 1},
					SharedBytes: 146576, Workspace: Workspace{Counters: 128, Partials: 2 * 16 * 4096},
					Params: decodeParams(16, 4096, 4096, 16, "coop", 0)}}},
		{"token groups in clusters", checkpoint.BF16, 32, 1024, 4096, warpgroupLimits(), Options{}, "decode sc4 w4 kw1 s8 xw0 wg tok16 cl2",
			Launch{Module: ModuleSM90a, Entry: "gemv_wg_bf16_t2_s4", Grid: [3]uint32{8, 8, 2}, Block: [3]uint32{160, 1, 1},
				Cluster: [3]uint32{1, 1, 2}, SharedBytes: 128048, Workspace: Workspace{Counters: 2 * 2 * 32, Partials: 2 * 8 * 16 * 1024},
				Params: decodeParams(32, 1024, 4096, 0, "coop", 0),
				Fallback: &Launch{Module: ModuleSM90a, Entry: "gemv_wg_bf16_t2_s4", Grid: [3]uint32{8, 8, 2}, Block: [3]uint32{160, 1, 1},
					SharedBytes: 128048, Workspace: Workspace{Counters: 2 * 2 * 32, Partials: 2 * 8 * 16 * 1024},
					Params: decodeParams(32, 1024, 4096, 0, "coop", 0)}}},
		{"cooperative", checkpoint.F16, 64, 1024, 4096, warpgroupLimits(), Options{Cooperative: 1}, "decode sc4 w4 kw1 s16 xw0 wg coop",
			Launch{Module: ModuleSM90a, Entry: "gemv_wg_f16_t8_s4", Grid: [3]uint32{8, 16, 1}, Block: [3]uint32{160, 1, 1},
				SharedBytes: 144432, Cooperative: true, Workspace: Workspace{Counters: 64, Partials: 16 * 64 * 1024},
				Params: decodeParams(64, 1024, 4096, 0, "coop", 1),
				Fallback: &Launch{Module: ModuleSM90a, Entry: "gemv_wg_f16_t8_s4", Grid: [3]uint32{8, 16, 1}, Block: [3]uint32{160, 1, 1},
					SharedBytes: 144432, Workspace: Workspace{Counters: 32, Partials: 16 * 64 * 1024},
					Params: decodeParams(64, 1024, 4096, 0, "coop", 0)}}},
	} {
		p, err := Choose(c.m, c.n, c.k, c.lim, c.o)
		if err != nil || p.String() != c.plan {
			t.Errorf("%s: plan %v, %v; want %s", c.name, p, err, c.plan)
			continue
		}
		got, err := p.Launch(c.dt, c.m, c.n, c.k)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: launch\n%+v, %v\nwant\n%+v", c.name, got, err, c.want)
		}
		if got.Fallback != nil && !reflect.DeepEqual(*got.Fallback, *c.want.Fallback) {
			t.Errorf("%s: fallback\n%+v\nwant\n%+v", c.name, *got.Fallback, *c.want.Fallback)
		}
	}
	p, _ := Choose(1, 1024, 4096, h100Limits(), Options{})
	if _, err := p.Launch(checkpoint.F32, 1, 1024, 4096); !errors.Is(err, ErrNoPlan) {
		t.Errorf("F32: %v", err)
	}
	if _, err := (Plan{}).Launch(checkpoint.BF16, 1, 1024, 4096); !errors.Is(err, ErrNoPlan) {
		t.Errorf("the zero plan: %v", err)
	}
}

// TestLaunchJSON checks that launch records survive a JSON round trip and
// use the documented snake_case keys.
func TestLaunchJSON(t *testing.T) {
	p, err := Choose(1, 1024, 4096, warpgroupLimits(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := p.Launch(checkpoint.BF16, 1, 1024, 4096)
	if err != nil || l.Fallback == nil {
		t.Fatalf("%+v, %v: want a launch with a fallback", l, err)
	}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	var back Launch
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, l) {
		t.Errorf("round trip: %+v, %v\nwant %+v", back, err, l)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"module", "entry", "grid", "block", "cluster", "shared_bytes", "cooperative", "workspace", "params", "fallback"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("no key %q in %s", k, b)
		}
	}
	var params []map[string]any
	if err := json.Unmarshal(keys["params"], &params); err != nil || len(params) != 12 {
		t.Fatalf("params %v, %v", params, err)
	}
	for i, want := range map[int]map[string]any{
		0:  {"name": "Y", "c_type": "void*", "source": "y", "value": 0.0},
		10: {"name": "B", "c_type": "const uint16_t*", "source": "bias", "value": 0.0},
		11: {"name": "out", "c_type": "int", "source": "out", "value": 0.0},
	} {
		if !reflect.DeepEqual(params[i], want) {
			t.Errorf("parameter %d: %v, want %v", i, params[i], want)
		}
	}
	var ws map[string]any
	if err := json.Unmarshal(keys["workspace"], &ws); err != nil || !reflect.DeepEqual(ws, map[string]any{"counters": 32.0, "partials": 2048.0}) {
		t.Errorf("workspace %v, %v", ws, err)
	}
	if l.Workspace.Bytes() != 4*(32+2048) {
		t.Errorf("workspace of %d bytes", l.Workspace.Bytes())
	}
}

// TestEntryPointsInPTX checks that every entry point a launch record can
// name (EntryPoints) is an .entry of its module's PTX, and that the
// records of every candidate of the Llama-3 shapes name one of them with
// the PTX's parameters: as many, pointers where it has .u64, ints where
// it has .u32.
func TestEntryPointsInPTX(t *testing.T) {
	entryRE := regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(\n((?:\s*\.param [^\n]*\n)*)\)`)
	paramRE := regexp.MustCompile(`\.param \.(\w+) `)
	entries := map[string][]string{}
	// params holds each entry point's PTX parameter types (u64, u32).
	params := map[string][]string{}
	for _, module := range []string{ModuleSM80, ModuleSM90a} {
		src, err := os.ReadFile(filepath.Join("..", "ptx", filepath.Base(module)))
		if err != nil {
			t.Fatal(err)
		}
		var inPTX []string
		for _, m := range entryRE.FindAllStringSubmatch(string(src), -1) {
			inPTX = append(inPTX, m[1])
			for _, p := range paramRE.FindAllStringSubmatch(m[2], -1) {
				params[module+":"+m[1]] = append(params[module+":"+m[1]], p[1])
			}
		}
		entries[module] = EntryPoints(module)
		if len(entries[module]) == 0 {
			t.Fatalf("%s: no entry points", module)
		}
		for _, e := range entries[module] {
			if !slices.Contains(inPTX, e) {
				t.Errorf("%s: no .entry %s", module, e)
			}
		}
	}
	if EntryPoints("kernels/ptx/other.ptx") != nil {
		t.Error("entry points of an unknown module")
	}
	for _, lim := range []Limits{h100Limits(), warpgroupLimits()} {
		for _, s := range sweepShapes() {
			for _, m := range []int{1, 3, 8, 16, 33, 64} {
				ps, err := Candidates(m, s.n, s.k, lim, Options{}, MaxCandidates)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range ps {
					for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
						l, err := p.Launch(dt, m, s.n, s.k)
						if err != nil {
							t.Fatal(err)
						}
						for r := &l; r != nil; r = r.Fallback {
							if !slices.Contains(entries[r.Module], r.Entry) {
								t.Errorf("%v m=%d %dx%d: %s in %s, not an entry point of it", p, m, s.n, s.k, r.Entry, r.Module)
							}
							// The record's parameters are the PTX's, in kind
							// and number: pointers .u64, ints .u32.
							var kinds []string
							for _, q := range r.Params {
								kind := "u32"
								if strings.HasSuffix(q.CType, "*") {
									kind = "u64"
								}
								kinds = append(kinds, kind)
							}
							if ptx := params[r.Module+":"+r.Entry]; !slices.Equal(kinds, ptx) {
								t.Errorf("%s: record parameters %v, PTX parameters %v", r.Entry, kinds, ptx)
							}
						}
					}
				}
			}
		}
	}
}

// TestLaunchBiasOut checks that the records of every kernel family, and
// their fallbacks, end with the bias B and the out flag, in that order,
// after the family's last parameter (kw for the mma.sp form, coop for the
// sm_90a module's): the plans Choose makes with each family forced and
// every candidate of the Llama-3 shapes, for both element types.
func TestLaunchBiasOut(t *testing.T) {
	type forced struct {
		family string
		m      int
		o      Options
	}
	cases := []forced{
		{"gemv", 1, Options{Warpgroup: -1}},
		{"gemv", 64, Options{Warpgroup: -1, Slices: 4}},
		{"gemv_wg", 17, Options{Warpgroup: 1, Rows: 128, Pair: -1, Slices: 2}},
		{"gemv_wg", 64, Options{Cooperative: 1, Slices: 4}},
		{"gemv_wg", 32, Options{TokenTiles: 2, ChunksPerStage: 4, Slices: 4}},
		{"gemv_wg64", 8, Options{Rows: 64, Pair: -1, Slices: 3}},
		{"gemv_wg_pair", 3, Options{Rows: 128, Pair: 1}},
		{"gemv_wg64_pair", 16, Options{Rows: 64, Pair: 1}},
		{"gemv_hy", 1, Options{Rows: 32, Pair: -1, Slices: 3}},
		{"gemv_hy_pair", 1, Options{Rows: 32, Pair: 1}},
	}
	check := func(what string, l Launch) {
		t.Helper()
		for r := &l; r != nil; r = r.Fallback {
			n := len(r.Params)
			if n != 12 {
				t.Errorf("%s: %s has %d parameters, want 12", what, r.Entry, n)
				continue
			}
			last := "kw"
			if r.Module == ModuleSM90a {
				last = "coop"
			}
			if r.Params[n-3].Name != last {
				t.Errorf("%s: %s: parameter %d is %s, want %s", what, r.Entry, n-3, r.Params[n-3].Name, last)
			}
			if b := r.Params[n-2]; b != (Param{Name: "B", CType: "const uint16_t*", Source: SourceBias}) {
				t.Errorf("%s: %s: next to last parameter %+v, want the bias", what, r.Entry, b)
			}
			if o := r.Params[n-1]; o != (Param{Name: "out", CType: "int", Source: SourceOut}) {
				t.Errorf("%s: %s: last parameter %+v, want the out flag", what, r.Entry, o)
			}
			if y := r.Params[0]; y != (Param{Name: "Y", CType: "void*", Source: SourceY}) {
				t.Errorf("%s: %s: first parameter %+v, want y", what, r.Entry, y)
			}
		}
	}
	families := map[string]bool{}
	for _, c := range cases {
		lim := warpgroupLimits()
		p, err := Choose(c.m, 1024, 4096, lim, c.o)
		if err != nil {
			t.Fatalf("%s m=%d %+v: %v", c.family, c.m, c.o, err)
		}
		if f := p.family(); f != c.family {
			t.Fatalf("%s m=%d %+v: plan %v of family %s", c.family, c.m, c.o, p, f)
		}
		for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
			l, err := p.Launch(dt, c.m, 1024, 4096)
			if err != nil {
				t.Fatal(err)
			}
			check(p.String(), l)
			families[c.family] = true
		}
	}
	for _, lim := range []Limits{h100Limits(), warpgroupLimits()} {
		for _, s := range sweepShapes() {
			for _, m := range []int{1, 3, 8, 17, 64} {
				ps, err := Candidates(m, s.n, s.k, lim, Options{}, MaxCandidates)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range ps {
					l, err := p.Launch(checkpoint.BF16, m, s.n, s.k)
					if err != nil {
						t.Fatal(err)
					}
					check(p.String(), l)
				}
			}
		}
	}
	for _, module := range []string{ModuleSM80, ModuleSM90a} {
		for _, e := range EntryPoints(module) {
			parts := strings.Split(e, "_") // family, element type, tiles, stages
			if f := strings.Join(parts[:len(parts)-3], "_"); !families[f] {
				t.Errorf("entry point %s: family %s not checked", e, f)
			}
		}
	}
}

// TestLaunchBounds checks that no plan or record is made for a shape
// whose kernel parameters or grid would not fit a 32-bit int.
func TestLaunchBounds(t *testing.T) {
	lim := KnownLimits()["h100"]
	for _, s := range [][3]int{{1, 2 * MaxDim, 64}, {1, 32, 2 * MaxDim}, {0, 32, 64}, {MaxTokens + 1, 32, 64}, {1, 1 << 62, 64}} {
		if _, err := Candidates(s[0], s[1], s[2], lim, Options{}, MaxCandidates); !errors.Is(err, ErrNoPlan) {
			t.Errorf("Candidates(m=%d, n=%d, k=%d) = %v, want ErrNoPlan", s[0], s[1], s[2], err)
		}
	}
	p, err := Choose(1, 4096, 4096, lim, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range [][3]int{{1, 2 * MaxDim, 4096}, {1, 4096, 1 << 40}, {65, 4096, 4096}, {1, 4100, 4096}} {
		if _, err := p.Launch(checkpoint.BF16, s[0], s[1], s[2]); !errors.Is(err, ErrNoPlan) {
			t.Errorf("Launch(m=%d, n=%d, k=%d) = %v, want ErrNoPlan", s[0], s[1], s[2], err)
		}
	}
}
