package launchplan

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// TestPrefillShared holds the tiles' stages and shared memory to values
// worked out by hand from spmm_wg.cuh's Shape (the formula in Go and in
// CUDA is the same by review; the kernel tests on a GPU launch with these
// sizes and would overrun a ring that needs more).
func TestPrefillShared(t *testing.T) {
	want := map[string][2]int{ // stages, bytes
		"spmm_wg_bf16_r256_t192": {5, 216144},
		"spmm_wg_bf16_r256_t128": {6, 210016},
		// 128-column stages: 256 bytes a token, 128 + 16 a row.
		"spmm_wg_bf16_r128_t128": {4, 205888}, // 51200-byte stages
		"spmm_wg_bf16_r128_t64":  {6, 210016}, // 34816-byte stages
	}
	for _, tile := range PrefillTiles() {
		w, ok := want[tile.Entry("bf16", 1)]
		if !ok {
			t.Errorf("%s: no expected size", tile.Entry("bf16", 1))
			continue
		}
		if tile.Stages() != w[0] || tile.SharedBytes() != w[1] {
			t.Errorf("%s: %d stages, %d bytes; want %d, %d", tile.Entry("bf16", 1), tile.Stages(), tile.SharedBytes(), w[0], w[1])
		}
		if tile.stageBytes()%1024 != 0 {
			t.Errorf("%s: a stage of %d bytes leaves B unaligned", tile.Entry("bf16", 1), tile.stageBytes())
		}
	}
}

// TestChoosePrefill holds the planner's unsplit choice to the tile
// measured fastest unsplit on an H200 (BF16, y in BF16:
// testdata/prefill-candidates-h200.txt.gz, docs/bench-h200-prefill.md):
// a selection of the Llama-3 rows where one tile led the next by 5% or
// more (in both runs where the plain and the stacked benches time the
// same shape). One such row the planner gets wrong, within
// TestPrefillAgainstBench's bound: 70B gate/up at 4096 tokens (r256
// t128, 6% behind r256 t192).
func TestChoosePrefill(t *testing.T) {
	h200 := KnownLimits()["h200"]
	for _, c := range []struct {
		m, n, k int
		want    string
	}{
		{256, 4096, 4096, "r128_t64"},    // 8B q/o, 17–24% ahead of r128 t128
		{256, 14336, 4096, "r256_t128"},  // 8B gate/up, 15%
		{512, 4096, 14336, "r128_t128"},  // 8B down, 53–55% ahead of r128 t64
		{256, 8192, 28672, "r128_t128"},  // 70B down, 53–55%
		{1024, 1024, 4096, "r128_t64"},   // 8B k/v, 32%
		{2048, 1024, 8192, "r128_t128"},  // 70B k/v, 24%
		{1024, 28672, 8192, "r256_t128"}, // 70B gate/up, 13%
		{4096, 4096, 14336, "r256_t128"}, // 8B down, 10% ahead of r256 t192
		{4096, 8192, 28672, "r256_t128"}, // 70B down, 7–10% ahead of r256 t192
	} {
		ps, err := prefillCandidates(checkpoint.BF16, c.m, c.n, c.k, h200, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		p := ps[0]
		if want := "spmm_wg_bf16_" + c.want; p.Entry != want {
			t.Errorf("m=%d n=%d k=%d: %s, want %s", c.m, c.n, c.k, p.Entry, want)
		}
		tiles := ceilDiv(c.m, p.Tile.Tokens) * ceilDiv(c.n, p.Tile.Rows)
		if p.Grid != min(tiles, h200.SMs) || p.Block != p.Tile.Rows+128 || p.SharedBytes > h200.SharedPerBlock {
			t.Errorf("m=%d n=%d: launch %+v", c.m, c.n, p)
		}
	}
}

// TestChoosePrefillRefuses: what the kernel cannot run is an error.
func TestChoosePrefillRefuses(t *testing.T) {
	h100, a100 := KnownLimits()["h100"], KnownLimits()["a100"]
	for _, c := range []struct {
		name    string
		dt      checkpoint.DType
		m, n, k int
		lim     Limits
		want    string
	}{
		{"sm_80", checkpoint.BF16, 512, 4096, 4096, a100, "sm_90a"},
		{"f32", checkpoint.F32, 512, 4096, 4096, h100, "element type"},
		{"n", checkpoint.BF16, 512, 4100, 4096, h100, "n = 4100"},
		{"k", checkpoint.F16, 512, 4096, 4000, h100, "k = 4000"},
		{"m", checkpoint.F16, 0, 4096, 4096, h100, "m = 0"},
		{"small device", checkpoint.F16, 512, 4096, 4096, Limits{SMs: 8, SharedPerBlock: 100 << 10, Warpgroup: true}, "no tile fits"},
		{"no SMs", checkpoint.F16, 512, 4096, 4096, Limits{SharedPerBlock: h100.SharedPerBlock, Warpgroup: true}, "0 SMs"},
		{"huge m", checkpoint.BF16, math.MaxInt, 4096, 4096, h100, "m = 9223372036854775807"},
		{"m past MaxDim", checkpoint.BF16, MaxDim + 1, 4096, 4096, h100, "m = 1073741825"},
		{"huge n", checkpoint.BF16, 512, 1 << 40, 4096, h100, "n = 1099511627776"},
		{"huge k", checkpoint.BF16, 512, 4096, 1 << 40, h100, "k = 1099511627776"},
	} {
		_, err := ChoosePrefill(c.dt, c.m, c.n, c.k, c.lim)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
		if !errors.Is(err, ErrNoPlan) {
			t.Errorf("%s: %v does not wrap ErrNoPlan", c.name, err)
		}
	}
}

// TestPrefillEntryPointsInPTX holds every prefill entry point to the
// sm_90a PTX: present, with y, three 128-byte tensor maps (64-byte
// aligned), m, n, k, the bias, the output type and the splits, in that
// order.
func TestPrefillEntryPointsInPTX(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "ptx", filepath.Base(ModuleSM90a)))
	if err != nil {
		t.Fatal(err)
	}
	entryRE := regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(\n((?:\s*\.param [^\n]*\n)*)\)`)
	paramRE := regexp.MustCompile(`\.param (\.align 64 \.b8 \w+\[128\]|\.u64|\.u32)`)
	params := map[string][]string{}
	for _, m := range entryRE.FindAllStringSubmatch(string(src), -1) {
		for _, p := range paramRE.FindAllStringSubmatch(m[2], -1) {
			kind := p[1]
			if strings.HasPrefix(kind, ".align") {
				kind = "map"
			}
			params[m[1]] = append(params[m[1]], kind)
		}
	}
	want := []string{".u64", "map", "map", "map", ".u32", ".u32", ".u32", ".u64", ".u32", ".u32"}
	for _, e := range PrefillEntryPoints() {
		got, ok := params[e]
		if !ok {
			t.Errorf("no .entry %s", e)
			continue
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: parameters %v, want %v", e, got, want)
		}
	}
}

// TestPrefillWithTile: forcing a tile gives that tile's launch for the
// same product, and a tile that does not fit leaves the plan as it was.
func TestPrefillWithTile(t *testing.T) {
	h100 := KnownLimits()["h100"]
	p, err := ChoosePrefill(checkpoint.F16, 1000, 4096, 4096, h100)
	if err != nil {
		t.Fatal(err)
	}
	for _, tile := range PrefillTiles() {
		q := p.WithTile(tile, 1, checkpoint.F16, 1000, 4096, 4096, h100)
		tiles := ceilDiv(1000, tile.Tokens) * ceilDiv(4096, tile.Rows)
		if q.Tile != tile || q.Entry != tile.Entry("f16", 1) || q.Grid != min(tiles, 132) || q.SharedBytes != tile.SharedBytes() {
			t.Errorf("%s: %+v", tile.Entry("f16", 1), q)
		}
	}
	small := Limits{SMs: 8, SharedPerBlock: 150000, Warpgroup: true}
	if q := p.WithTile(PrefillTiles()[0], 1, checkpoint.F16, 1000, 4096, 4096, small); q != p {
		t.Errorf("a tile past the shared memory replaced the plan: %+v", q)
	}
}

// TestPrefillRecords: the ranges cover MaxTokens+1 … PrefillRecordsTo in
// order without gaps, at most 192 a shape (below 20,000 tokens the
// 128-row tiles, whose units fill a wave of the persistent grid in finer
// steps, and the 256-row tiles take turns within each wave: 155 ranges for
// 8B down), each record is ChoosePrefill's launch at both ends,
// and past PrefillRecordsTo the choice is the last record's (checked on
// the Llama-3 shapes up to 4·PrefillRecordsTo).
func TestPrefillRecords(t *testing.T) {
	h100 := KnownLimits()["h100"]
	for _, s := range []struct{ n, k int }{{1024, 4096}, {4096, 4096}, {6144, 4096}, {14336, 4096}, {28672, 4096}, {4096, 14336}, {8192, 28672}, {10240, 8192}} {
		recs, err := PrefillRecords(checkpoint.BF16, s.n, s.k, h100)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 || recs[0].From != MaxTokens+1 || recs[len(recs)-1].To != PrefillRecordsTo || len(recs) > 192 {
			t.Fatalf("%dx%d: %d records from %d", s.n, s.k, len(recs), recs[0].From)
		}
		for i, r := range recs {
			if i > 0 && r.From != recs[i-1].To+1 {
				t.Errorf("%dx%d: record %d starts at %d after %d", s.n, s.k, i, r.From, recs[i-1].To)
			}
			for _, m := range []int{r.From, r.To} {
				p, err := ChoosePrefill(checkpoint.BF16, m, s.n, s.k, h100)
				if err != nil {
					t.Fatal(err)
				}
				if p.Entry != r.Entry || p.Splits != r.Splits || p.Block != r.Block || p.SharedBytes != r.SharedBytes || r.Module != ModuleSM90a {
					t.Errorf("%dx%d m=%d: record %+v, plan %+v", s.n, s.k, m, r, p)
				}
			}
		}
		last := recs[len(recs)-1]
		if last.Splits != 1 {
			t.Errorf("%dx%d: the last record splits k %d ways", s.n, s.k, last.Splits)
		}
		for m := PrefillRecordsTo + 1; m <= 4*PrefillRecordsTo; m += 97 {
			if p, _ := ChoosePrefill(checkpoint.BF16, m, s.n, s.k, h100); p.Entry != last.Entry {
				t.Fatalf("%dx%d m=%d: %s past the records, the last is %s", s.n, s.k, m, p.Entry, last.Entry)
			}
		}
	}
	if _, err := PrefillRecords(checkpoint.BF16, 4096, 4096, KnownLimits()["a100"]); err == nil {
		t.Error("records for an sm_80 device")
	}
}

// TestPrefillBlock holds what PrefillRecords' stepping rests on, and its
// records to the slow reference: ChoosePrefill asked at every token
// count, on shapes whose tile changes often (small n) and seldom.
func TestPrefillBlock(t *testing.T) {
	for _, tile := range PrefillTiles() {
		if tile.Tokens%prefillBlock != 0 {
			t.Errorf("tile %s: %d tokens, not a multiple of %d", tile, tile.Tokens, prefillBlock)
		}
	}
	if MaxTokens%prefillBlock != 0 || PrefillRecordsTo%prefillBlock != 0 {
		t.Errorf("MaxTokens %d or PrefillRecordsTo %d not a multiple of %d", MaxTokens, PrefillRecordsTo, prefillBlock)
	}
	h100 := KnownLimits()["h100"]
	for _, s := range []struct{ n, k int }{{96, 1600}, {1024, 4096}, {14336, 4096}} {
		recs, err := PrefillRecords(checkpoint.F16, s.n, s.k, h100)
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		for m := MaxTokens + 1; m <= PrefillRecordsTo; m++ {
			for i < len(recs) && m > recs[i].To {
				i++
			}
			p, err := ChoosePrefill(checkpoint.F16, m, s.n, s.k, h100)
			if err != nil {
				t.Fatal(err)
			}
			if i == len(recs) || m < recs[i].From || recs[i].Entry != p.Entry || recs[i].Splits != p.Splits {
				t.Fatalf("%dx%d m=%d: the planner picks %s, the records do not", s.n, s.k, m, p.Entry)
			}
		}
	}
}

// TestPrefillSplitStages holds prefillSplitStages to a slow reference of
// spmm_wg.cuh's Splits: the splits' stages, each count even, cover K's
// stages once in order (the stage past K an odd count pads lies past
// them), and every split has work exactly when it says so.
func TestPrefillSplitStages(t *testing.T) {
	for nk := 1; nk <= 200; nk++ {
		for s := 1; s <= MaxPrefillSplits; s++ {
			// K of nk stages of 128 columns, the last one half past K for odd k/64.
			per, ok := prefillSplitStages(nk*128-64*(nk%2), 128, s)
			covered, work := 0, true
			for i := range s {
				// Splits in the kernel: first = i·per, n = clamp(nk - first, 0, per), count = n rounded up to even.
				first := i * per
				n := max(0, min(nk-first, per))
				count := (n + 1) &^ 1
				if n > 0 && first != covered {
					t.Fatalf("nk %d, %d splits: split %d starts at %d after %d stages", nk, s, i, first, covered)
				}
				if count%2 != 0 || (i+1)*per < nk && n != per {
					t.Fatalf("nk %d, %d splits: split %d has %d stages (%d padded) of %d", nk, s, i, n, count, per)
				}
				covered += n
				work = work && n > 0
			}
			if covered != nk || ok != work || per%2 != 0 {
				t.Fatalf("nk %d, %d splits: %d stages covered, every split working %v, prefillSplitStages (%d, %v)",
					nk, s, covered, work, per, ok)
			}
		}
	}
}

// TestPrefillClusterCTAs holds PrefillClusterCTAs to what
// cluster_occupancy.cu measured on an H200 (132 SMs, one CTA a SM): 132
// CTAs alone, then 66, 39, 30, 22, 17, 15 and 15 clusters of 2 to 8; and
// to whole clusters, no more than the SMs, on any SM count.
func TestPrefillClusterCTAs(t *testing.T) {
	for _, c := range []struct{ sms, splits, want int }{
		{132, 1, 132}, {132, 2, 132}, {132, 3, 117}, {132, 4, 120}, {132, 5, 110}, {132, 6, 102}, {132, 7, 105},
		{132, 8, 120}, {132, 9, 99}, {132, 16, 96},
		{108, 1, 108}, {108, 2, 108}, {108, 4, 96}, {114, 8, 96}, {8, 8, 0}, {8, 2, 8}, {8, 3, 6}, {1, 2, 0},
	} {
		got := PrefillClusterCTAs(c.sms, c.splits)
		if got != c.want {
			t.Errorf("PrefillClusterCTAs(%d, %d) = %d, want %d", c.sms, c.splits, got, c.want)
		}
		if got%c.splits != 0 || got > c.sms {
			t.Errorf("PrefillClusterCTAs(%d, %d) = %d: not whole clusters on the SMs", c.sms, c.splits, got)
		}
	}
}

// TestPrefillCandidates: each candidate is a launch the kernel can run
// (splits that all work and fill at most one wave, the grid and
// clusters of its tile and splits), the list is in the cost model's
// order and starts with ChoosePrefill's plan, the narrow shapes split K
// at a few hundred tokens and no shape splits from 16384.
func TestPrefillCandidates(t *testing.T) {
	h200 := KnownLimits()["h200"]
	for _, s := range []struct {
		n, k  int
		split []int // token counts where the planner must split K
	}{
		{1024, 4096, []int{128, 256}}, {1024, 8192, []int{128, 256, 512}}, {4096, 4096, []int{128}},
		{14336, 4096, nil}, {4096, 14336, []int{128}}, {8192, 28672, []int{128}}, {96, 1600, nil},
	} {
		for _, m := range []int{65, 128, 256, 512, 1024, 4096, 16384} {
			ps, err := PrefillCandidates(checkpoint.BF16, m, s.n, s.k, h200, MaxCandidates)
			if err != nil {
				t.Fatal(err)
			}
			first, err := ChoosePrefill(checkpoint.BF16, m, s.n, s.k, h200)
			if err != nil || len(ps) == 0 || ps[0] != first {
				t.Fatalf("%dx%d m=%d: ChoosePrefill %+v (%v), candidates %v", s.n, s.k, m, first, err, ps)
			}
			for i, p := range ps {
				what := fmt.Sprintf("%dx%d m=%d candidate %d %s", s.n, s.k, m, i, p)
				tiles := ceilDiv(m, p.Tile.Tokens) * ceilDiv(s.n, p.Tile.Rows)
				_, ok := prefillSplitStages(s.k, p.Tile.StageK(), p.Splits)
				switch {
				case p.Splits < 1 || p.Splits > MaxPrefillSplits || !ok:
					t.Errorf("%s: splits that leave one without work", what)
				case p.Splits > 1 && tiles*p.Splits > PrefillClusterCTAs(h200.SMs, p.Splits):
					t.Errorf("%s: %d units, %d CTAs run at once in its clusters", what, tiles*p.Splits, PrefillClusterCTAs(h200.SMs, p.Splits))
				case p.Splits == 1 && (p.Grid != min(tiles, h200.SMs) || p.Cluster() != 0),
					p.Splits > 1 && (p.Grid != tiles*p.Splits || p.Cluster() != p.Splits),
					p.Entry != p.Tile.Entry("bf16", p.Splits):
					t.Errorf("%s: launch %+v", what, p)
				case i > 0 && prefillCost(ps[i-1].Tile, ps[i-1].Splits, m, s.n, s.k, h200.SMs) > prefillCost(p.Tile, p.Splits, m, s.n, s.k, h200.SMs):
					t.Errorf("%s: cheaper than the candidate before it", what)
				}
			}
			if m >= 16384 && first.Splits != 1 {
				t.Errorf("%dx%d m=%d: %s splits K", s.n, s.k, m, first)
			}
			if slices.Contains(s.split, m) && first.Splits == 1 {
				t.Errorf("%dx%d m=%d: %s leaves %d of %d SMs idle unsplit", s.n, s.k, m, first, h200.SMs-first.Grid, h200.SMs)
			}
		}
	}
}

// TestPrefillAgainstBench replays what `sfsurgery bench` measured of the
// prefill kernel's candidate plans on an H200 (BF16, the Llama-3 8B and
// 70B projections and their qkv and gate_up stacks, M = 128 to 4096;
// testdata/prefill-candidates-h200.txt.gz, made by
// tools/gpu/bench_candidates.sh from the rows above 64 tokens) against
// ChoosePrefill's plan: on average within 1% of the fastest timed, none
// more than 10% behind it. The rows judge ChoosePrefill only where its
// plan was among those timed; if a planner change leaves more than a
// quarter of them unjudged, measure again.
func TestPrefillAgainstBench(t *testing.T) {
	rows := loadBenchCandidates(t, "testdata/prefill-candidates-h200.txt.gz")
	h200 := KnownLimits()["h200"]
	r := replayBench(t, rows, func(r benchRow) (fmt.Stringer, error) {
		return ChoosePrefill(checkpoint.BF16, r.m, r.n, r.k, h200)
	})
	if r.judged == 0 || r.judged < len(rows)*3/4 {
		t.Fatalf("%d of %d rows judged: the planner's plans were not measured; measure again", r.judged, len(rows))
	}
	t.Logf("%d of %d rows: ChoosePrefill's plan %.2f%% behind the fastest on average, %.0f%% at worst",
		r.judged, len(rows), 100*r.mean, 100*r.worst)
	if r.mean > 0.01 || r.worst > 0.10 {
		t.Errorf("ChoosePrefill %.2f%% behind on average (want ≤ 1%%), %.0f%% at worst (want ≤ 10%%)", 100*r.mean, 100*r.worst)
	}
}
