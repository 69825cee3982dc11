package kernels

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/cuda"
)

// TestPlanGemv checks the decode kernel's launch plans, planGemv's and
// every candidate's, for the invariants the kernel relies on: enough token
// tiles, slices that cover k with none empty, shared memory within the
// limit, a valid grid, the forced options.
func TestPlanGemv(t *testing.T) {
	// Shared-memory limits of devices planGemv must serve.

	a100Limits := gemvLimits{sms: 108, smem: 166912, perSM: 167936}
	sm86Limits := gemvLimits{sms: 46, smem: 101376, perSM: 102400}
	h100WG := h100Limits
	h100WG.wg = true
	for _, c := range []struct {
		m, n, k int
		lim     gemvLimits
		o       gemvOptions
	}{
		{1, 32, 64, h100Limits, gemvOptions{}},
		{64, 32, 64, h100Limits, gemvOptions{}},
		{9, 96, 192, h100Limits, gemvOptions{warps: 4, splits: 2}},
		{33, 288, 320, h100Limits, gemvOptions{sc: 2, warps: 1, splits: 5}},
		{17, 288, 320, h100Limits, gemvOptions{sc: 4, warps: 6, splits: 7}}, // 7 slices of 5 chunks: 5
		{1, 1024, 4096, h100Limits, gemvOptions{}},
		{8, 14336, 4096, h100Limits, gemvOptions{sc: 2}},
		{64, 14336, 4096, h100Limits, gemvOptions{}},
		{64, 8192, 28672, h100Limits, gemvOptions{sc: 2}},
		{16, 28672, 8192, a100Limits, gemvOptions{}},
		{64, 4096, 14336, sm86Limits, gemvOptions{}},
		{3, 4096, 1 << 24, h100Limits, gemvOptions{}},
		{64, 14336, 4096, h100Limits, gemvOptions{window: 1}},
		{64, 4096, 14336, h100Limits, gemvOptions{window: -1}},
		{32, 288, 640, h100Limits, gemvOptions{sc: 4, warps: 3, splits: 1, window: 1}},
		{64, 8192, 28672, a100Limits, gemvOptions{}},
		{1, 4096, 4096, h100Limits, gemvOptions{kw: 4}},
		{1, 64, 4096, h100Limits, gemvOptions{sc: 2, warps: 8, kw: 8, window: 1}},
		{48, 1024, 4096, h100Limits, gemvOptions{warps: 6, kw: 2}},
		{16, 4096, 14336, sm86Limits, gemvOptions{kw: 2, window: 1}},
		{1, 4096, 4096, h100WG, gemvOptions{}},
		{16, 14336, 4096, h100WG, gemvOptions{wg: 1}},
		{64, 14336, 4096, h100WG, gemvOptions{wg: 1}},
		{64, 1024, 4096, h100WG, gemvOptions{wg: 1, warps: 4}},
		{33, 288, 320, h100WG, gemvOptions{wg: 1, sc: 4, splits: 1}}, // 5 chunks, a buffer of 8
		{5, 96, 64 * 40, h100WG, gemvOptions{wg: 1, window: 1, kw: 1}},
		{8, 14336, 4096, h100WG, gemvOptions{wg: -1}},
		{64, 8192, 28672, h100WG, gemvOptions{}},
		{64, 1024, 4096, h100WG, gemvOptions{coop: 1}},
		{33, 288, 1600, h100WG, gemvOptions{coop: 1, sc: 2, splits: 3}},
		{32, 1024, 8192, h100WG, gemvOptions{coop: -1}},
		{64, 1024, 4096, h100WG, gemvOptions{tiles: 2, sc: 4, splits: 4}},
		{47, 4096, 4096, h100WG, gemvOptions{tiles: 4}},
		{33, 288, 320, h100WG, gemvOptions{tiles: 1, splits: 2}},
		{9, 96, 1600, h100WG, gemvOptions{tiles: 1, window: 1, splits: 1}},
		{8, 96, 192, h100WG, gemvOptions{tiles: 1}},  // one group: no groups
		{16, 96, 192, h100WG, gemvOptions{tiles: 4}}, // fewer tokens than the tiles hold
		{64, 4096, 4096, h100WG, gemvOptions{tiles: 4, cluster: -1}},
		{20, 1024, 8192, h100WG, gemvOptions{tiles: 2, splits: 8}},
		{16, 4096, 4096, h100WG, gemvOptions{rows: 64}},
		{16, 4096, 4096, h100WG, gemvOptions{rows: 128, splits: 2}},
		{1, 8192, 8192, h100WG, gemvOptions{pair: 1}},
		{16, 8192, 8192, h100WG, gemvOptions{pair: -1, splits: 2}},
		{64, 4096, 4096, h100WG, gemvOptions{rows: 64, pair: 1, sc: 2}},
		{37, 96, 1600, h100WG, gemvOptions{rows: 64, pair: 1, window: 1}},
		{1, 1024, 8192, h100WG, gemvOptions{}}, // the hybrid's pair (hybridPlan)
		{8, 1024, 4096, h100WG, gemvOptions{}},
		{5, 96, 1600, h100WG, gemvOptions{rows: 32}},
		{1, 96, 1600, h100WG, gemvOptions{rows: 32, pair: -1, splits: 2}},
		{17, 288, 1600, h100WG, gemvOptions{rows: 32, sc: 2, window: 1}},
		{16, 1024, 8192, h100WG, gemvOptions{rows: 32, window: 1}},
	} {
		p, err := planGemv(c.m, c.n, c.k, c.lim, c.o)
		if err != nil {
			t.Errorf("%+v: %v", c, err)
			continue
		}
		ps, err := gemvCandidates(c.m, c.n, c.k, c.lim, c.o, gemvMaxCandidates)
		if err != nil || len(ps) == 0 || ps[0] != p {
			t.Errorf("%+v: candidates %v, %v; planGemv %v", c, ps, err, p)
			continue
		}
		for _, p := range ps {
			chunks := c.k / gemvChunk
			switch {
			case p.tiles != 1 && p.tiles != 2 && p.tiles != 4 && p.tiles != 8,
				p.groups == 0 && (8*p.tiles < c.m || p.tiles > 1 && 4*p.tiles >= c.m),
				p.groups != 0 && (p.groups < 2 || 8*p.tiles*p.groups < c.m || 8*p.tiles*(p.groups-1) >= c.m),
				p.groups != 0 && (!p.wg || p.coop || c.o.tiles != 0 && p.tiles != c.o.tiles),
				c.o.tiles != 0 && p.groups == 0 && 8*c.o.tiles < c.m:
				t.Errorf("%+v: %d tiles in %d groups for m = %d", c, p.tiles, p.groups, c.m)
			case c.o.sc != 0 && p.sc != c.o.sc || p.sc != 2 && p.sc != 4:
				t.Errorf("%+v: %d chunks per stage", c, p.sc)
			case p.warps < 1 || p.warps > gemvMaxWarps || c.o.warps != 0 && p.warps != c.o.warps:
				t.Errorf("%+v: %d warps", c, p.warps)
			case p.kw != 1 && p.kw != 2 && p.kw != 4 && p.kw != 8, p.warps%p.kw != 0, c.o.kw != 0 && p.kw != c.o.kw:
				t.Errorf("%+v: %d warps per row block of %d", c, p.kw, p.warps)
			case p.cps < 1 || p.splits < 1 || p.splits*p.cps < chunks || (p.splits-1)*p.cps >= chunks,
				p.cps != ceilDiv(chunks, p.splits): // the kernel derives cps from the grid
				t.Errorf("%+v: %d slices of %d chunks for %d chunks", c, p.splits, p.cps, chunks)
			case p.splits > maxGridY || c.o.splits != 0 && p.splits > c.o.splits:
				t.Errorf("%+v: %d slices", c, p.splits)
			case p.smem != p.sharedBytes(c.m) || p.smem > c.lim.smem,
				p.wg && p.rb != 1 && p.smem != gemvSmemWG(p.tiles, p.sc, p.cps, p.xw, p.rb, p.pair),
				p.rb == 1 && p.smem != gemvSmemHy(c.m, p.tiles, p.sc, p.cps, p.xw, p.pair),
				!p.wg && p.smem != gemvSmem(c.m, p.sc, p.warps, p.cps, p.xw):
				t.Errorf("%+v: %d bytes of shared memory", c, p.smem)
			case p.wg && (!c.lim.wg || c.o.wg == -1 || p.warps != gemvWgWarps || p.kw != 1 || p.threads() != 160),
				!p.wg && (c.o.wg == 1 || p.threads() != 32*p.warps):
				t.Errorf("%+v: warpgroup form %v with %d warps of %d per row block, %d threads", c, p.wg, p.warps, p.kw, p.threads())
			case p.xw != 0 && (p.xw%(p.kw*p.sc) != 0 || p.xw < (gemvDepth(p.sc)-1)*p.kw*p.sc || p.xw >= p.cps),
				p.rb == 1 && p.xw%(gemvWgWarps*p.sc) != 0, // the hybrid's windows hold whole rounds
				c.o.window == 1 && p.xw == 0, c.o.window == -1 && p.xw != 0:
				t.Errorf("%+v: windows of %d chunks, %d per slice", c, p.xw, p.cps)
			case p.coop && (!p.wg || p.splits < 2 || c.m < gemvCoopMinTokens || c.o.coop == -1 ||
				int(p.grid(c.n)[0]*p.grid(c.n)[1]) > c.lim.sms), c.o.coop == 1 && !p.coop:
				// A cooperative launch needs every CTA resident: one per SM.
				t.Errorf("%+v: cooperative %v with %d slices, grid %v", c, p.coop, p.splits, p.grid(c.n))
			case p.cluster != 0 && (p.groups != 2 || p.cluster != 2 || p.clusterDims() != cuda.Dim3{1, 1, 2}),
				p.cluster == 0 && !p.pair && (p.groups == 2 && c.o.cluster != -1 || p.clusterDims() != cuda.Dim3{}):
				// Two token groups, and only two, launch as clusters of both.
				t.Errorf("%+v: clusters of %d for %d token groups", c, p.cluster, p.groups)
			case p.wg && p.rb != 4 && p.rb != 2 && p.rb != 1, !p.wg && p.rb != 0,
				c.o.rows == 64 && p.rb != 2, c.o.rows == 128 && p.rb != 4, c.o.rows == 32 && p.rb != 1,
				p.rb == 1 && (p.groups != 0 || p.coop || gemvWGFamily(p.family()) != map[bool]string{false: "gemv_hy", true: "gemv_hy_pair"}[p.pair]):
				t.Errorf("%+v: %d row blocks per CTA", c, p.rb)
			case p.pair && (!p.wg || p.splits != 2 || p.groups != 0 || p.coop || p.cluster != 0 || c.o.pair == -1 ||
				p.clusterDims() != cuda.Dim3{1, 2, 1} || gemvWGFamily(p.family()) != map[int]string{4: "gemv_wg_pair", 2: "gemv_wg64_pair", 1: "gemv_hy_pair"}[p.rb]),
				!p.pair && (c.o.pair == 1 || p.wg && p.splits == 2 && p.groups == 0 && !p.coop && c.o.pair != -1 &&
					withPair(p).sharedBytes(c.m) <= c.lim.smem):
				// Two slices of the warpgroup form are a pair where they fit.
				t.Errorf("%+v: pair %v with %d slices, %d groups, coop %v, clusters %v", c, p.pair, p.splits, p.groups,
					p.coop, p.clusterDims())
			}
			rows := 32 * p.blocks() // weight rows of a CTA
			if g := p.grid(c.n); int(g[0])*rows < c.n || int(g[0]-1)*rows >= c.n || int(g[1]) != p.splits ||
				int(g[2]) != max(1, p.groups) {
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
		want gemvPlan
	}{
		{1, gemvPlan{tiles: 1, sc: 4, warps: 4, kw: 1, splits: 1, cps: 64, xw: 8, smem: 114752}},
		{64, gemvPlan{tiles: 8, sc: 2, warps: 4, kw: 1, splits: 1, cps: 64, xw: 6, smem: 175648}},
	} {
		if p, err := planGemv(c.m, 14336, 4096, h100Limits, gemvOptions{}); err != nil || p != c.want {
			t.Errorf("gate_up m=%d: %+v, %v", c.m, p, err)
		}
	}
	want := gemvPlan{tiles: 2, sc: 4, warps: 4, kw: 2, splits: 8, cps: 8, xw: 0, smem: 128272}
	if p, err := planGemv(16, 1024, 4096, h100Limits, gemvOptions{}); err != nil || p != want {
		t.Errorf("k_v m=16: %+v, %v", p, err)
	}
	// The split-K tail's batches follow reduce in cuda/gemv.cuh.
	for _, c := range []struct{ m, tiles, s, want int }{
		{1, 1, 1, 1}, {1, 1, 16, 1}, {3, 1, 17, 2}, {1, 1, 64, 4},
		{4, 1, 8, 1}, {8, 1, 16, 1}, {8, 1, 17, 2}, {16, 2, 8, 1}, {16, 2, 9, 2}, {32, 4, 8, 2}, {64, 8, 7, 4},
	} {
		if got := gemvReduceBatches(c.m, c.tiles, c.s); got != c.want {
			t.Errorf("gemvReduceBatches(%d, %d, %d) = %d, want %d", c.m, c.tiles, c.s, got, c.want)
		}
	}
	for _, c := range []struct {
		m, n, k int
		lim     gemvLimits
		o       gemvOptions
	}{
		{0, 32, 64, h100Limits, gemvOptions{}},
		{65, 32, 64, h100Limits, gemvOptions{}},
		{1, 48, 64, h100Limits, gemvOptions{}},
		{1, 32, 96, h100Limits, gemvOptions{}},
		{1, 32, 64, h100Limits, gemvOptions{warps: 9}},
		{1, 32, 64, h100Limits, gemvOptions{warps: -1}},
		{1, 32, 64, h100Limits, gemvOptions{splits: -1}},
		{1, 32, 64, h100Limits, gemvOptions{sc: 8}},
		{1, 32, 64, h100Limits, gemvOptions{window: 2}},
		{1, 32, 64, h100Limits, gemvOptions{kw: 3}},
		{1, 32, 64, h100Limits, gemvOptions{kw: 16}},
		{1, 32, 64, h100Limits, gemvOptions{kw: -2}},
		{1, 32, 64, h100Limits, gemvOptions{warps: 6, kw: 4}},
		{1, 32, 64 * 24, h100Limits, gemvOptions{kw: 4, sc: 2, window: 1, splits: 1}}, // one window of 4·2·3 chunks
		{1, 32, 64 * 6, h100Limits, gemvOptions{window: 1, splits: 1, sc: 2}},         // one window: no windows
		{1, 32, 64, gemvLimits{}, gemvOptions{}},
		{64, 32, 64, gemvLimits{sms: 1, smem: 20000, perSM: 20000}, gemvOptions{}},                     // not one stage
		{64, 32, 4096, h100Limits, gemvOptions{splits: 1, window: -1}},                                 // 64 chunks of 64 tokens, whole
		{1, 32, 64 << 17, gemvLimits{sms: 1, smem: 28000, perSM: 28000}, gemvOptions{sc: 4, warps: 1}}, // > maxGridY slices
		{1, 32, 64, h100Limits, gemvOptions{wg: 1}},                                                    // no sm_90a kernels
		{1, 32, 64, h100WG, gemvOptions{wg: 2}},
		{1, 32, 64, h100WG, gemvOptions{wg: -2}},
		{1, 32, 64, h100WG, gemvOptions{wg: 1, warps: 8}},
		{1, 32, 64, h100WG, gemvOptions{wg: 1, kw: 2}},
		{64, 32, 64, gemvLimits{sms: 1, smem: 80000, perSM: 80000, wg: true}, gemvOptions{wg: 1}}, // rings of 72 KB + 8 KB
		{64, 1024, 4096, h100Limits, gemvOptions{coop: 1}},                                        // no sm_90a kernels
		{64, 1024, 4096, h100WG, gemvOptions{coop: 1, wg: -1}},
		{64, 1024, 4096, h100WG, gemvOptions{coop: 1, splits: 1}},
		{32, 1024, 4096, h100WG, gemvOptions{coop: 1}},
		{64, 1024, 4096, h100WG, gemvOptions{coop: 2}},
		{64, 14336, 4096, h100WG, gemvOptions{coop: 1, splits: 2}}, // 224 CTAs on 132 SMs
		{64, 1024, 4096, h100WG, gemvOptions{tiles: 3}},
		{64, 1024, 4096, h100WG, gemvOptions{tiles: 4, cluster: 1}}, // clusters are the planner's to give
		{64, 1024, 4096, h100WG, gemvOptions{cluster: -1}},          // no token groups to launch plain
		{64, 1024, 4096, h100WG, gemvOptions{tiles: 16}},
		{64, 1024, 4096, h100WG, gemvOptions{tiles: -1}},
		{64, 1024, 4096, h100Limits, gemvOptions{tiles: 2}}, // no sm_90a kernels
		{64, 1024, 4096, h100WG, gemvOptions{tiles: 2, wg: -1}},
		{64, 1024, 4096, h100WG, gemvOptions{tiles: 2, coop: 1}},
	} {
		if p, err := planGemv(c.m, c.n, c.k, c.lim, c.o); !errors.Is(err, errGemvPlan) {
			t.Errorf("%+v: plan %+v, error %v", c, p, err)
		}
	}
}

func TestGPUCopyFrom(t *testing.T) {
	d := openGPU(t)
	src := []byte("2:4 weights stream at the copy bandwidth")
	s, err := d.Upload(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := alloc(t, d, len(src)+8)
	if err := dst.memset(0xee); err != nil {
		t.Fatal(err)
	}
	if err := dst.CopyFrom(s); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(src)+8)
	if err := dst.Download(got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:len(src)], src) || !bytes.Equal(got[len(src):], bytes.Repeat([]byte{0xee}, 8)) {
		t.Errorf("after CopyFrom: %q", got)
	}
	if err := s.CopyFrom(dst); !errors.Is(err, ErrArgument) {
		t.Errorf("CopyFrom into a smaller buffer: %v", err)
	}
	if err := dst.CopyFrom(dst); !errors.Is(err, ErrArgument) {
		t.Errorf("CopyFrom itself: %v", err)
	}
	if err := dst.CopyFrom(nil); !errors.Is(err, ErrArgument) {
		t.Errorf("CopyFrom(nil): %v", err)
	}
	var none *Buffer
	if err := none.CopyFrom(s); !errors.Is(err, ErrClosed) {
		t.Errorf("CopyFrom into nil: %v", err)
	}
	other := openGPU(t)
	o := alloc(t, other, len(src))
	if err := o.CopyFrom(s); !errors.Is(err, ErrArgument) {
		t.Errorf("CopyFrom across devices: %v", err)
	}
	freeAll(t, s)
	if err := dst.CopyFrom(s); !errors.Is(err, ErrClosed) {
		t.Errorf("CopyFrom a freed buffer: %v", err)
	}
}

// runSparse runs the sparse product with kernel choice c into a poisoned
// output and returns it. With SFSURGERY_TEST_NO_PAIR set it runs a plan
// with the pair sum as the same plan with tickets.
func runSparse(t testing.TB, d *Device, dt checkpoint.DType, w *weight, x *Buffer, m int, c sparseChoice) []float32 {
	t.Helper()
	if c.kernel == sparseGemv && os.Getenv("SFSURGERY_TEST_NO_PAIR") != "" {
		// For compute-sanitizer's racecheck, which cannot follow the pair
		// sum's st.async stores into another CTA's shared memory
		// (scripts/racecheck_pair.cu): the same plan with tickets.
		c.gemv.pair = -1
	}
	y := poisoned(t, d, m*w.n)
	defer freeAll(t, y)
	if err := d.sparse(y, x, w.dPack, w.dMeta, dt, m, w.n, w.k, c); err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return downloadF32(t, y, m*w.n)
}

// gemvChoices are decode-kernel plans that cover its cases: the default,
// 3-warp CTAs with 2-chunk stages and two slices (partial sums added), one
// warp per CTA with 4-chunk stages and as many slices as chunks (a stage
// mostly past the slice), two row blocks of two warps each per CTA over
// two slices (a last round one warp short when a slice has an odd number
// of stages), and eight warps on one row block (most of them without a
// stage when k is small). Where a slice holds more than one window of
// activations (k ≥ 17 chunks) it adds windows: 4-warp CTAs with 2-chunk
// stages and two slices, 3-warp CTAs with 4-chunk stages and one slice,
// and (up to m = 32, whose windows fit beside the rings) 4-warp CTAs of
// two row blocks of two warps with one slice, each with a last window
// shorter than the others. On a device with the warpgroup form (lim.wg)
// it adds that form: planGemv's choice, 2-chunk stages over two slices, a
// slice per chunk (three of each four chunks of the buffer past it), one
// slice staged whole (k = 5 chunks: a buffer rounded up to 8) and, where a
// slice holds more than one window, windows over one and two slices, and
// from 33 tokens the cooperative split-K sum (planGemv's, and 2-chunk
// stages over 3 slices), and from 9 tokens token groups (of 8 tokens over
// two slices, of 16 in 4-chunk stages: a last group short of tokens; two
// groups in clusters and without), and CTAs of 64 rows (a pair, two slices
// by tickets, one slice, and a pair in windows) and a pair of 128-row
// CTAs, and the hybrid's CTAs of 32 rows (planGemv's choice among them, a
// pair, two slices by tickets, three slices, one slice in windows of 16
// chunks where k holds more than one); those that fit in lim's shared
// memory.
func gemvChoices(m, k int, lim gemvLimits) []sparseChoice {
	c := []sparseChoice{
		{kernel: sparseGemv, gemv: gemvOptions{}},
		{kernel: sparseGemv, gemv: gemvOptions{sc: 2, warps: 3, splits: 2}},
		{kernel: sparseGemv, gemv: gemvOptions{sc: 4, warps: 1, splits: k / gemvChunk}},
		{kernel: sparseGemv, gemv: gemvOptions{sc: 2, warps: 4, kw: 2, splits: 2}},
		{kernel: sparseGemv, gemv: gemvOptions{sc: 2, warps: 8, kw: 8}},
	}
	if k/gemvChunk >= 2*gemvWindow(4, 1)+1 {
		c = append(c,
			sparseChoice{kernel: sparseGemv, gemv: gemvOptions{sc: 2, warps: 4, splits: 2, window: 1}},
			sparseChoice{kernel: sparseGemv, gemv: gemvOptions{sc: 4, warps: 3, splits: 1, window: 1}})
	}
	if k/gemvChunk >= 2*gemvWindow(2, 2)+1 && m <= 32 {
		c = append(c, sparseChoice{kernel: sparseGemv, gemv: gemvOptions{sc: 2, warps: 4, kw: 2, splits: 1, window: 1}})
	}
	if !lim.wg {
		return c
	}
	wg := []gemvOptions{{wg: 1}, {wg: 1, sc: 2, splits: 2}, {wg: 1, sc: 4, splits: k / gemvChunk},
		{wg: 1, sc: 4, splits: 1, window: -1}}
	if k/gemvChunk >= 2*gemvWindow(4, 1)+1 {
		wg = append(wg, gemvOptions{wg: 1, sc: 4, splits: 1, window: 1}, gemvOptions{wg: 1, sc: 2, splits: 2, window: 1})
	}
	wg = append(wg, gemvOptions{coop: 1}, gemvOptions{coop: 1, sc: 2, splits: 3},
		gemvOptions{tiles: 1, splits: 2}, gemvOptions{tiles: 2, sc: 4}, gemvOptions{tiles: 2, sc: 4, cluster: -1},
		gemvOptions{rows: 64, pair: 1}, gemvOptions{rows: 64, pair: -1, sc: 2, splits: 2},
		gemvOptions{rows: 64, sc: 4, splits: 1}, gemvOptions{rows: 128, pair: 1, sc: 2})
	if k/gemvChunk >= 2*gemvWindow(4, 1)+1 {
		wg = append(wg, gemvOptions{rows: 64, pair: 1, sc: 4, window: 1})
	}
	wg = append(wg, gemvOptions{rows: 32}, gemvOptions{rows: 32, pair: 1, sc: 2}, gemvOptions{rows: 32, pair: -1, splits: 2},
		gemvOptions{rows: 32, sc: 4, splits: 3}, gemvOptions{rows: 32, sc: 2, splits: 1, window: 1})
	for _, o := range wg {
		if _, err := planGemv(m, 32, k, lim, o); err == nil {
			c = append(c, sparseChoice{kernel: sparseGemv, gemv: o})
		}
	}
	return c
}

// withPair returns p summed as a pair.
func withPair(p gemvPlan) gemvPlan {
	p.pair = true
	return p
}

// TestGPUDecodeSmall checks the decode kernel on small shapes against a
// float64 reference over the whole output: every token tile count, m not
// a multiple of 8, a last CTA with idle warps (n = 288), one and several
// slices, one to eight warps per row block, activations staged whole and
// in windows (k = 1600: 25 chunks, also with idle warps, which must keep
// to the CTA's barriers). The sanitizer runs use it; its subtests, named
// form/dtype/shape (TestGPUDecodeSmall/wg/F16/n288k1600), split the
// choices by form (gemvChoiceForm), element type and shape, so that a
// sanitizer can take a part that fits its time (scripts/racecheck_all.sh
// runs racecheck over all of them as eight processes at once), and
// -test.short keeps two shapes and three token counts.
func TestGPUDecodeSmall(t *testing.T) {
	d := openGPU(t)
	shapes := []struct{ n, k int }{{32, 64}, {96, 192}, {288, 320}, {64, 640}, {288, 1600}}
	tokens := []int{1, 2, 5, 8, 9, 16, 17, 33, 64}
	if testing.Short() {
		shapes, tokens = []struct{ n, k int }{{96, 192}, {288, 1600}}, []int{1, 17, 64}
	}
	for _, form := range []string{"mma", "wg", "pair", "hy"} {
		for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
			for _, s := range shapes {
				t.Run(fmt.Sprintf("%s/%v/n%dk%d", form, dt, s.n, s.k), func(t *testing.T) {
					rng := testRand(t)
					w := newWeight(t, d, rng, dt, s.n, s.k)
					defer w.free(t)
					xs := randDense(rng, dt, gemvMaxTokens*s.k)
					x := upload16(t, d, xs)
					defer freeAll(t, x)
					cols := make([]int, s.n)
					for i := range cols {
						cols[i] = i
					}
					for _, m := range tokens {
						ref := refColumns(dt, xs, w.dense, m, s.k, cols)
						for _, c := range gemvChoices(m, s.k, d.fn.gemvLim) {
							if gemvChoiceForm(c.gemv) != form {
								continue
							}
							what := fmt.Sprintf("%v n%d k%d m%d %+v", dt, s.n, s.k, m, c)
							got := runSparse(t, d, dt, w, x, m, c)
							checkClose(t, what, s.k, got, ref)
							if testing.Verbose() {
								// A trail for the sanitizer runs, which take
								// seconds a launch.
								t.Logf("%s: checked", what)
							}
						}
					}
				})
			}
		}
	}
}

// gemvChoiceForm names the form a choice of gemvChoices forces: "hy" (the
// hybrid's 32-row CTAs), "pair" (64-row CTAs or the pair sum), "wg" (the
// rest of the warpgroup form) or "mma" (the mma.sp kernel, and planGemv's
// own choice).
func gemvChoiceForm(o gemvOptions) string {
	switch {
	case o.rows == 32:
		return "hy"
	case o.rows == 64 || o.pair == 1:
		return "pair"
	case o.wg == 1 || o.coop == 1 || o.tiles != 0 || o.rows != 0:
		return "wg"
	}
	return "mma"
}

// TestGPUDecodeDeterministic checks the split-K launches of the decode
// kernel: the same product twice gives the same bits, and a plan launched
// again and again stays right, also after other plans (a larger n, more
// slices of more tokens) have grown the workspace it shares. A ticket
// counter left non-zero would leave y unwritten (NaN) or summed early.
func TestGPUDecodeDeterministic(t *testing.T) {
	d := openGPU(t)
	rng := testRand(t)
	type run struct {
		w *weight
		m int
		c sparseChoice
	}
	const k = 640 // 10 chunks
	small := newWeight(t, d, rng, checkpoint.BF16, 288, k)
	defer small.free(t)
	large := newWeight(t, d, rng, checkpoint.BF16, 4096, 2*k)
	defer large.free(t)
	xs := randDense(rng, checkpoint.BF16, gemvMaxTokens*2*k)
	x := upload16(t, d, xs)
	defer freeAll(t, x)
	decode := func(o gemvOptions) sparseChoice { return sparseChoice{kernel: sparseGemv, gemv: o} }
	runs := []run{
		{small, 1, decode(gemvOptions{splits: 2})},
		{small, 7, decode(gemvOptions{sc: 2, warps: 3, splits: 5})},
		{small, 33, decode(gemvOptions{sc: 4, warps: 1, splits: k / gemvChunk})},
		{small, 9, decode(gemvOptions{sc: 2, warps: 4, kw: 2, splits: 2})}, // sums of two warps, then of two slices
		{large, 64, decode(gemvOptions{warps: 2, splits: 20})},             // grows the workspace
		{small, 1, decode(gemvOptions{splits: 2})},
		{large, 3, decode(gemvOptions{sc: 4, warps: 8, splits: 4})},
		{large, 64, decode(gemvOptions{sc: 2, warps: 4, splits: 2, window: 1})}, // windows of activations
		{large, 17, decode(gemvOptions{sc: 2, warps: 8, kw: 4, splits: 2})},
		{small, 7, decode(gemvOptions{sc: 2, warps: 3, splits: 5})},
		{small, 33, decode(gemvOptions{sc: 4, warps: 1, splits: k / gemvChunk})},
	}
	if d.fn.gemvLim.wg {
		runs = append(runs,
			run{large, 64, decode(gemvOptions{wg: 1, splits: 2})},
			run{small, 9, decode(gemvOptions{wg: 1, sc: 2, splits: 5})},
			run{small, 1, decode(gemvOptions{splits: 2})},
			run{large, 17, decode(gemvOptions{wg: 1, sc: 4, splits: 3})},
			run{large, 64, decode(gemvOptions{coop: 1, splits: 4})}, // cooperative sums, then tickets on the same counters
			run{small, 40, decode(gemvOptions{coop: 1, sc: 2, splits: 5})},
			run{large, 64, decode(gemvOptions{wg: 1, splits: 2})})
	}
	first := map[string][]float32{}
	for rep := range 3 {
		for _, r := range runs {
			name := fmt.Sprintf("n%d m%d %+v", r.w.n, r.m, r.c.gemv)
			if rep == 0 {
				if p, err := planGemv(r.m, r.w.n, r.w.k, d.fn.gemvLim, r.c.gemv); err != nil || p.splits < 2 {
					t.Fatalf("%s: plan %+v, %v: want several slices", name, p, err)
				}
			}
			got := runSparse(t, d, checkpoint.BF16, r.w, x, r.m, r.c)
			want, ok := first[name]
			if !ok {
				cols := make([]int, r.w.n)
				for i := range cols {
					cols[i] = i
				}
				checkClose(t, name, r.w.k, got, refColumns(checkpoint.BF16, xs, r.w.dense, r.m, r.w.k, cols))
				first[name] = got
				continue
			}
			if i := bitDiff(got, want); i >= 0 {
				t.Errorf("%s, call %d: y[%d] = %v, first call %v", name, rep+1, i, got[i], want[i])
			}
		}
	}
}

// TestGPUDecodeCoopFallback checks a cooperative plan whose CTAs do not all
// fit on the GPU at once (planned here for a device claiming far more SMs
// than it has, as on a shared or partitioned GPU): its launch falls back to
// the last slice's sum, with the same bits as the ticket plan, and the
// cached plan stops being cooperative.
func TestGPUDecodeCoopFallback(t *testing.T) {
	d := openGPU(t)
	if !d.fn.gemvLim.wg {
		t.Skip("no warpgroup form (sm_90a) on this device: no cooperative plans")
	}
	saved := d.fn.gemvLim
	d.fn.gemvLim.sms *= 100
	d.fn.gemvPlans = nil // plans made with the real limits
	defer func() {
		d.fn.gemvLim = saved
		d.fn.gemvPlans = nil
	}()
	rng := testRand(t)
	const m, n, k = 64, 14336, 4096 // 112 row groups × 4 slices: 448 CTAs, more than fit
	w := newWeight(t, d, rng, checkpoint.BF16, n, k)
	defer w.free(t)
	x := upload16(t, d, randDense(rng, checkpoint.BF16, m*k))
	defer freeAll(t, x)
	coopOpts := gemvOptions{coop: 1, splits: 4, sc: 2}
	if p, err := planGemv(m, n, k, d.fn.gemvLim, coopOpts); err != nil || !p.coop || int(p.grid(n)[0]*p.grid(n)[1]) <= saved.sms {
		t.Fatalf("plan %v, %v: want a cooperative plan of more than %d CTAs", p, err, saved.sms)
	}
	tickets := runSparse(t, d, checkpoint.BF16, w, x, m, sparseChoice{kernel: sparseGemv, gemv: gemvOptions{coop: -1, wg: 1, splits: 4, sc: 2}})
	checkFallback(t, d, w, x, m, coopOpts, tickets, nil, func(p gemvPlan) bool { return !p.coop })
}

// checkFallback runs the decode kernel with opts on w and x at m tokens,
// after alter (unless nil) has changed the plan cached for them into one
// the driver refuses, and checks that the run falls back: its result has
// the bits of want, and the plan cached for opts afterwards is one that
// fell accepts as the fallback.
func checkFallback(t *testing.T, d *Device, w *weight, x *Buffer, m int, opts gemvOptions, want []float32,
	alter func(*gemvPlan), fell func(gemvPlan) bool) {
	t.Helper()
	key := gemvKey{m, w.n, w.k, opts, 0}
	if alter != nil {
		p, ok := d.fn.gemvPlans[key]
		if !ok {
			t.Fatalf("no plan cached for %+v", key)
		}
		alter(&p)
		d.fn.gemvPlans[key] = p
	}
	got := runSparse(t, d, checkpoint.BF16, w, x, m, sparseChoice{kernel: sparseGemv, gemv: opts})
	if i := bitDiff(got, want); i >= 0 {
		t.Errorf("%+v: y[%d] = %v after the fallback, want %v", opts, i, got[i], want[i])
	}
	if p, ok := d.fn.gemvPlans[key]; !ok || !fell(p) {
		t.Errorf("%+v: cached plan %v (found %v): want the fallback", opts, p, ok)
	}
}

// TestGPUDecodeClusterFallback checks that a token-group plan whose
// cluster launch the driver refuses runs without clusters, with the same
// bits, and is cached that way: the cached plan is given clusters of 3,
// which its 2 groups cannot be split into.
func TestGPUDecodeClusterFallback(t *testing.T) {
	d := openGPU(t)
	if !d.fn.gemvLim.wg {
		t.Skip("no warpgroup form (sm_90a) on this device: no token groups")
	}
	rng := testRand(t)
	const m, n, k = 32, 1024, 4096
	w := newWeight(t, d, rng, checkpoint.BF16, n, k)
	defer w.free(t)
	x := upload16(t, d, randDense(rng, checkpoint.BF16, m*k))
	defer freeAll(t, x)
	opts := gemvOptions{tiles: 2, sc: 4, splits: 4}
	plain := runSparse(t, d, checkpoint.BF16, w, x, m, sparseChoice{kernel: sparseGemv, gemv: gemvOptions{tiles: 2, sc: 4, splits: 4, cluster: -1}})
	cl := runSparse(t, d, checkpoint.BF16, w, x, m, sparseChoice{kernel: sparseGemv, gemv: opts})
	key := gemvKey{m, n, k, opts, 0}
	p, ok := d.fn.gemvPlans[key]
	if !ok || p.cluster != 2 || p.groups != 2 {
		t.Fatalf("cached plan %v (found %v): want two token groups in clusters of 2", p, ok)
	}
	if i := bitDiff(cl, plain); i >= 0 {
		t.Errorf("y[%d] = %v in clusters, %v without", i, cl[i], plain[i])
	}
	checkFallback(t, d, w, x, m, opts, plain, func(p *gemvPlan) { p.cluster = 3 },
		func(p gemvPlan) bool { return p.cluster == 0 })
}

// TestGPUDecodePair checks the pair sum (two slices of the warpgroup form,
// the second's sums pushed into the first's shared memory): with CTAs of
// 64 and of 128 rows it gives the bits of the ticket sum over the same two
// slices, whose order of additions it copies, for token counts on both
// sides of reduce's two orders (M ≤ 3 and M ≥ 4), with idle row blocks
// (n = 96: a 64-row CTA with one), and both data types. Then a cached pair
// plan given three slices, whose clusters of two do not tile the grid, is
// refused by the driver and falls back to the ticket sum, with its bits,
// and the plan is cached without the pair.
func TestGPUDecodePair(t *testing.T) {
	d := openGPU(t)
	if !d.fn.gemvLim.wg {
		t.Skip("no warpgroup form (sm_90a) on this device: no pairs")
	}
	rng := testRand(t)
	for _, s := range []struct{ n, k int }{{96, 1600}, {1024, 4096}} {
		for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
			w := newWeight(t, d, rng, dt, s.n, s.k)
			for _, m := range []int{1, 3, 4, 16, 33, 64} {
				x := upload16(t, d, randDense(rng, dt, m*s.k))
				want := runSparse(t, d, dt, w, x, m, sparseChoice{kernel: sparseGemv,
					gemv: gemvOptions{rows: 128, pair: -1, splits: 2}})
				for _, o := range []gemvOptions{{rows: 128, pair: 1}, {rows: 64, pair: 1},
					{rows: 64, pair: -1, splits: 2}, {rows: 64, pair: 1, sc: 2, window: 1}} {
					if _, err := planGemv(m, s.n, s.k, d.fn.gemvLim, o); err != nil {
						continue // the windows need k of 17 chunks or more
					}
					got := runSparse(t, d, dt, w, x, m, sparseChoice{kernel: sparseGemv, gemv: o})
					if i := bitDiff(got, want); i >= 0 {
						t.Errorf("%v n%d k%d m%d %+v: y[%d] = %v, the ticket sum %v", dt, s.n, s.k, m, o, i, got[i], want[i])
					}
				}
				freeAll(t, x)
			}
			w.free(t)
		}
	}

	checkPairFallback(t, d, rng, 16, 4096, 4096, gemvOptions{rows: 64, pair: 1}, 2)
}

// checkPairFallback runs the pair plan of opts (CTAs of rb row blocks) on
// a BF16 n × k weight and m tokens, checks that it is cached as a pair of
// two slices, then gives the cached plan three slices, whose clusters of
// two do not tile the grid: the driver refuses the launch, and the run
// must fall back to the ticket sum with the bits of the same plan over
// three slices, and cache the plan without the pair.
func checkPairFallback(t *testing.T, d *Device, rng *rand.Rand, m, n, k int, opts gemvOptions, rb int) {
	t.Helper()
	w := newWeight(t, d, rng, checkpoint.BF16, n, k)
	defer w.free(t)
	x := upload16(t, d, randDense(rng, checkpoint.BF16, m*k))
	defer freeAll(t, x)
	tickets := opts
	tickets.pair, tickets.splits = -1, 3
	three := runSparse(t, d, checkpoint.BF16, w, x, m, sparseChoice{kernel: sparseGemv, gemv: tickets})
	runSparse(t, d, checkpoint.BF16, w, x, m, sparseChoice{kernel: sparseGemv, gemv: opts})
	key := gemvKey{m, n, k, opts, 0}
	p, ok := d.fn.gemvPlans[key]
	if !ok || !p.pair || p.rb != rb || p.splits != 2 {
		t.Fatalf("cached plan %v (found %v): want a pair of two slices of %d row blocks", p, ok, rb)
	}
	// Three slices: the workspace already holds them (the plan above).
	checkFallback(t, d, w, x, m, opts, three, func(p *gemvPlan) { p.splits, p.cps = 3, ceilDiv(k/gemvChunk, 3) },
		func(p gemvPlan) bool { return !p.pair && p.rb == rb && p.clusterDims() == (cuda.Dim3{}) })
}

// TestGPUDecodeHybrid checks the hybrid (CTAs of one 32-row block, the
// warpgroup form's producer feeding four mma.sp consumer warps; sm_90a):
// its products and sums are those of the mma.sp kernel with four warps on
// one row block (kw = 4), bit for bit, over the same slices and stage
// size, staged whole and in windows, for one to three slices (two also
// as a pair), token counts on both sides of reduce's two orders and of
// the tiles, with idle and short stages (k = 1600: 25 chunks), and both
// data types. Then a cached hybrid pair given three slices, whose clusters
// of two do not tile the grid, falls back to the ticket sum, with its
// bits, and is cached without the pair.
func TestGPUDecodeHybrid(t *testing.T) {
	d := openGPU(t)
	if !d.fn.gemvLim.wg {
		t.Skip("no warpgroup form (sm_90a) on this device: no hybrid")
	}
	rng := testRand(t)
	compared := 0
	for _, s := range []struct{ n, k int }{{96, 1600}, {1024, 4096}, {288, 320}} {
		for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
			w := newWeight(t, d, rng, dt, s.n, s.k)
			for _, m := range []int{1, 3, 4, 8, 9, 16} {
				x := upload16(t, d, randDense(rng, dt, m*s.k))
				for _, o := range []gemvOptions{{rows: 32, splits: 1, sc: 4}, {rows: 32, splits: 1, sc: 2, window: 1},
					{rows: 32, pair: 1, splits: 2, sc: 4}, {rows: 32, pair: -1, splits: 2, sc: 2}, {rows: 32, splits: 3, sc: 4}} {
					p, err := planGemv(m, s.n, s.k, d.fn.gemvLim, o)
					if err != nil {
						continue // one window: k of 17 chunks or more a slice
					}
					if p.rb != 1 || p.pair != (o.pair == 1) {
						t.Fatalf("%+v: plan %v, want the hybrid", o, p)
					}
					ref := gemvOptions{wg: -1, warps: 4, kw: 4, splits: p.splits, sc: p.sc}
					if _, err := planGemv(m, s.n, s.k, d.fn.gemvLim, ref); err != nil {
						// Four rings of the mma.sp kernel and its windows
						// (twice the hybrid's) outgrow shared memory
						// (k = 4096, m = 16, sc = 4).
						t.Logf("%v n%d k%d m%d %v: no reference: %v", dt, s.n, s.k, m, p, err)
						continue
					}
					compared++
					want := runSparse(t, d, dt, w, x, m, sparseChoice{kernel: sparseGemv, gemv: ref})
					got := runSparse(t, d, dt, w, x, m, sparseChoice{kernel: sparseGemv, gemv: o})
					if i := bitDiff(got, want); i >= 0 {
						t.Errorf("%v n%d k%d m%d %v: y[%d] = %v, the mma.sp kernel's %v", dt, s.n, s.k, m, p, i, got[i], want[i])
					}
				}
				freeAll(t, x)
			}
			w.free(t)
		}
	}
	if compared < 150 {
		t.Errorf("%d hybrid plans compared with the mma.sp kernel, want at least 150", compared)
	}

	checkPairFallback(t, d, rng, 4, 1024, 4096, gemvOptions{rows: 32, pair: 1, sc: 4}, 1)
}

// TestGPUDecodeDegenerate runs the decode kernel on weights whose groups
// keep fewer than 2 values: all zero (y must be exactly zero, also when
// partial sums are added) and one value per group.
func TestGPUDecodeDegenerate(t *testing.T) {
	d := openGPU(t)
	rng := testRand(t)
	const m, n, k = 13, 96, 256
	for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
		xs := randDense(rng, dt, m*k)
		x := upload16(t, d, xs)
		for _, pos := range []int{-1, 0, 3, 4} { // -1: all zero; 4: the position varies per group
			dense := make([]uint16, n*k)
			if pos >= 0 {
				for g := 0; g < n*k/4; g++ {
					p := pos
					if pos == 4 {
						p = rng.IntN(4)
					}
					dense[4*g+p] = randValue(rng, dt)
				}
			}
			w := &weight{n: n, k: k, dense: dense}
			w.packed, w.meta = packAmpere(dense, n, k)
			w.dDense, w.dPack, w.dMeta = upload16(t, d, w.dense), upload16(t, d, w.packed), upload16(t, d, w.meta)
			ref := refColumns(dt, xs, dense, m, k, []int{0, 1, 16, 31, 63, n - 1})
			for _, c := range gemvChoices(m, k, d.fn.gemvLim) {
				got := runSparse(t, d, dt, w, x, m, c)
				if pos < 0 {
					for i, v := range got {
						if v != 0 {
							t.Fatalf("%v all-zero weight %+v: y[%d] = %v", dt, c, i, v)
						}
					}
				}
				checkClose(t, fmt.Sprintf("%v pos %d %+v", dt, pos, c), k,
					pickColumns(got, m, n, []int{0, 1, 16, 31, 63, n - 1}), ref)
			}
			w.free(t)
		}
		freeAll(t, x)
	}
}

// TestGPUDecodeCorruptMeta flips one metadata nibble of a row to another
// valid value and checks that the decode kernel's output changes in exactly
// that column: rows read with selector 0 (g, g+8) and 1 (16+g, 24+g), a
// random group of the row (so any chunk and slice), one and two slices
// and, at 40 tokens, the cooperative split-K sum.
func TestGPUDecodeCorruptMeta(t *testing.T) {
	d := openGPU(t)
	rng := testRand(t)
	const n, k = 64, 256
	dt := checkpoint.F16
	for _, m := range []int{1, 13, 40} {
		xs := randDense(rng, dt, m*k)
		x := upload16(t, d, xs)
		for _, row := range []int{5, 13, 21, 30, 40, 60} {
			w := newWeight(t, d, rng, dt, n, k)
			var full []int // groups of the row with two values
			for g := 0; g < k/4; g++ {
				cnt := 0
				for _, v := range w.dense[row*k+4*g : row*k+4*g+4] {
					if v != 0 {
						cnt++
					}
				}
				if cnt == 2 {
					full = append(full, g)
				}
			}
			if len(full) == 0 {
				t.Fatalf("row %d has no group with 2 values", row)
			}
			g := full[rng.IntN(len(full))]
			idx := metaIndex(row, g/4, n)
			shift := 4 * (g % 4)
			old := (w.meta[idx] >> shift) & 0xf
			nib := uint16(0x4)
			if old == 0x4 {
				nib = 0xe
			}
			bad := append([]uint16(nil), w.meta...)
			bad[idx] = bad[idx]&^(0xf<<shift) | nib<<shift
			good := w.dMeta
			choices := []sparseChoice{{kernel: sparseGemv, gemv: gemvOptions{splits: 1, wg: -1}},
				{kernel: sparseGemv, gemv: gemvOptions{sc: 2, splits: 2, wg: -1}}}
			if d.fn.gemvLim.wg {
				choices = append(choices, sparseChoice{kernel: sparseGemv, gemv: gemvOptions{splits: 1, wg: 1}},
					sparseChoice{kernel: sparseGemv, gemv: gemvOptions{sc: 2, splits: 2, wg: 1}})
				if m >= gemvCoopMinTokens {
					choices = append(choices, sparseChoice{kernel: sparseGemv, gemv: gemvOptions{sc: 2, splits: 2, coop: 1}})
				}
			}
			for _, c := range choices {
				w.dMeta = good
				want := runSparse(t, d, dt, w, x, m, c)
				w.dMeta = upload16(t, d, bad)
				got := runSparse(t, d, dt, w, x, m, c)
				freeAll(t, w.dMeta)
				for col := 0; col < n; col++ {
					rel, _ := diff(pickColumns(got, m, n, []int{col}), pickColumns(want, m, n, []int{col}))
					if col == row && rel <= tolerance(k) {
						t.Errorf("m=%d %+v row %d: nibble %#x→%#x in group %d not detected (relative error %.3g)",
							m, c, row, old, nib, g, rel)
					}
					if col != row && rel > tolerance(k) {
						t.Errorf("m=%d %+v row %d corrupted, but column %d differs too (relative error %.3g)",
							m, c, row, col, rel)
					}
				}
			}
			w.dMeta = good
			w.free(t)
		}
		freeAll(t, x)
	}
}

// llama3Shapes returns the projection shapes of Llama-3-8B and -70B that
// the decode kernel is measured on.
func llama3Shapes() []modelShape {
	return []modelShape{
		{"llama3-8b", "q_o", 4096, 4096},
		{"llama3-8b", "k_v", 1024, 4096},
		{"llama3-8b", "gate_up", 14336, 4096},
		{"llama3-8b", "down", 4096, 14336},
		{"llama3-70b", "gate_up", 28672, 8192},
		{"llama3-70b", "down", 8192, 28672},
	}
}

// decodeModelCases returns the token counts and shapes the decode tests
// run on the Llama-3 projections: all of them (counts not multiples of 8
// among them), or with -short the 8B shapes and four counts.
func decodeModelCases() ([]int, []modelShape) {
	if testing.Short() {
		return []int{1, 13, 32, 64}, llama3Shapes()[:4]
	}
	return []int{1, 3, 8, 13, 16, 32, 47, 64}, llama3Shapes()
}

// TestGPUDecodeModels runs the decode kernel on the Llama-3 projection
// shapes, BF16 and F16, at decode token counts (some not multiples of 8):
// against DenseMatmul and the general sparse kernel over the whole output,
// sampled columns against float64, and SparseMatmul bit for bit against
// the decode kernel's default plan (it must dispatch there at m ≤ 64, and
// the kernel is deterministic). -short keeps the 8B shapes and four counts.
func TestGPUDecodeModels(t *testing.T) {
	d := openGPU(t)
	rng := testRand(t)
	ms, shapes := decodeModelCases()
	for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
		for _, s := range shapes {
			t.Run(fmt.Sprintf("%v/%s/%s_%dx%d", dt, s.model, s.proj, s.n, s.k), func(t *testing.T) {
				w := newWeight(t, d, rng, dt, s.n, s.k)
				defer w.free(t)
				xs := randDense(rng, dt, gemvMaxTokens*s.k)
				x := upload16(t, d, xs)
				defer freeAll(t, x)
				cols := []int{0, 17, 31, s.n / 2, s.n - 1, rng.IntN(s.n)}
				for _, m := range ms {
					gemv := runSparse(t, d, dt, w, x, m, sparseChoice{kernel: sparseGemv, gemv: gemvOptions{}})
					general := runSparse(t, d, dt, w, x, m, sparseChoice{kernel: sparseGeneral})
					auto := runSparse(t, d, dt, w, x, m, sparseChoice{})
					yd := poisoned(t, d, m*s.n)
					if err := d.DenseMatmul(yd, x, w.dDense, dt, m, s.n, s.k); err != nil {
						t.Fatal(err)
					}
					dense := downloadF32(t, yd, m*s.n)
					freeAll(t, yd)
					checkClose(t, fmt.Sprintf("m=%d decode vs DenseMatmul", m), s.k, gemv, dense)
					checkClose(t, fmt.Sprintf("m=%d decode vs general", m), s.k, gemv, general)
					if i := bitDiff(auto, gemv); i >= 0 {
						t.Errorf("m=%d: SparseMatmul y[%d] = %v, decode kernel %v: not the decode kernel's plan",
							m, i, auto[i], gemv[i])
					}
					ref := refColumns(dt, xs, w.dense, m, s.k, cols)
					checkClose(t, fmt.Sprintf("m=%d decode vs float64", m), s.k, pickColumns(gemv, m, s.n, cols), ref)
					rel, maxAbs := diff(gemv, dense)
					t.Logf("m=%-2d decode vs dense: rel %.2e max %.2e", m, rel, maxAbs)
				}
			})
		}
	}
}

// TestGPUDecodeWarpgroup checks the decode kernel's warpgroup form on an
// H100 or H200 (it fails there when the sm_90a module did not load, and
// skips elsewhere): on the Llama-3 shapes, BF16 and F16, at decode token
// counts, planGemv's warpgroup plan bit for bit against the mma.sp kernel
// on the same plan (the same products in the same order) and against
// DenseMatmul. -short keeps the 8B shapes and four counts.
func TestGPUDecodeWarpgroup(t *testing.T) {
	d := openGPU(t)
	if info := d.Info(); info.Major != 9 || info.Minor != 0 {
		t.Skipf("sm_%d%d: the warpgroup form is for sm_90a", info.Major, info.Minor)
	}
	if !d.fn.gemvLim.wg {
		t.Fatalf("the warpgroup form is not loaded: %s", d.fn.wgNote)
	}
	if b := d.SparseBackend(); !strings.Contains(b, "wgmma.sp warpgroup form") {
		t.Errorf("SparseBackend() = %q: the warpgroup form is not named", b)
	}
	rng := testRand(t)
	ms, shapes := decodeModelCases()
	for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16} {
		for _, s := range shapes {
			w := newWeight(t, d, rng, dt, s.n, s.k)
			x := upload16(t, d, randDense(rng, dt, gemvMaxTokens*s.k))
			for _, m := range ms {
				name := fmt.Sprintf("%v %s %s m=%d", dt, s.model, s.proj, m)
				p, err := planGemv(m, s.n, s.k, d.fn.gemvLim, gemvOptions{wg: 1})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				same := gemvOptions{sc: p.sc, warps: p.warps, kw: p.kw, splits: p.splits, window: -1, wg: -1}
				if p.xw > 0 {
					same.window = 1
				}
				wg := runSparse(t, d, dt, w, x, m, sparseChoice{kernel: sparseGemv, gemv: gemvOptions{wg: 1}})
				plain := runSparse(t, d, dt, w, x, m, sparseChoice{kernel: sparseGemv, gemv: same})
				if i := bitDiff(wg, plain); i >= 0 {
					t.Errorf("%s, %v: y[%d] = %v, the mma.sp kernel's %v", name, p, i, wg[i], plain[i])
				}
				yd := poisoned(t, d, m*s.n)
				if err := d.DenseMatmul(yd, x, w.dDense, dt, m, s.n, s.k); err != nil {
					t.Fatal(err)
				}
				checkClose(t, name+" "+p.String()+" vs DenseMatmul", s.k, wg, downloadF32(t, yd, m*s.n))
				freeAll(t, yd)
			}
			w.free(t)
			freeAll(t, x)
		}
	}
}

// TestGPUDecodeCandidates runs every plan SparseCandidates offers through
// SparseMatmulCandidate, on the 8B shapes at a few token counts: each
// against DenseMatmul over the whole output, candidate 0 bit for bit
// against SparseMatmul, and the indices past the list refused.
func TestGPUDecodeCandidates(t *testing.T) {
	d := openGPU(t)
	rng := testRand(t)
	const dt = checkpoint.BF16
	for _, s := range llama3Shapes()[:4] {
		w := newWeight(t, d, rng, dt, s.n, s.k)
		x := upload16(t, d, randDense(rng, dt, gemvMaxTokens*s.k))
		for _, m := range []int{1, 13, 64} {
			names, err := d.SparseCandidates(dt, m, s.n, s.k)
			if err != nil || len(names) < 2 || len(names) > gemvMaxCandidates {
				t.Fatalf("%s m=%d: SparseCandidates %q, %v", s.proj, m, names, err)
			}
			yd := poisoned(t, d, m*s.n)
			if err := d.DenseMatmul(yd, x, w.dDense, dt, m, s.n, s.k); err != nil {
				t.Fatal(err)
			}
			dense := downloadF32(t, yd, m*s.n)
			auto := runSparse(t, d, dt, w, x, m, sparseChoice{})
			for i, name := range names {
				y := poisoned(t, d, m*s.n)
				if err := d.SparseMatmulCandidate(y, x, w.dPack, w.dMeta, dt, m, s.n, s.k, i); err != nil {
					t.Fatalf("%s m=%d candidate %d (%s): %v", s.proj, m, i, name, err)
				}
				got := downloadF32(t, y, m*s.n)
				freeAll(t, y)
				checkClose(t, fmt.Sprintf("%s m=%d candidate %d (%s) vs DenseMatmul", s.proj, m, i, name), s.k, got, dense)
				if j := bitDiff(got, auto); i == 0 && j >= 0 {
					t.Errorf("%s m=%d: candidate 0 (%s) is not SparseMatmul's plan: y[%d] = %v, SparseMatmul %v",
						s.proj, m, name, j, got[j], auto[j])
				}
			}
			if err := d.SparseMatmulCandidate(yd, x, w.dPack, w.dMeta, dt, m, s.n, s.k, len(names)); !errors.Is(err, ErrArgument) {
				t.Errorf("%s m=%d: candidate %d of %d: %v, want ErrArgument", s.proj, m, len(names), len(names), err)
			}
			freeAll(t, yd)
		}
		w.free(t)
		freeAll(t, x)
	}
	if names, err := d.SparseCandidates(dt, 65, 1024, 4096); err != nil || len(names) != 1 {
		t.Errorf("SparseCandidates at m = 65: %q, %v; want the tiled kernel alone", names, err)
	}
	if _, err := d.SparseCandidates(dt, 1, 1000, 4096); !errors.Is(err, ErrArgument) {
		t.Errorf("SparseCandidates with n = 1000: %v, want ErrArgument", err)
	}
}

// bitDiff returns the first index where a and b (of the same length)
// differ in their bits, or -1 when they are the same bits.
func bitDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}
