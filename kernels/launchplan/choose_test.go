package launchplan

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestCandidates checks the plans an engine times on its own GPU
// (Candidates) against the H100 sweep: the first is Choose's
// choice, they come in the model's order without repeats, and timing the
// first few and keeping the fastest comes closer to the best timed plan
// than the model's choice alone.
func TestCandidates(t *testing.T) {
	cases := loadSweep(t, "testdata/gemv-sweep-h100.txt.gz")
	md := defaultModel()
	regret := map[int]float64{}
	for _, c := range cases {
		best := c.plans[0].us
		for _, q := range c.plans {
			best = min(best, q.us)
		}
		ps, err := Candidates(c.m, c.n, c.k, h100Limits(), Options{}, MaxCandidates)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(ps) != MaxCandidates {
			t.Fatalf("%s: %d candidates, want %d", c.name, len(ps), MaxCandidates)
		}
		if p, _ := Choose(c.m, c.n, c.k, h100Limits(), Options{}); p != ps[0] {
			t.Errorf("%s: first candidate %+v, Choose %+v", c.name, ps[0], p)
		}
		seen := map[Plan]bool{}
		fastest := 0.0
		for i, p := range ps {
			if seen[p] {
				t.Errorf("%s: candidate %d repeats %+v", c.name, i, p)
			}
			seen[p] = true
			if i > 0 {
				prev := md.rate(c.m, c.n, c.k, h100Limits(), ps[i-1])
				if cost := md.rate(c.m, c.n, c.k, h100Limits(), p); cost < prev {
					t.Errorf("%s: candidate %d costs %d, less than candidate %d (%d)", c.name, i, cost, i-1, prev)
				}
			}
			if us, ok := c.timedUS(p); ok && (fastest == 0 || us < fastest) {
				fastest = us
			}
			if fastest > 0 {
				regret[i+1] += (fastest/best - 1) / float64(len(cases))
			} else {
				regret[i+1] += 1 / float64(len(cases)) // nothing timed yet: count it as twice the best
			}
		}
	}
	for n := 1; n <= MaxCandidates; n++ {
		t.Logf("fastest of the first %d candidates: %.2f%% slower than the best timed plan on average", n, 100*regret[n])
	}
	if regret[MaxCandidates] >= regret[1] || regret[MaxCandidates] > 0.01 {
		t.Errorf("timing %d candidates: %.2f%% over the best on average, the model's choice alone %.2f%%",
			MaxCandidates, 100*regret[MaxCandidates], 100*regret[1])
	}
}

// TestCandidate checks that candidate i, the plan SparseMatmulCandidate
// runs, is the plan SparseCandidates lists i-th, for every Llama-3
// projection and decode token count with and without the warpgroup form.
// (It was not: the launch planned a list of i+1 candidates, which holds
// fewer of each form, so bench timed plans other than those it named,
// some twice.)
func TestCandidate(t *testing.T) {
	for _, wg := range []bool{false, true} {
		lim := h100Limits()
		lim.Warpgroup = wg
		for _, s := range sweepShapes() {
			for _, m := range []int{1, 2, 4, 8, 16, 32, 64} {
				ps, err := Candidates(m, s.n, s.k, lim, Options{}, MaxCandidates)
				if err != nil {
					t.Fatal(err)
				}
				for i, want := range ps {
					if got, err := Candidate(m, s.n, s.k, lim, Options{}, i); err != nil || got != want {
						t.Errorf("wg %v %s m=%d: candidate %d is %v, %v; the list says %v", wg, s.proj, m, i, got, err, want)
					}
				}
				if _, err := Candidate(m, s.n, s.k, lim, Options{}, len(ps)); !errors.Is(err, ErrNoPlan) {
					t.Errorf("wg %v %s m=%d: candidate %d of %d: %v", wg, s.proj, m, len(ps), len(ps), err)
				}
			}
		}
	}
}

// TestGroupCandidates checks the token-group plans among the
// candidates on an sm_90a device: from groupMinTokens, groups of 32 and
// 16 tokens (and two of 8) with the most slices that keep the grid within
// one wave, two groups in clusters (the plans that measured fastest at 32 and 64 tokens
// on the H100), at the end of the list, except that from
// groupPickTokens two groups in clusters over slices of at most
// groupPickChunks (from groupPickShortTokens over slices of at
// most groupPickShortChunks) come first, or, from groupPickTokens,
// the first group plan over slices of groupPickMinChunks or more where
// one is, as Choose's choice, or second after a
// pair of 64-row CTAs (pairRowsLead: 8B q/o and down), which leads the
// list wherever there is one; and their workspace.
func TestGroupCandidates(t *testing.T) {
	lim := h100Limits()
	lim.Warpgroup = true
	for _, c := range []struct {
		m, n, k int
		lead    []string // the candidates' first plans where they are not the model's: a pair, a token-group plan
		tail    []string // the candidates' last plans
	}{
		{64, 1024, 4096, []string{"decode sc4 w4 kw1 s4 xw0 wg tok16"}, []string{"decode sc4 w4 kw1 s8 xw0 wg tok32 cl2"}}, // slices of 16, not 8
		{64, 4096, 4096, []string{"decode sc2 w4 kw1 s2 xw8 wg r64 pair", "decode sc4 w4 kw1 s2 xw8 wg tok32 cl2"},
			[]string{"decode sc4 w4 kw1 s1 xw8 wg tok16"}},
		{64, 8192, 8192, nil, []string{"decode sc4 w4 kw1 s1 xw8 wg tok32 cl2"}}, // slices of 128 chunks; 16-token groups: 256 CTAs
		{40, 1024, 8192, []string{"decode sc4 w4 kw1 s8 xw0 wg tok32 cl2"}, []string{"decode sc4 w4 kw1 s4 xw0 wg tok16"}},
		{33, 4096, 14336, []string{"decode sc2 w4 kw1 s2 xw8 wg r64 pair"}, []string{"decode sc4 w4 kw1 s2 xw8 wg tok32 cl2", "decode sc4 w4 kw1 s1 xw8 wg tok16"}}, // 3 groups of 16
		{64, 14336, 4096, nil, nil}, // 112 CTAs of 128 rows: no room for groups
		{32, 1024, 4096, []string{"decode sc4 w4 kw1 s8 xw0 wg tok16 cl2"}, nil}, // slices of 8 chunks: picked from 16 tokens
		{17, 8192, 8192, nil, []string{"decode sc4 w4 kw1 s1 xw8 wg tok16 cl2"}},
		{16, 1024, 4096, []string{"decode sc4 w4 kw1 s8 xw0 wg tok8 cl2"}, nil},
		{16, 1024, 8192, []string{"decode sc4 w4 kw1 s8 xw0 wg tok8 cl2"}, nil},                                               // slices of 16 chunks
		{16, 4096, 4096, []string{"decode sc2 w4 kw1 s2 xw16 wg r64 pair"}, []string{"decode sc4 w4 kw1 s2 xw0 wg tok8 cl2"}}, // of 32
		{9, 4096, 4096, []string{"decode sc2 w4 kw1 s2 xw16 wg r64 pair"}, []string{"decode sc4 w4 kw1 s2 xw0 wg tok8 cl2"}},
		{8, 1024, 4096, []string{"decode sc4 w4 kw1 s2 xw16 wg r32 pair"}, nil}, // the hybrid (hybridPlan)
		// TinyLlama: slices of 4 chunks (k/v) or 22 (down).
		{64, 256, 2048, []string{"decode sc4 w4 kw1 s8 xw0 wg tok16"}, []string{"decode sc4 w4 kw1 s8 xw0 wg tok32 cl2"}}, // the most CTAs
		{32, 2048, 5632, []string{"decode sc4 w4 kw1 s4 xw0 wg tok16 cl2"}, nil},                                          // up to 24 chunks from 17 tokens
		{16, 2048, 5632, nil, []string{"decode sc4 w4 kw1 s4 xw0 wg tok8 cl2"}},                                           // not at 16
	} {
		ps, err := Candidates(c.m, c.n, c.k, lim, Options{}, MaxCandidates)
		if err != nil || len(ps) != MaxCandidates {
			t.Fatalf("%+v: %d candidates, %v", c, len(ps), err)
		}
		p, err := Choose(c.m, c.n, c.k, lim, Options{})
		if err != nil || p != ps[0] {
			t.Errorf("m=%d %dx%d: Choose %v (%v), first candidate %v", c.m, c.n, c.k, p, err, ps[0])
		}
		var lead []string
		for _, q := range ps[:len(c.lead)] {
			lead = append(lead, q.String())
		}
		if !slices.Equal(lead, c.lead) || len(c.lead) == 0 && (p.TokenGroups != 0 || p.RowBlocks == 2 || p.RowBlocks == 1) {
			t.Errorf("m=%d %dx%d: candidates start %q (Choose %v), want %q", c.m, c.n, c.k, lead, p, c.lead)
		}
		var tail []string
		for i, q := range ps {
			if q.TokenGroups > 0 && i >= len(c.lead) {
				tail = append(tail, q.String())
				if i < len(ps)-len(c.tail) {
					t.Errorf("m=%d %dx%d: token-group plan %v at %d, before the model's", c.m, c.n, c.k, q, i)
				}
			}
		}
		if !slices.Equal(tail, c.tail) {
			t.Errorf("m=%d %dx%d: token-group candidates after the first %q, want %q", c.m, c.n, c.k, tail, c.tail)
		}
		seen := map[Plan]bool{}
		for i, q := range ps {
			if seen[q] {
				t.Errorf("m=%d %dx%d: candidate %d repeats %v", c.m, c.n, c.k, i, q)
			}
			seen[q] = true
		}
	}
	// The workspace: the sums of every group's 8·tiles tokens for each
	// slice, and two counters per row block for each group.
	p, err := Choose(64, 1024, 4096, lim, Options{TokenTiles: 2, ChunksPerStage: 4, Slices: 4})
	if err != nil || p.TokenGroups != 4 || p.Slices != 4 || p.grid(1024) != ([3]uint32{8, 4, 4}) {
		t.Fatalf("16-token groups of 64 tokens over 4 slices: %+v, %v", p, err)
	}
	if counters, partials := p.workspace(64, 1024); counters != 4*2*32 || partials != 4*4*16*1024 {
		t.Errorf("workspace: %d counters, %d partial sums", counters, partials)
	}
	for _, c := range []struct {
		p        Plan
		m, n     int
		counters int
		partials int64
	}{
		{Plan{Slices: 1}, 64, 1024, 0, 0},
		{Plan{Slices: 1, TokenGroups: 4, TokenTiles: 2}, 64, 1024, 0, 0},
		{Plan{Slices: 8, TokenTiles: 8}, 64, 1024, 32, 8 * 64 * 1024},
		{Plan{Slices: 16, TokenTiles: 8, Cooperative: true}, 64, 1024, 64, 16 * 64 * 1024},
		{Plan{Slices: 3, TokenTiles: 1, TokenGroups: 5}, 33, 96, 5 * 2 * 3, 5 * 3 * 8 * 96},
	} {
		if counters, partials := c.p.workspace(c.m, c.n); counters != c.counters || partials != c.partials {
			t.Errorf("%+v m=%d n=%d: workspace %d, %d; want %d, %d", c.p, c.m, c.n, counters, partials, c.counters, c.partials)
		}
	}
}

// TestChooseWarpgroup checks how Choose weighs the warpgroup form on an
// sm_90a device: at 1-32 tokens, where the probe measured it 4-9% faster
// than the mma.sp kernel on the same plan, it is the choice for the 8B
// shapes, and a plan in that form costs warpgroupPercent of the same plan without
// it, with its own shared memory.
func TestChooseWarpgroup(t *testing.T) {
	lim := h100Limits()
	lim.Warpgroup = true
	md := defaultModel()
	for _, s := range []struct{ n, k int }{{4096, 4096}, {14336, 4096}, {4096, 14336}} {
		for _, m := range []int{1, 8, 16, 32} {
			p, err := Choose(m, s.n, s.k, lim, Options{})
			if err != nil || !p.Warpgroup {
				t.Errorf("%dx%d m=%d: plan %v, %v; want the warpgroup form", s.n, s.k, m, p, err)
				continue
			}
			// Choose's plan where no pair of 64-row CTAs leads (which
			// the model prices with their own staging: TestPairRows).
			if p.RowBlocks == 2 {
				ps, err := Candidates(m, s.n, s.k, lim, Options{}, MaxCandidates)
				if err != nil {
					t.Fatal(err)
				}
				p = ps[slices.IndexFunc(ps, func(q Plan) bool { return q.RowBlocks != 2 })]
			}
			q := p
			q.Warpgroup = false
			q.SharedBytes = q.sharedBytes(m)
			plain := md.warpgroup.costSmem(m, s.n, s.k, lim, q.ChunksPerStage, q.Warps, p.blocks(), q.WarpsPerRowBlock, q.ChunksPerSlice, q.WindowChunks, p.SharedBytes, p.Pair)
			if got, want := md.rate(m, s.n, s.k, lim, p), ceilDiv(plain*md.warpgroupPercent[bits.TrailingZeros(uint(p.TokenTiles))], 100); got != want {
				t.Errorf("%dx%d m=%d: rate %d, want %d", s.n, s.k, m, got, want)
			}
			if got := p.String(); !strings.Contains(got, " wg") || strings.Contains(q.String(), " wg") {
				t.Errorf("%dx%d m=%d: %q and %q", s.n, s.k, m, got, q.String())
			}
			// The candidates: the model's, 4 of each form (or 3 of one
			// where a token-group plan ends the list), in its order.
			ps, err := Candidates(m, s.n, s.k, lim, Options{}, MaxCandidates)
			if err != nil || len(ps) != MaxCandidates || !slices.Contains(ps, p) {
				t.Fatalf("%dx%d m=%d: candidates %v, %v", s.n, s.k, m, ps, err)
			}
			forms := map[bool]int{}
			for ps[len(ps)-1].TokenGroups > 0 {
				ps = ps[:len(ps)-1]
			}
			if ps[0].RowBlocks == 2 {
				ps = ps[1:] // the pair that leads (a second pair is the model's)
			}
			for i, c := range ps {
				forms[c.Warpgroup]++
				if i > 0 && (rated{c, md.rate(m, s.n, s.k, lim, c)}).before(rated{ps[i-1], md.rate(m, s.n, s.k, lim, ps[i-1])}) {
					t.Errorf("%dx%d m=%d: candidate %d (%v) before %d (%v)", s.n, s.k, m, i, c, i-1, ps[i-1])
				}
			}
			if forms[true] < len(ps)/2 || forms[false] < len(ps)/2 {
				t.Errorf("%dx%d m=%d: %d warpgroup and %d mma.sp candidates", s.n, s.k, m, forms[true], forms[false])
			}
		}
	}
}

// TestPairRows checks where Choose leads with a pair of 64-row CTAs
// on an sm_90a device: for the 4096-row Llama-3-8B shapes (q/o and down,
// 128 CTAs) at every token count, as two slices in 2-chunk stages with
// the activations in windows of pairMaxWindow chunks, or the widest
// that fit where narrower (never narrower than minWindow's), staged whole
// only where the slice is no longer than a window, priced by the model as
// minWindow's windows; and nowhere else: not for 8192 rows (256 CTAs, two
// waves), 1024 (32 CTAs) or 14336, and never without the warpgroup form.
func TestPairRows(t *testing.T) {
	md := defaultModel()
	for _, lim := range []Limits{warpgroupLimits(), h100Limits()} {
		for _, s := range []struct{ n, k int }{{4096, 4096}, {4096, 14336}, {8192, 8192}, {1024, 4096}, {14336, 4096}} {
			for _, m := range []int{1, 2, 4, 8, 16, 32, 33, 64} {
				p, err := Choose(m, s.n, s.k, lim, Options{})
				if err != nil {
					t.Fatal(err)
				}
				ps, err := Candidates(m, s.n, s.k, lim, Options{}, MaxCandidates)
				if err != nil {
					t.Fatal(err)
				}
				pairs := 0
				for _, q := range ps {
					if q.RowBlocks == 2 {
						pairs++
					}
				}
				want := lim.Warpgroup && s.n == 4096
				name := fmt.Sprintf("wg %v %dx%d m=%d", lim.Warpgroup, s.n, s.k, m)
				if !want {
					if pairs > 0 {
						t.Errorf("%s: %d candidates of 64-row CTAs: %v", name, pairs, ps)
					}
					continue
				}
				tiles := tokenTiles(m)
				cps := ceilDiv(s.k/ChunkColumns, 2)
				// The window: 16 chunks, or the widest that fits (checked
				// by growing it), staged whole for a slice within it.
				win := 0
				for w := 2; w <= pairMaxWindow && sharedWarpgroup(tiles, 2, 0, w, 2, true) <= lim.SharedPerBlock; w += 2 {
					win = w
				}
				whole := cps <= win
				switch {
				case p.RowBlocks != 2 || !p.Pair || p.ChunksPerStage != 2 || p.Slices != 2 || p.TokenGroups != 0 || p.SharedBytes > lim.SharedPerBlock:
					t.Errorf("%s: Choose %v, want a pair of 64-row CTAs", name, p)
				case whole && p.WindowChunks != 0, !whole && p.WindowChunks != win:
					t.Errorf("%s: windows of %d chunks (slice %d chunks; window %d)", name, p.WindowChunks, cps, win)
				case p.WindowChunks != 0 && p.WindowChunks < minWindow(2, 1):
					t.Errorf("%s: windows of %d chunks are narrower than minWindow's", name, p.WindowChunks)
				}
				narrow := p
				narrow.WindowChunks = minWindow(2, 1)
				if got, want := md.rate(m, s.n, s.k, lim, p), md.rate(m, s.n, s.k, lim, narrow); got != want {
					t.Errorf("%s: rate %d, want %d (as in windows of %d)", name, got, want, narrow.WindowChunks)
				}
			}
		}
	}
}

// TestWideWindow checks the windows of the warpgroup form's 128-row
// CTAs in 2-chunk stages among every candidate for the Llama-3 shapes:
// wideWindow chunks where the plan's buffers fit with them and its
// slice is longer, else minWindow's; priced as minWindow's either way.
func TestWideWindow(t *testing.T) {
	md := defaultModel()
	lim := warpgroupLimits()
	narrow := minWindow(2, 1)
	seen := 0
	for _, s := range []struct{ n, k int }{{4096, 4096}, {1024, 4096}, {14336, 4096}, {4096, 14336},
		{8192, 8192}, {1024, 8192}, {28672, 8192}, {8192, 28672}} {
		for _, m := range []int{1, 8, 16, 32, 33, 64} {
			ps, err := Candidates(m, s.n, s.k, lim, Options{}, 64)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ps {
				if !p.Warpgroup || p.RowBlocks != warpgroupWarps || p.ChunksPerStage != 2 || p.WindowChunks == 0 {
					continue
				}
				seen++
				wide := p
				wide.WindowChunks = wideWindow
				want := narrow
				if p.ChunksPerSlice > wideWindow && wide.sharedBytes(m) <= lim.SharedPerBlock {
					want = wideWindow
				}
				if p.WindowChunks != want {
					t.Errorf("%dx%d m=%d: %v in windows of %d chunks, want %d", s.n, s.k, m, p, p.WindowChunks, want)
				}
				if p.SharedBytes != p.sharedBytes(m) || p.SharedBytes > lim.SharedPerBlock {
					t.Errorf("%dx%d m=%d: %v: %d bytes of shared memory, needs %d of %d", s.n, s.k, m, p, p.SharedBytes, p.sharedBytes(m), lim.SharedPerBlock)
				}
				priced := p
				priced.WindowChunks = narrow
				if got, want := md.rate(m, s.n, s.k, lim, p), md.rate(m, s.n, s.k, lim, priced); got != want {
					t.Errorf("%dx%d m=%d: %v rated %d, want %d (as in windows of %d)", s.n, s.k, m, p, got, want, narrow)
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no 2-chunk 128-row plans in windows among the candidates")
	}
}

// TestHybridPlan checks where the candidates hold the hybrid's pair
// (hybridPlan): on the warpgroup form's devices, for at most
// hybridMaxTokens tokens and grids of hybridMinCTAs CTAs up to one wave,
// in 4-chunk stages, the activations whole up to 2 tokens and in windows
// of 16 chunks from 4 where a slice holds more; nowhere else. It is
// Choose's plan where hybridLeads says (slices of at most 32 chunks, or
// 48 up to 4 tokens), and the second candidate elsewhere, where Choose
// keeps the model's.
func TestHybridPlan(t *testing.T) {
	wg := h100Limits()
	wg.Warpgroup = true
	for _, c := range []struct {
		m, n, k int
		lim     Limits
		want    string // Choose's plan where it is the hybrid's, else ""
		second  string // the second candidate where it is the hybrid's, else ""
	}{
		{1, 1024, 4096, wg, "decode sc4 w4 kw1 s2 xw0 wg r32 pair", ""},
		{2, 1024, 4096, wg, "decode sc4 w4 kw1 s2 xw0 wg r32 pair", ""},
		{4, 1024, 4096, wg, "decode sc4 w4 kw1 s2 xw16 wg r32 pair", ""},
		{8, 1024, 4096, wg, "decode sc4 w4 kw1 s2 xw16 wg r32 pair", ""},
		{8, 2112, 4096, wg, "decode sc4 w4 kw1 s2 xw16 wg r32 pair", ""}, // 132 CTAs: one wave
		{4, 2048, 5632, wg, "decode sc4 w4 kw1 s2 xw16 wg r32 pair", ""}, // slices of 44 chunks: first up to 4 tokens
		{8, 2048, 5632, wg, "", "decode sc4 w4 kw1 s2 xw16 wg r32 pair"}, // then second
		{4, 1024, 1024, wg, "decode sc4 w4 kw1 s2 xw0 wg r32 pair", ""},  // slices of 8 chunks: one window, staged whole
		{1, 1024, 8192, wg, "", "decode sc4 w4 kw1 s2 xw0 wg r32 pair"},  // slices of 64 chunks
		{2, 1024, 8192, wg, "", "decode sc4 w4 kw1 s2 xw0 wg r32 pair"},
		{4, 1024, 8192, wg, "", "decode sc4 w4 kw1 s2 xw16 wg r32 pair"},
		{8, 1024, 8192, wg, "", "decode sc4 w4 kw1 s2 xw16 wg r32 pair"},
		{9, 1024, 8192, wg, "", ""},           // past hybridMaxTokens
		{1, 512, 4096, wg, "", ""},            // 32 CTAs
		{1, 2144, 4096, wg, "", ""},           // 134 CTAs: two waves
		{1, 1024, 8192, h100Limits(), "", ""}, // no sm_90a module
	} {
		p, err := Choose(c.m, c.n, c.k, c.lim, Options{})
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if got := p.String(); (p.RowBlocks == 1) != (c.want != "") || c.want != "" && got != c.want {
			t.Errorf("m=%d %dx%d wg %v: Choose %q, want %q", c.m, c.n, c.k, c.lim.Warpgroup, got, c.want)
		}
		ps, err := Candidates(c.m, c.n, c.k, c.lim, Options{}, MaxCandidates)
		if err != nil || len(ps) != MaxCandidates {
			t.Fatalf("%+v: %d candidates, %v", c, len(ps), err)
		}
		if got := ps[1].String(); (ps[1].RowBlocks == 1) != (c.second != "") || c.second != "" && got != c.second {
			t.Errorf("m=%d %dx%d wg %v: second candidate %q, want %q", c.m, c.n, c.k, c.lim.Warpgroup, got, c.second)
		}
		if ps[0] != p {
			t.Errorf("m=%d %dx%d: first candidate %v, Choose %v", c.m, c.n, c.k, ps[0], p)
		}
		hybrids := 0
		for _, q := range ps {
			if q.RowBlocks == 1 {
				hybrids++
			}
		}
		if want := len(c.want + c.second); hybrids != min(want, 1) {
			t.Errorf("m=%d %dx%d: %d hybrids among the candidates", c.m, c.n, c.k, hybrids)
		}
		if p.RowBlocks == 1 && (p.SharedBytes != sharedHybrid(c.m, p.TokenTiles, p.ChunksPerStage, p.ChunksPerSlice, p.WindowChunks, true) || p.SharedBytes > c.lim.SharedPerBlock) {
			t.Errorf("m=%d %dx%d: %d bytes of shared memory", c.m, c.n, c.k, p.SharedBytes)
		}
	}
}

// benchRow is one row of a bench-candidates file: a shape, a token count,
// and the median of each launch plan bench timed there.
type benchRow struct {
	n, k, m int
	us      map[string]float64
	best    float64
}

// loadBenchCandidates reads a bench-candidates file
// (tools/gpu/bench_candidates.sh).
func loadBenchCandidates(t *testing.T, path string) []benchRow {
	t.Helper()
	var rows []benchRow
	for _, l := range dataLines(t, path) {
		parts := strings.Split(l.text, " | ")
		r := benchRow{us: map[string]float64{}}
		if _, err := fmt.Sscanf(parts[0], "%d %d %d", &r.n, &r.k, &r.m); err != nil || len(parts) < 2 {
			t.Fatalf("%s:%d: %q: %v", path, l.n, l.text, err)
		}
		for _, c := range parts[1:] {
			plan, v, ok := strings.Cut(c, " = ")
			us, err := strconv.ParseFloat(v, 64)
			if !ok || err != nil {
				t.Fatalf("%s:%d: candidate %q", path, l.n, c)
			}
			r.us[plan] = us
			if us > 0 && (r.best == 0 || us < r.best) {
				r.best = us
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// TestPlanAgainstBench replays what `sfsurgery bench` measured of
// every candidate plan (BF16: the eight Llama-3 projection shapes, the
// stacked qkv and gate_up of Llama-3-8B and 70B, TinyLlama's shapes and
// stacks, M = 1-64; testdata/bench-candidates-{h100,h200}.txt.gz) against
// the plan Choose runs: on average within 0.5% of the fastest, at most
// 10 rows of each GPU more than 2% behind it, and none more than 10%. The
// rows judge Choose only where its plan was among those timed; if a
// planner change leaves more than a tenth of them unjudged, measure again
// (tools/gpu/bench_candidates.sh says how).
func TestPlanAgainstBench(t *testing.T) {
	for _, gpu := range []string{"h100", "h200"} {
		t.Run(gpu, func(t *testing.T) { checkPlanAgainstBench(t, "testdata/bench-candidates-"+gpu+".txt.gz") })
	}
}

// checkPlanAgainstBench is TestPlanAgainstBench for one file.
func checkPlanAgainstBench(t *testing.T, path string) {
	rows := loadBenchCandidates(t, path)
	r := replayBench(t, rows, func(r benchRow) (fmt.Stringer, error) {
		return Choose(r.m, r.n, r.k, warpgroupLimits(), Options{})
	})
	if r.judged < len(rows)*9/10 {
		t.Fatalf("%d of %d rows judged: the planner's plans were not measured; measure again", r.judged, len(rows))
	}
	t.Logf("%d rows: Choose's plan %.2f%% behind the fastest on average, %.0f%% at worst, %d rows over 2%%",
		r.judged, 100*r.mean, 100*r.worst, r.over2)
	if r.mean > 0.005 || r.over2 > 10 || r.worst > 0.10 {
		t.Errorf("Choose %.2f%% behind on average (want ≤ 0.5%%), %d rows over 2%% (want ≤ 10), %.0f%% at worst (want ≤ 10%%)",
			100*r.mean, r.over2, 100*r.worst)
	}
}

// benchReplay is how a planner's plans fared on the rows of a bench-candidates
// file: the rows judged (its plan among those timed), how far behind the
// fastest timed on average and at worst, and the rows more than 2% behind.
type benchReplay struct {
	judged, over2 int
	mean, worst   float64
}

// replayBench replays rows against plan, the planner's plan of a row (its
// String the name bench timed it under), logging the plans not timed and
// those more than 2% behind.
func replayBench(t *testing.T, rows []benchRow, plan func(benchRow) (fmt.Stringer, error)) benchReplay {
	t.Helper()
	var out benchReplay
	var sum float64
	for _, r := range rows {
		p, err := plan(r)
		if err != nil {
			t.Fatalf("%dx%d m = %d: %v", r.n, r.k, r.m, err)
		}
		us, ok := r.us[p.String()]
		if !ok || us <= 0 {
			t.Logf("%dx%d m = %d: %v was not timed", r.n, r.k, r.m, p)
			continue
		}
		out.judged++
		slow := us/r.best - 1
		sum += slow
		out.worst = max(out.worst, slow)
		if slow > 0.02 {
			out.over2++
			t.Logf("%dx%d m = %d: %v %.1f µs, the fastest %.1f (+%.0f%%)", r.n, r.k, r.m, p, us, r.best, 100*slow)
		}
	}
	if out.judged > 0 {
		out.mean = sum / float64(out.judged)
	}
	return out
}

// TestChoose checks the decode kernel's launch plans, Choose's and
// every candidate's, for the invariants the kernel relies on: enough token
// tiles, slices that cover k with none empty, shared memory within the
// limit, a valid grid, the forced options.
func TestChoose(t *testing.T) {
	// Shared-memory limits of devices Choose must serve.

	a100Limits := Limits{SMs: 108, SharedPerBlock: 166912, SharedPerSM: 167936}
	sm86Limits := Limits{SMs: 46, SharedPerBlock: 101376, SharedPerSM: 102400}
	h100WG := h100Limits()
	h100WG.Warpgroup = true
	for _, c := range []struct {
		m, n, k int
		lim     Limits
		o       Options
	}{
		{1, 32, 64, h100Limits(), Options{}},
		{64, 32, 64, h100Limits(), Options{}},
		{9, 96, 192, h100Limits(), Options{Warps: 4, Slices: 2}},
		{33, 288, 320, h100Limits(), Options{ChunksPerStage: 2, Warps: 1, Slices: 5}},
		{17, 288, 320, h100Limits(), Options{ChunksPerStage: 4, Warps: 6, Slices: 7}}, // 7 slices of 5 chunks: 5
		{1, 1024, 4096, h100Limits(), Options{}},
		{8, 14336, 4096, h100Limits(), Options{ChunksPerStage: 2}},
		{64, 14336, 4096, h100Limits(), Options{}},
		{64, 8192, 28672, h100Limits(), Options{ChunksPerStage: 2}},
		{16, 28672, 8192, a100Limits, Options{}},
		{64, 4096, 14336, sm86Limits, Options{}},
		{3, 4096, 1 << 24, h100Limits(), Options{}},
		{64, 14336, 4096, h100Limits(), Options{Window: 1}},
		{64, 4096, 14336, h100Limits(), Options{Window: -1}},
		{32, 288, 640, h100Limits(), Options{ChunksPerStage: 4, Warps: 3, Slices: 1, Window: 1}},
		{64, 8192, 28672, a100Limits, Options{}},
		{1, 4096, 4096, h100Limits(), Options{WarpsPerRowBlock: 4}},
		{1, 64, 4096, h100Limits(), Options{ChunksPerStage: 2, Warps: 8, WarpsPerRowBlock: 8, Window: 1}},
		{48, 1024, 4096, h100Limits(), Options{Warps: 6, WarpsPerRowBlock: 2}},
		{16, 4096, 14336, sm86Limits, Options{WarpsPerRowBlock: 2, Window: 1}},
		{1, 4096, 4096, h100WG, Options{}},
		{16, 14336, 4096, h100WG, Options{Warpgroup: 1}},
		{64, 14336, 4096, h100WG, Options{Warpgroup: 1}},
		{64, 1024, 4096, h100WG, Options{Warpgroup: 1, Warps: 4}},
		{33, 288, 320, h100WG, Options{Warpgroup: 1, ChunksPerStage: 4, Slices: 1}}, // 5 chunks, a buffer of 8
		{5, 96, 64 * 40, h100WG, Options{Warpgroup: 1, Window: 1, WarpsPerRowBlock: 1}},
		{8, 14336, 4096, h100WG, Options{Warpgroup: -1}},
		{64, 8192, 28672, h100WG, Options{}},
		{64, 1024, 4096, h100WG, Options{Cooperative: 1}},
		{33, 288, 1600, h100WG, Options{Cooperative: 1, ChunksPerStage: 2, Slices: 3}},
		{32, 1024, 8192, h100WG, Options{Cooperative: -1}},
		{64, 1024, 4096, h100WG, Options{TokenTiles: 2, ChunksPerStage: 4, Slices: 4}},
		{47, 4096, 4096, h100WG, Options{TokenTiles: 4}},
		{33, 288, 320, h100WG, Options{TokenTiles: 1, Slices: 2}},
		{9, 96, 1600, h100WG, Options{TokenTiles: 1, Window: 1, Slices: 1}},
		{8, 96, 192, h100WG, Options{TokenTiles: 1}},  // one group: no groups
		{16, 96, 192, h100WG, Options{TokenTiles: 4}}, // fewer tokens than the tiles hold
		{64, 4096, 4096, h100WG, Options{TokenTiles: 4, Cluster: -1}},
		{20, 1024, 8192, h100WG, Options{TokenTiles: 2, Slices: 8}},
		{16, 4096, 4096, h100WG, Options{Rows: 64}},
		{16, 4096, 4096, h100WG, Options{Rows: 128, Slices: 2}},
		{1, 8192, 8192, h100WG, Options{Pair: 1}},
		{16, 8192, 8192, h100WG, Options{Pair: -1, Slices: 2}},
		{64, 4096, 4096, h100WG, Options{Rows: 64, Pair: 1, ChunksPerStage: 2}},
		{37, 96, 1600, h100WG, Options{Rows: 64, Pair: 1, Window: 1}},
		{1, 1024, 8192, h100WG, Options{}}, // the hybrid's pair (hybridPlan)
		{8, 1024, 4096, h100WG, Options{}},
		{5, 96, 1600, h100WG, Options{Rows: 32}},
		{1, 96, 1600, h100WG, Options{Rows: 32, Pair: -1, Slices: 2}},
		{17, 288, 1600, h100WG, Options{Rows: 32, ChunksPerStage: 2, Window: 1}},
		{16, 1024, 8192, h100WG, Options{Rows: 32, Window: 1}},
	} {
		p, err := Choose(c.m, c.n, c.k, c.lim, c.o)
		if err != nil {
			t.Errorf("%+v: %v", c, err)
			continue
		}
		ps, err := Candidates(c.m, c.n, c.k, c.lim, c.o, MaxCandidates)
		if err != nil || len(ps) == 0 || ps[0] != p {
			t.Errorf("%+v: candidates %v, %v; Choose %v", c, ps, err, p)
			continue
		}
		for _, p := range ps {
			chunks := c.k / ChunkColumns
			switch {
			case p.TokenTiles != 1 && p.TokenTiles != 2 && p.TokenTiles != 4 && p.TokenTiles != 8,
				p.TokenGroups == 0 && (8*p.TokenTiles < c.m || p.TokenTiles > 1 && 4*p.TokenTiles >= c.m),
				p.TokenGroups != 0 && (p.TokenGroups < 2 || 8*p.TokenTiles*p.TokenGroups < c.m || 8*p.TokenTiles*(p.TokenGroups-1) >= c.m),
				p.TokenGroups != 0 && (!p.Warpgroup || p.Cooperative || c.o.TokenTiles != 0 && p.TokenTiles != c.o.TokenTiles),
				c.o.TokenTiles != 0 && p.TokenGroups == 0 && 8*c.o.TokenTiles < c.m:
				t.Errorf("%+v: %d tiles in %d groups for m = %d", c, p.TokenTiles, p.TokenGroups, c.m)
			case c.o.ChunksPerStage != 0 && p.ChunksPerStage != c.o.ChunksPerStage || p.ChunksPerStage != 2 && p.ChunksPerStage != 4:
				t.Errorf("%+v: %d chunks per stage", c, p.ChunksPerStage)
			case p.Warps < 1 || p.Warps > maxWarps || c.o.Warps != 0 && p.Warps != c.o.Warps:
				t.Errorf("%+v: %d warps", c, p.Warps)
			case p.WarpsPerRowBlock != 1 && p.WarpsPerRowBlock != 2 && p.WarpsPerRowBlock != 4 && p.WarpsPerRowBlock != 8, p.Warps%p.WarpsPerRowBlock != 0, c.o.WarpsPerRowBlock != 0 && p.WarpsPerRowBlock != c.o.WarpsPerRowBlock:
				t.Errorf("%+v: %d warps per row block of %d", c, p.WarpsPerRowBlock, p.Warps)
			case p.ChunksPerSlice < 1 || p.Slices < 1 || p.Slices*p.ChunksPerSlice < chunks || (p.Slices-1)*p.ChunksPerSlice >= chunks,
				p.ChunksPerSlice != ceilDiv(chunks, p.Slices): // the kernel derives cps from the grid
				t.Errorf("%+v: %d slices of %d chunks for %d chunks", c, p.Slices, p.ChunksPerSlice, chunks)
			case p.Slices > maxGridY || c.o.Slices != 0 && p.Slices > c.o.Slices:
				t.Errorf("%+v: %d slices", c, p.Slices)
			case p.SharedBytes != p.sharedBytes(c.m) || p.SharedBytes > c.lim.SharedPerBlock,
				p.Warpgroup && p.RowBlocks != 1 && p.SharedBytes != sharedWarpgroup(p.TokenTiles, p.ChunksPerStage, p.ChunksPerSlice, p.WindowChunks, p.RowBlocks, p.Pair),
				p.RowBlocks == 1 && p.SharedBytes != sharedHybrid(c.m, p.TokenTiles, p.ChunksPerStage, p.ChunksPerSlice, p.WindowChunks, p.Pair),
				!p.Warpgroup && p.SharedBytes != sharedMMA(c.m, p.ChunksPerStage, p.Warps, p.ChunksPerSlice, p.WindowChunks):
				t.Errorf("%+v: %d bytes of shared memory", c, p.SharedBytes)
			case p.Warpgroup && (!c.lim.Warpgroup || c.o.Warpgroup == -1 || p.Warps != warpgroupWarps || p.WarpsPerRowBlock != 1 || p.threads() != 160),
				!p.Warpgroup && (c.o.Warpgroup == 1 || p.threads() != 32*p.Warps):
				t.Errorf("%+v: warpgroup form %v with %d warps of %d per row block, %d threads", c, p.Warpgroup, p.Warps, p.WarpsPerRowBlock, p.threads())
			case p.WindowChunks != 0 && (p.WindowChunks%(p.WarpsPerRowBlock*p.ChunksPerStage) != 0 || p.WindowChunks < (ringDepth(p.ChunksPerStage)-1)*p.WarpsPerRowBlock*p.ChunksPerStage || p.WindowChunks >= p.ChunksPerSlice),
				p.RowBlocks == 1 && p.WindowChunks%(warpgroupWarps*p.ChunksPerStage) != 0, // the hybrid's windows hold whole rounds
				c.o.Window == 1 && p.WindowChunks == 0, c.o.Window == -1 && p.WindowChunks != 0:
				t.Errorf("%+v: windows of %d chunks, %d per slice", c, p.WindowChunks, p.ChunksPerSlice)
			case p.Cooperative && (!p.Warpgroup || p.Slices < 2 || c.m < CooperativeMinTokens || c.o.Cooperative == -1 ||
				int(p.grid(c.n)[0]*p.grid(c.n)[1]) > c.lim.SMs), c.o.Cooperative == 1 && !p.Cooperative:
				// A cooperative launch needs every CTA resident: one per SM.
				t.Errorf("%+v: cooperative %v with %d slices, grid %v", c, p.Cooperative, p.Slices, p.grid(c.n))
			case p.Cluster != 0 && (p.TokenGroups != 2 || p.Cluster != 2 || p.clusterDims() != [3]uint32{1, 1, 2}),
				p.Cluster == 0 && !p.Pair && (p.TokenGroups == 2 && c.o.Cluster != -1 || p.clusterDims() != [3]uint32{}):
				// Two token groups, and only two, launch as clusters of both.
				t.Errorf("%+v: clusters of %d for %d token groups", c, p.Cluster, p.TokenGroups)
			case p.Warpgroup && p.RowBlocks != 4 && p.RowBlocks != 2 && p.RowBlocks != 1, !p.Warpgroup && p.RowBlocks != 0,
				c.o.Rows == 64 && p.RowBlocks != 2, c.o.Rows == 128 && p.RowBlocks != 4, c.o.Rows == 32 && p.RowBlocks != 1,
				p.RowBlocks == 1 && (p.TokenGroups != 0 || p.Cooperative || p.family() != map[bool]string{false: "gemv_hy", true: "gemv_hy_pair"}[p.Pair]):
				t.Errorf("%+v: %d row blocks per CTA", c, p.RowBlocks)
			case p.Pair && (!p.Warpgroup || p.Slices != 2 || p.TokenGroups != 0 || p.Cooperative || p.Cluster != 0 || c.o.Pair == -1 ||
				p.clusterDims() != [3]uint32{1, 2, 1} || p.family() != map[int]string{4: "gemv_wg_pair", 2: "gemv_wg64_pair", 1: "gemv_hy_pair"}[p.RowBlocks]),
				!p.Pair && (c.o.Pair == 1 || p.Warpgroup && p.Slices == 2 && p.TokenGroups == 0 && !p.Cooperative && c.o.Pair != -1 &&
					withPair(p).sharedBytes(c.m) <= c.lim.SharedPerBlock):
				// Two slices of the warpgroup form are a pair where they fit.
				t.Errorf("%+v: pair %v with %d slices, %d groups, coop %v, clusters %v", c, p.Pair, p.Slices, p.TokenGroups,
					p.Cooperative, p.clusterDims())
			}
			rows := 32 * p.blocks() // weight rows of a CTA
			if g := p.grid(c.n); int(g[0])*rows < c.n || int(g[0]-1)*rows >= c.n || int(g[1]) != p.Slices ||
				int(g[2]) != max(1, p.TokenGroups) {
				t.Errorf("%+v: grid %v", c, g)
			}
		}
	}
	// Llama-3-8B gate_up on an H100: one slice of 4-warp CTAs (112 CTAs of
	// 128 rows, 20 SMs idle: faster than 2 slices on all 132), the
	// activations in windows; at m = 1 in 4-chunk stages, at m = 64 in
	// 2-chunk ones (the fastest plans of the sweep in testdata).
	// Llama-3-8B k_v at m = 16: 8 slices of 4-warp CTAs, 2 warps per row
	// block (128 CTAs; without shared row blocks it takes 16 slices).
	for _, c := range []struct {
		m    int
		want Plan
	}{
		{1, Plan{TokenTiles: 1, ChunksPerStage: 4, Warps: 4, WarpsPerRowBlock: 1, Slices: 1, ChunksPerSlice: 64, WindowChunks: 8, SharedBytes: 114752}},
		{64, Plan{TokenTiles: 8, ChunksPerStage: 2, Warps: 4, WarpsPerRowBlock: 1, Slices: 1, ChunksPerSlice: 64, WindowChunks: 6, SharedBytes: 175648}},
	} {
		if p, err := Choose(c.m, 14336, 4096, h100Limits(), Options{}); err != nil || p != c.want {
			t.Errorf("gate_up m=%d: %+v, %v", c.m, p, err)
		}
	}
	want := Plan{TokenTiles: 2, ChunksPerStage: 4, Warps: 4, WarpsPerRowBlock: 2, Slices: 8, ChunksPerSlice: 8, WindowChunks: 0, SharedBytes: 128272}
	if p, err := Choose(16, 1024, 4096, h100Limits(), Options{}); err != nil || p != want {
		t.Errorf("k_v m=16: %+v, %v", p, err)
	}
	// The split-K tail's batches follow reduce in kernels/cuda/gemv.cuh.
	for _, c := range []struct{ m, tiles, s, want int }{
		{1, 1, 1, 1}, {1, 1, 16, 1}, {3, 1, 17, 2}, {1, 1, 64, 4},
		{4, 1, 8, 1}, {8, 1, 16, 1}, {8, 1, 17, 2}, {16, 2, 8, 1}, {16, 2, 9, 2}, {32, 4, 8, 2}, {64, 8, 7, 4},
	} {
		if got := reduceBatches(c.m, c.tiles, c.s); got != c.want {
			t.Errorf("reduceBatches(%d, %d, %d) = %d, want %d", c.m, c.tiles, c.s, got, c.want)
		}
	}
	for _, c := range []struct {
		m, n, k int
		lim     Limits
		o       Options
	}{
		{0, 32, 64, h100Limits(), Options{}},
		{65, 32, 64, h100Limits(), Options{}},
		{1, 48, 64, h100Limits(), Options{}},
		{1, 32, 96, h100Limits(), Options{}},
		{1, 32, 64, h100Limits(), Options{Warps: 9}},
		{1, 32, 64, h100Limits(), Options{Warps: -1}},
		{1, 32, 64, h100Limits(), Options{Slices: -1}},
		{1, 32, 64, h100Limits(), Options{ChunksPerStage: 8}},
		{1, 32, 64, h100Limits(), Options{Window: 2}},
		{1, 32, 64, h100Limits(), Options{WarpsPerRowBlock: 3}},
		{1, 32, 64, h100Limits(), Options{WarpsPerRowBlock: 16}},
		{1, 32, 64, h100Limits(), Options{WarpsPerRowBlock: -2}},
		{1, 32, 64, h100Limits(), Options{Warps: 6, WarpsPerRowBlock: 4}},
		{1, 32, 64 * 24, h100Limits(), Options{WarpsPerRowBlock: 4, ChunksPerStage: 2, Window: 1, Slices: 1}}, // one window of 4·2·3 chunks
		{1, 32, 64 * 6, h100Limits(), Options{Window: 1, Slices: 1, ChunksPerStage: 2}},                       // one window: no windows
		{1, 32, 64, Limits{}, Options{}},
		{64, 32, 64, Limits{SMs: 1, SharedPerBlock: 20000, SharedPerSM: 20000}, Options{}},                                 // not one stage
		{64, 32, 4096, h100Limits(), Options{Slices: 1, Window: -1}},                                                       // 64 chunks of 64 tokens, whole
		{1, 32, 64 << 17, Limits{SMs: 1, SharedPerBlock: 28000, SharedPerSM: 28000}, Options{ChunksPerStage: 4, Warps: 1}}, // > maxGridY slices
		{1, 32, 64, h100Limits(), Options{Warpgroup: 1}},                                                                   // no sm_90a kernels
		{1, 32, 64, h100WG, Options{Warpgroup: 2}},
		{1, 32, 64, h100WG, Options{Warpgroup: -2}},
		{1, 32, 64, h100WG, Options{Warpgroup: 1, Warps: 8}},
		{1, 32, 64, h100WG, Options{Warpgroup: 1, WarpsPerRowBlock: 2}},
		{64, 32, 64, Limits{SMs: 1, SharedPerBlock: 80000, SharedPerSM: 80000, Warpgroup: true}, Options{Warpgroup: 1}}, // rings of 72 KB + 8 KB
		{64, 1024, 4096, h100Limits(), Options{Cooperative: 1}},                                                         // no sm_90a kernels
		{64, 1024, 4096, h100WG, Options{Cooperative: 1, Warpgroup: -1}},
		{64, 1024, 4096, h100WG, Options{Cooperative: 1, Slices: 1}},
		{32, 1024, 4096, h100WG, Options{Cooperative: 1}},
		{64, 1024, 4096, h100WG, Options{Cooperative: 2}},
		{64, 14336, 4096, h100WG, Options{Cooperative: 1, Slices: 2}}, // 224 CTAs on 132 SMs
		{64, 1024, 4096, h100WG, Options{TokenTiles: 3}},
		{64, 1024, 4096, h100WG, Options{TokenTiles: 4, Cluster: 1}}, // clusters are the planner's to give
		{64, 1024, 4096, h100WG, Options{Cluster: -1}},               // no token groups to launch plain
		{64, 1024, 4096, h100WG, Options{TokenTiles: 16}},
		{64, 1024, 4096, h100WG, Options{TokenTiles: -1}},
		{64, 1024, 4096, h100Limits(), Options{TokenTiles: 2}}, // no sm_90a kernels
		{64, 1024, 4096, h100WG, Options{TokenTiles: 2, Warpgroup: -1}},
		{64, 1024, 4096, h100WG, Options{TokenTiles: 2, Cooperative: 1}},
	} {
		if p, err := Choose(c.m, c.n, c.k, c.lim, c.o); !errors.Is(err, ErrNoPlan) {
			t.Errorf("%+v: plan %+v, error %v", c, p, err)
		}
	}
}

// withPair returns p summed as a pair.
func withPair(p Plan) Plan {
	p.Pair = true
	return p
}

// modelShape is a projection shape of a model.
type modelShape struct {
	model, proj string
	n, k        int
}

// sweepShapes returns the shapes the planner's sweeps time: every Llama-3
// projection shape.
func sweepShapes() []modelShape {
	return []modelShape{
		{"llama3-8b", "q_o", 4096, 4096},
		{"llama3-8b", "k_v", 1024, 4096},
		{"llama3-8b", "gate_up", 14336, 4096},
		{"llama3-8b", "down", 4096, 14336},
		{"llama3-70b", "gate_up", 28672, 8192},
		{"llama3-70b", "down", 8192, 28672},
		{"llama3-70b", "q_o", 8192, 8192},
		{"llama3-70b", "k_v", 1024, 8192},
	}
}
