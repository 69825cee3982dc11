package kernels

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"

	"github.com/sfsurgery/sfsurgery/cuda"
)

// gemvModel is planGemv's cost model of the decode kernel: for each form
// (the mma.sp kernel, and on sm_90a the warpgroup form) the busiest SM's
// time, in units of the time an SM takes to stream one warp's chunk (32
// rows × 64 columns: 2304 bytes, about 100 ns at a 132nd of 3 TB/s), with
// constants fitted to that form's sweep, and the warpgroup form's costs
// scaled into the mma.sp form's by wgPercent.
type gemvModel struct {
	mma gemvCosts // the mma.sp form (cuda/gemv.cuh)
	wg  gemvCosts // the warpgroup form (cuda/gemv_wg.cuh)
	// wgPercent converts the warpgroup form's costs into the mma.sp
	// form's units, by token tiles (1, 2, 4, 8), fitted with wg so that
	// the plan of either form the model chooses is the fastest measured.
	wgPercent [4]int
}

// gemvCosts are one form's constants of gemvModel.
type gemvCosts struct {
	fixedWork int // each wave of CTAs an SM runs (launch, first stage's latency)
	// smPeak is the percentage of its share of the memory bandwidth (the
	// copy rate over the SMs) one SM can stream when others stream less
	// or idle.
	smPeak        int
	sc4Percent    int // the cost of 4-chunk stages (longer runs per row) against 2-chunk ones
	inFlight      int // weight bytes an SM must keep in flight to stream at its share
	residentWarps int // warps an SM must run to keep its schedulers issuing
	ctaCost       int // each CTA an SM runs, beyond its chunks (fill, drain, stores)
	// stageCost is the activations per unit ((m+1)·chunks token-chunks of
	// 128 bytes) staged before a CTA starts (a whole slice, or the first
	// window), and windowStage those queued while it streams (the later
	// windows), which cost only their instructions.
	stageCost   int
	windowStage int
	windowCost  int // each window after the first (a CTA barrier)
	sliceCost   int // each slice of a launch of several
	// tailWork is the split-K tail of a launch of several slices (the
	// ticket and the first batch of the last warp's sum: two L2 round
	// trips), tailBatch each further batch of loads (one round trip).
	tailWork  int
	tailBatch int
	// groupCost is each CTA whose row blocks are split over several warps
	// (kw > 1): the barrier of the block's warps and the sum of their
	// accumulators in shared memory.
	groupCost int
	// coopBatches is the batches of loads of a ticket sum (tailBatch
	// each after the first) that the warpgroup form's cooperative sum
	// (finish_coop in cuda/gemv_wg.cuh) costs as, whatever the slices.
	coopBatches int
	// pairWork is the warpgroup form's pair sum (two slices in clusters
	// of two, finish_pair in cuda/gemv_wg.cuh), in place of the tail and
	// the partial sums' bytes: one trip between the pair's SMs.
	pairWork int
}

// defaultGemvModel returns the model planGemv uses. The mma.sp form's
// constants were fitted (TestGemvModelFit with -fit=mma: coordinate
// descent from 40 starts) to an H100 sweep of six Llama-3 shapes; among
// the timed plans of each of the eight Llama-3 projection shapes and
// token counts 1-64 of the H100 sweep (25573 plans,
// testdata/gemv-sweep-h100.txt.gz), the one they rate cheapest is 1.4%
// slower than the fastest on average and 5.9% at worst
// (TestGemvModelReplay). The fit has thirteen constants and several sets
// score the same, so read them as a description of that GPU, not as
// physics: 4-chunk stages run better than the other terms say (sc4Percent
// 75), staging activations while the weights stream costs nothing
// (windowStage 1 << 20), and a split-K tail (tailWork 10 units of about
// 100 ns, tailBatch 16 per further batch of loads) costs less than its
// reputation.
//
// The warpgroup form is priced with the same constants scaled by
// wgPercent, measured on the H100 (the probe's ratios at 1-4
// tiles, and at 8 BenchmarkGPUDecode's best plans of each form on the 8B
// shapes), its cooperative sum as coopBatches batches of a ticket sum
// (measured: 0.6 µs slower than one batch, about a batch saved per
// batch beyond two). Over the form's H100 sweep (2355
// plans, gemv-sweep-wg-h100.txt.gz) that is 1.1% slower than the fastest
// on average and 9.9% at worst within the form (TestGemvModelReplayWG),
// 1.2% and 9.9% choosing between the forms (its "forms" case).
// Constants of its own fitted to that sweep (-fit=forms with
// SFSURGERY_FIT_WG=1) replay at 0.7% and 5.4%, but the sweep times plans
// one launch after another and bench times CUDA-graph replays: with them
// bench's 8 candidates missed the best plan of 8B q/o at M = 1 (9.7 →
// 10.3 µs) while gaining on 70B k/v, even on average; refitted to sweeps
// timed as graph replays (SFSURGERY_SWEEP_GRAPHS) they were still even
// on average, rows ±3-9% either way (docs/kernels.md).
func defaultGemvModel() gemvModel {
	mma := gemvCosts{
		fixedWork:     24,
		smPeak:        110,
		sc4Percent:    75,
		inFlight:      48 << 10,
		residentWarps: 4,
		ctaCost:       0,
		stageCost:     4,
		windowStage:   1 << 20,
		windowCost:    0,
		sliceCost:     0,
		tailWork:      10,
		tailBatch:     16,
		groupCost:     4,
	}
	// The warpgroup form: the mma.sp form's constants, its cooperative sum
	// measured (coopBatches), the scale measured (wgPercent).
	wg := mma
	wg.coopBatches = 2
	wg.pairWork = 1
	return gemvModel{mma: mma, wg: wg, wgPercent: [4]int{96, 92, 91, 96}}
}

// cost returns the model's time for the decode kernel's mma.sp form on m
// tokens and an n × k weight with stages of sc chunks, CTAs of w warps, kw
// of them per row block, slices of cps chunks and windows of xw chunks of
// activations (0: staged whole), on a device with limits lim (see
// gemvCosts.costSmem).
func (md gemvModel) cost(m, n, k int, lim gemvLimits, sc, w, kw, cps, xw int) int {
	return md.mma.costSmem(m, n, k, lim, sc, w, w/kw, kw, cps, xw, gemvSmem(m, sc, w, cps, xw), false)
}

// rate returns the model's time for plan p: cost, and for the warpgroup
// form its own constants' cost with its own shared memory (occupancy) and
// row blocks per CTA, its split-K sum priced as coopBatches batches when
// cooperative and as pairWork for a pair, scaled by wgPercent.
func (md gemvModel) rate(m, n, k int, lim gemvLimits, p gemvPlan) int {
	if !p.wg {
		return md.cost(m, n, k, lim, p.sc, p.warps, p.kw, p.cps, p.xw)
	}
	xw := p.xw
	switch {
	case p.rb == 2 && (xw == 0 || xw > gemvWindow(p.sc, 1)):
		// 64-row CTAs staged whole or in wide windows: priced as the
		// narrow window, as measured (gemvPairWindow).
		xw = min(gemvWindow(p.sc, 1), p.cps)
	case xw > gemvWindow(p.sc, 1):
		xw = gemvWindow(p.sc, 1) // gemvWGWindowSC2's windows, likewise
	}
	c := md.wg.costSmem(m, n, k, lim, p.sc, p.warps, p.blocks(), p.kw, p.cps, xw, p.smem, p.pair)
	if p.coop {
		c += md.wg.tailBatch * (md.wg.coopBatches - gemvReduceBatches(m, p.tiles, p.splits))
	}
	return ceilDiv(c*md.wgPercent[bits.TrailingZeros(uint(p.tiles))], 100)
}

// costSmem returns a form's time for a CTA of w warps owning `blocks` row
// blocks in smem bytes of shared memory:
//
//	ceil(CTAs / (SMs·occupancy))·fixedWork
//	  + max(all chunks / SMs, the busiest SM's chunks·100/smPeak)
//	  + ceil(CTAs/SMs)·(staging + ctaCost + windowCost·(windows-1) [+ groupCost]),
//
// scaled up when an SM runs fewer than residentWarps warps or they keep
// fewer than inFlight bytes in flight, and by sc4Percent for 4-chunk
// stages that a warp's share of a slice fills (at least 4·kw chunks: on
// shorter slices the stages run part empty; priced as full, TinyLlama's
// k/v, 256 × 2048 in 16 slices of 2 chunks, ran 16-20% behind bench's
// fastest plan); with several slices plus
// sliceCost per slice, the tail and the SM's share of the partial sums'
// bytes (written once, read once), or for a pair (two slices summed in a
// cluster's shared memory) pairWork.
func (md gemvCosts) costSmem(m, n, k int, lim gemvLimits, sc, w, blocks, kw, cps, xw, smem int, pair bool) int {
	tiles := gemvTiles(m)
	s := ceilDiv(k/gemvChunk, cps)
	ctas := ceilDiv(n/32, blocks) * s
	occ := max(1, lim.perSM/(smem+1024))
	perSM := ceilDiv(ctas, lim.sms) // CTAs the busiest SM runs
	staging, windows := ceilDiv((m+1)*cps, md.stageCost), 1
	if xw > 0 {
		windows = ceilDiv(cps, xw)
		staging = ceilDiv((m+1)*xw, md.stageCost) + ceilDiv((m+1)*(cps-xw), md.windowStage)
	}
	group := 0
	if kw > 1 {
		group = md.groupCost
	}
	stream := max(ceilDiv(n/32*(k/gemvChunk), lim.sms), ceilDiv(perSM*blocks*cps*100, md.smPeak))
	cost := ceilDiv(ctas, lim.sms*occ)*md.fixedWork + stream +
		perSM*(staging+md.ctaCost+md.windowCost*(windows-1)+group)
	resident := min(occ, perSM) * w
	inFlight := resident * (gemvDepth(sc) - 1) * gemvStageBytes(sc)
	cost = max(cost, ceilDiv(cost*md.inFlight, inFlight), ceilDiv(cost*md.residentWarps, resident))
	if sc == 4 && cps >= sc*kw {
		cost = ceilDiv(cost*md.sc4Percent, 100)
	}
	if pair {
		cost += md.pairWork
	} else if s > 1 {
		cost += md.sliceCost*s + md.tailWork + md.tailBatch*(gemvReduceBatches(m, tiles, s)-1) +
			ceilDiv(2*4*s*m*n, lim.sms*gemvChunkBytes)
	}
	return cost
}

// gemvOptions force parts of a decode-kernel plan (benchmarks and tests);
// zero fields are planGemv's choice.
type gemvOptions struct {
	sc     int // chunks per pipeline stage: 2 or 4
	warps  int // warps per CTA, 1 … gemvMaxWarps
	kw     int // warps per row block: 1, 2, 4 or 8, dividing warps
	splits int // slices of k, rounded so that none is empty
	// window stages a slice's activations in windows of gemvWindow(sc, kw)
	// chunks (1) or whole (-1).
	window int
	// wg forces the warpgroup form (1; sm_90a devices only) or the mma.sp
	// kernel (-1).
	wg int
	// coop forces the warpgroup form's cooperative split-K sum (1) or the
	// last slice's (-1).
	coop int
	// tiles splits the tokens into groups of 8·tiles (1, 2, 4 or 8), one
	// per grid.z, each CTA multiplying one group's (the warpgroup form
	// only); 0: every CTA all m tokens.
	tiles int
	// cluster -1 launches two token groups without clusters (see
	// gemvPlan.cluster).
	cluster int
	// rows forces the warpgroup form's CTAs of 128 or 64 weight rows
	// (gemvPlan.rb 4 or 2), or the hybrid's of 32 (rb 1).
	rows int
	// pair forces two slices summed as a pair (1; gemvPlan.pair) or the
	// last slice's sum (-1).
	pair int
}

// gemvPlan is one launch of the decode kernel.
type gemvPlan struct {
	tiles  int // 8-token tiles: 1, 2, 4 or 8
	sc     int // chunks per pipeline stage
	warps  int // warps per CTA
	kw     int // warps per 32-row block, taking its stages in turn
	splits int // slices of K (grid.y); more than one uses the workspace
	cps    int // 64-column chunks per slice, ceil(k/64 / splits) (the last may hold fewer)
	xw     int // chunks per window of activations, or 0: the slice's staged whole
	smem   int // dynamic shared memory in bytes
	// wg: the warpgroup form (cuda/gemv_wg.cuh: 4 consumer warps of one
	// row block each and a producer warp; sm_90a), else the mma.sp kernel.
	wg bool
	// coop: a cooperative launch of the warpgroup form whose slices share
	// the split-K sum (finish_coop), rather than leave it to the last;
	// several slices, at most one CTA per SM, gemvCoopMinTokens or more.
	coop bool
	// groups is the token groups of the warpgroup form (grid.z, 2 or
	// more; tiles is then a group's): each CTA multiplies 8·tiles of the
	// tokens and the weight is read once per group, from L2 after the
	// first, for fewer slices of k. 0: one group of all the tokens.
	groups int
	// rb is the warpgroup form's 32-row blocks per CTA: 4 (128 rows, a
	// consumer warp each) or 2 (64 rows, a warp per 16-row half, twice the
	// CTAs for the same slices); or 1, the hybrid (cuda/gemv_hy.cuh: one
	// row block, the warpgroup form's producer, four mma.sp consumer warps
	// taking its stages in turn; no token groups, no cooperative sum). 0
	// for the mma.sp kernel (warps/kw).
	rb int
	// pair: two slices of the warpgroup form summed as a pair (kernel_wg's
	// PAIR in cuda/gemv_wg.cuh): the two CTAs of a row group run as a cluster of
	// (1, 2, 1) and slice 1 pushes its sums into slice 0's shared memory,
	// with the ticket sum's bits; no token groups.
	pair bool
	// cluster is the CTAs per thread-block cluster along grid.z: 2 for two
	// token groups, so that the two CTAs of a row block and slice start
	// together on one GPC and the second finds the weight in that GPC's
	// half of L2 (H100: without clusters two groups
	// ran up to 10% slower or not, run to run, where the weight is larger
	// than L2). 0: no clusters (clusters of 4 one-CTA-per-SM CTAs do not
	// fit 132 SMs in one wave).
	cluster int
	// work is the Device's split-K workspace, the same for all its plans;
	// nil until gemvPlanFor caches the plan.
	work *gemvWork
}

// blocks returns the 32-row blocks of a CTA of p.
func (p gemvPlan) blocks() int {
	if p.wg && p.rb > 0 {
		return p.rb
	}
	return p.warps / p.kw
}

// grid returns the launch grid of p for n weight rows.
func (p gemvPlan) grid(n int) cuda.Dim3 {
	return cuda.Dim3{uint32(ceilDiv(n/32, p.blocks())), uint32(p.splits), uint32(max(1, p.groups))}
}

// clusterDims returns the cluster dimensions of p's launch: (1, 2, 1) for
// a pair, (1, 1, cluster) for token groups, or zero for none.
func (p gemvPlan) clusterDims() cuda.Dim3 {
	switch {
	case p.pair:
		return cuda.Dim3{1, 2, 1}
	case p.cluster > 0:
		return cuda.Dim3{1, 1, uint32(p.cluster)}
	}
	return cuda.Dim3{}
}

// gemvWGFamilies is the kernel families in the sm_90a module
// (cuda/sfsurgery_sm90a.cu), named by gemvWGFamily.
const gemvWGFamilies = 6

// gemvWGFamily returns the name of family f of the sm_90a module's
// kernels, each followed by _{bf16,f16}_t{1,2,4,8}_s{2,4}: the warpgroup
// form's CTAs of 128 rows (0), of 64 (1), each with the pair sum (2, 3),
// and the hybrid's CTAs of 32 rows (4), with the pair sum (5).
func gemvWGFamily(f int) string {
	return [gemvWGFamilies]string{"gemv_wg", "gemv_wg64", "gemv_wg_pair", "gemv_wg64_pair", "gemv_hy", "gemv_hy_pair"}[f]
}

// family returns the family (gemvWGFamily) of the kernels that run p (the
// warpgroup form or the hybrid).
func (p gemvPlan) family() int {
	if p.rb == 1 {
		if p.pair {
			return 5
		}
		return 4
	}
	f := 0
	if p.rb == 2 {
		f = 1
	}
	if p.pair {
		f += 2
	}
	return f
}

// workspace returns the u32 counters and the float partial sums p's
// launches for m tokens and n rows need in the split-K workspace (none
// for one slice): a counter per 32-row block (two for the cooperative
// sum) and the slices' sums of every token; with token groups, two
// counters per row block and the sums of 8·tiles tokens for each group. A
// pair uses none but keeps the ticket sum's, its fallback.
func (p gemvPlan) workspace(m, n int) (counters int, partials int64) {
	switch {
	case p.splits <= 1:
		return 0, 0
	case p.groups > 1:
		return p.groups * 2 * (n / 32), int64(p.groups) * int64(p.splits) * int64(8*p.tiles) * int64(n)
	case p.coop:
		return 2 * (n / 32), int64(p.splits) * int64(m) * int64(n)
	}
	return n / 32, int64(p.splits) * int64(m) * int64(n)
}

// threads returns the CTA size of p: its warps, and the warpgroup form's
// producer warp.
func (p gemvPlan) threads() int {
	if p.wg {
		return 32 * (p.warps + 1)
	}
	return 32 * p.warps
}

// gemvStageBytes and gemvDepth mirror Stage<SC> in cuda/gemv.cuh: the bytes
// of one warp's pipeline stage (32 rows of sc chunks, then the meta of 2·sc
// k-tiles) and the stages in its ring.
func gemvStageBytes(sc int) int { return 32*sc*64 + 2*sc*128 }
func gemvDepth(sc int) int {
	if sc == 2 {
		return 4
	}
	return 3
}

// gemvWindow returns the chunks of a window of activations for stages of
// sc chunks and kw warps per row block: the least the kernel allows, the
// rounds of kw stages its rings keep in flight (the next window is queued
// as one starts and must have landed when it is reached).
func gemvWindow(sc, kw int) int { return kw * sc * (gemvDepth(sc) - 1) }

// gemvSmem returns the dynamic shared memory of a CTA for m tokens: the
// warps' rings, then the activations of the m tokens and a row of zeros,
// over cps chunks (xw = 0) or in two windows of xw chunks.
func gemvSmem(m, sc, warps, cps, xw int) int {
	ring := warps * gemvDepth(sc) * gemvStageBytes(sc)
	if xw > 0 {
		return ring + 2*4*(m+1)*(xw*gemvChunkWords+gemvPadWords)
	}
	return ring + 4*(m+1)*(cps*gemvChunkWords+gemvPadWords)
}

// gemvWgWarps is the warpgroup form's consumer warps (kWgWarps in
// cuda/gemv_wg.cuh), one row block each.
const gemvWgWarps = 4

// gemvSmemWG returns the dynamic shared memory of a CTA of the warpgroup
// form (the entry points in cuda/sfsurgery_sm90a.cu) of rb row blocks:
// the rings (the same bytes whatever rb: ST = gemvDepth(sc)·4/rb stages of
// each block), 1024 bytes to align the activations, their buffer (the
// slice's cps chunks rounded up to whole stages) or two of xw chunks, each
// chunk 128 bytes for each of the 8·tiles tokens, then 2·ST mbarriers;
// for rb = 2 the halves' exchange, 512 bytes per tile and block; for a
// pair its buffers and mbarriers, 1024 bytes per tile and 8 per block.
func gemvSmemWG(tiles, sc, cps, xw, rb int, pair bool) int {
	if rb != 2 {
		rb = gemvWgWarps
	}
	ring := gemvWgWarps * gemvDepth(sc) * gemvStageBytes(sc)
	bufs, xcap := 1, ceilDiv(cps, sc)*sc
	if xw > 0 {
		bufs, xcap = 2, xw
	}
	b := ring + 1024 + bufs*xcap*8*tiles*128 + 2*gemvDepth(sc)*gemvWgWarps/rb*8
	if rb == 2 {
		b += rb * 512 * tiles
	}
	if pair {
		b += rb * (1024*tiles + 8)
	}
	return b
}

// gemvSmemHy returns the dynamic shared memory of a CTA of the hybrid
// (the gemv_hy entry points in cuda/sfsurgery_sm90a.cu) for m tokens: the
// warpgroup form's ring (ST = 4·gemvDepth(sc) stages of the one block),
// the activations of min(m, 8·tiles) tokens and a row of zeros over cps
// chunks (xw = 0) or in two windows of xw chunks, as gemvSmem lays them
// out, 2·ST mbarriers, warps 1-3's sums (1024 bytes per tile each), and
// for a pair its buffer and mbarrier.
func gemvSmemHy(m, tiles, sc, cps, xw int, pair bool) int {
	st := gemvWgWarps * gemvDepth(sc)
	rows := min(m, 8*tiles) + 1
	x := 4 * rows * (cps*gemvChunkWords + gemvPadWords)
	if xw > 0 {
		x = 2 * 4 * rows * (xw*gemvChunkWords + gemvPadWords)
	}
	b := st*gemvStageBytes(sc) + x + 16*st + (gemvWgWarps-1)*1024*tiles
	if pair {
		b += 1024*tiles + 8
	}
	return b
}

// gemvHyWindow is the window of activations, in chunks, of the hybrid's
// CTAs (a multiple of its rounds, 4·sc chunks, for sc of 2 and 4).
const gemvHyWindow = 16

// sharedBytes returns the dynamic shared memory of p for m tokens.
func (p gemvPlan) sharedBytes(m int) int {
	if p.wg && p.rb == 1 {
		return gemvSmemHy(m, p.tiles, p.sc, p.cps, p.xw, p.pair)
	}
	if p.wg {
		return gemvSmemWG(p.tiles, p.sc, p.cps, p.xw, p.rb, p.pair)
	}
	return gemvSmem(m, p.sc, p.warps, p.cps, p.xw)
}

// gemvTiles returns the 8-token tiles of the kernel for m tokens: the
// least power of two that holds them (the kernels have 1, 2, 4 and 8).
func gemvTiles(m int) int {
	tiles := 1
	for 8*tiles < m {
		tiles *= 2
	}
	return tiles
}

// errGemvPlan wraps the reasons planGemv refuses a shape.
var errGemvPlan = errors.New("no decode-kernel plan")

// gemvReduceLoads is the loads per lane that reduce in cuda/gemv.cuh
// keeps in flight from m = 4 (kLoads).
const gemvReduceLoads = 32

// gemvReduceBatches returns the batches of loads in which the last warp of
// a row block adds up s slices of partial sums for m tokens in tiles 8-token
// tiles: reduce in cuda/gemv.cuh keeps gemvReduceLoads loads per lane in
// flight over the tokens (2·tiles per lane) from m = 4; below, each of 4
// lane groups takes 4 of its slices per batch.
func gemvReduceBatches(m, tiles, s int) int {
	if m >= 4 {
		return ceilDiv(s, max(1, gemvReduceLoads/(2*tiles)))
	}
	return ceilDiv(ceilDiv(s, 4), 4)
}

// planGemv chooses the launch of the decode kernel for m tokens and an
// n × k weight on a device with limits lim; o forces parts of it.
//
// It tries both stage sizes, every CTA size (from gemvMinWarps warps),
// 1, 2, 4 or 8 warps per row block, every slice length, and the
// activations staged whole (every slice length that fits in shared
// memory) or in windows (any slice length), each also in the warpgroup
// form where the device has it (4 warps, one row block each), and keeps
// the one of least cost under defaultGemvModel. Ties go to fewer slices,
// then to larger CTAs (activations staged once for more rows), then to
// fewer warps per row block, then to 2-chunk stages, then to activations
// staged whole, then to the mma.sp form. Without options it runs instead,
// where there is one, the warpgroup form's pair of 64-row CTAs
// (gemvPairRows), which the model does not rate well and which measured
// faster; else from gemvGroupPickTokens tokens, where the device has room
// for two token groups in one wave with slices of at most
// gemvGroupPickChunks chunks, those, in clusters (groupPlans): the model
// has no term for them, and they were measured faster there on both an
// H100 and an H200. Where none of those leads, formLead may put a plan of
// the warpgroup form ahead of the model's own first.
// TestPlanGemvAgainstBench checks the choice against every candidate
// bench timed on an H100 and an H200.
func planGemv(m, n, k int, lim gemvLimits, o gemvOptions) (gemvPlan, error) {
	// The first of the full list: formLead chooses among its plans.
	ps, err := defaultGemvModel().candidates(m, n, k, lim, o, gemvMaxCandidates)
	if err != nil {
		return gemvPlan{}, err
	}
	return ps[0], nil
}

// gemvCandidates returns the count plans planGemv rates cheapest, best
// first (fewer when fewer fit): the candidates an engine times on its own
// GPU, whose model was fitted on another.
func gemvCandidates(m, n, k int, lim gemvLimits, o gemvOptions, count int) ([]gemvPlan, error) {
	return defaultGemvModel().candidates(m, n, k, lim, o, count)
}

// gemvCandidate returns the plan gemvCandidates lists cand-th of
// gemvMaxCandidates: the list SparseCandidates shows, whose entries
// SparseMatmulCandidate runs. (A shorter list is not a prefix of it: it
// holds fewer plans of each form.)
func gemvCandidate(m, n, k int, lim gemvLimits, o gemvOptions, cand int) (gemvPlan, error) {
	if cand < 0 || cand >= gemvMaxCandidates {
		return gemvPlan{}, fmt.Errorf("%w: candidate %d (there are at most %d)", errGemvPlan, cand, gemvMaxCandidates)
	}
	ps, err := gemvCandidates(m, n, k, lim, o, gemvMaxCandidates)
	if err != nil {
		return gemvPlan{}, err
	}
	if cand >= len(ps) {
		return gemvPlan{}, fmt.Errorf("%w: candidate %d of %d", errGemvPlan, cand, len(ps))
	}
	return ps[cand], nil
}

// rated is a plan and its cost under a model.
type rated struct {
	p    gemvPlan
	cost int
}

// before reports whether a comes before b in planGemv's order: cost, then
// the ties it documents.
func (a rated) before(b rated) bool {
	if a.cost != b.cost {
		return a.cost < b.cost
	}
	p, q := a.p, b.p
	switch {
	case p.splits != q.splits:
		return p.splits < q.splits
	case p.warps != q.warps:
		return p.warps > q.warps
	case p.kw != q.kw:
		return p.kw < q.kw
	case p.sc != q.sc:
		return p.sc < q.sc
	case p.xw != q.xw:
		return p.xw < q.xw
	case p.wg != q.wg:
		return !p.wg
	case p.rb != q.rb:
		return p.rb > q.rb
	}
	return !p.coop && q.coop
}

// compareRated orders plans as planGemv does (rated.before), for sorting.
func compareRated(a, b rated) int {
	if a.before(b) {
		return -1
	}
	if b.before(a) {
		return 1
	}
	return 0
}

// candidates returns the count plans of least cost under md, in
// planGemv's order (see planGemv for the search).
func (md gemvModel) candidates(m, n, k int, lim gemvLimits, o gemvOptions, count int) ([]gemvPlan, error) {
	if m < 1 || m > gemvMaxTokens || n < 32 || n%32 != 0 || k < gemvChunk || k%gemvChunk != 0 {
		return nil, fmt.Errorf("%w: m = %d, n = %d, k = %d", errGemvPlan, m, n, k)
	}
	if o.warps < 0 || o.warps > gemvMaxWarps || o.splits < 0 || o.window < -1 || o.window > 1 || o.wg < -1 || o.wg > 1 ||
		o.kw != 0 && (o.kw&(o.kw-1) != 0 || o.kw < 0 || o.kw > gemvMaxWarps || o.warps != 0 && o.warps%o.kw != 0) {
		return nil, fmt.Errorf("%w: %d warps, %d per row block, %d splits, window %d, warpgroup %d", errGemvPlan,
			o.warps, o.kw, o.splits, o.window, o.wg)
	}
	if o.coop < -1 || o.coop > 1 || o.coop == 1 && (o.wg == -1 || o.splits == 1 || m < gemvCoopMinTokens || !lim.wg) {
		return nil, fmt.Errorf("%w: the cooperative split-K sum is the warpgroup form's (sm_90a), for several slices "+
			"and at least %d tokens, not %d tokens with %+v", errGemvPlan, gemvCoopMinTokens, m, o)
	}
	if o.wg == 1 && !lim.wg {
		return nil, fmt.Errorf("%w: the warpgroup form needs an sm_90a device (H100, H200) and its PTX", errGemvPlan)
	}
	if o.tiles != 0 && (o.tiles < 0 || o.tiles > 8 || o.tiles&(o.tiles-1) != 0 || o.wg == -1 || !lim.wg || o.coop == 1) {
		return nil, fmt.Errorf("%w: token groups are the warpgroup form's (sm_90a), of 1, 2, 4 or 8 tiles, "+
			"without the cooperative sum, not %+v", errGemvPlan, o)
	}
	if o.rows != 0 && (o.rows != 32 && o.rows != 64 && o.rows != 128 || o.wg == -1 || !lim.wg) ||
		o.pair < -1 || o.pair > 1 || o.pair == 1 && (o.wg == -1 || !lim.wg || o.tiles != 0 || o.coop == 1 || o.splits != 0 && o.splits != 2) {
		return nil, fmt.Errorf("%w: CTAs of 32, 64 or 128 rows and the pair sum are the warpgroup form's (sm_90a), "+
			"a pair two slices without token groups, not %+v", errGemvPlan, o)
	}
	if o.rows == 32 && (o.tiles != 0 || o.coop == 1) {
		return nil, fmt.Errorf("%w: the hybrid's CTAs of 32 rows take no token groups and no cooperative sum, not %+v",
			errGemvPlan, o)
	}
	if o.cluster != 0 && (o.cluster != -1 || o.tiles == 0) {
		return nil, fmt.Errorf("%w: clusters can only be forbidden (-1), to token groups, not %+v", errGemvPlan, o)
	}
	if o.wg == 1 && (o.warps != 0 && o.warps != gemvWgWarps || o.kw > 1) {
		return nil, fmt.Errorf("%w: the warpgroup form has %d warps of one row block each, not %d of %d",
			errGemvPlan, gemvWgWarps, o.warps, o.kw)
	}
	if lim.sms < 1 || lim.smem < 1 || lim.perSM < lim.smem {
		return nil, fmt.Errorf("%w: device limits %+v", errGemvPlan, lim)
	}
	scs := []int{2, 4}
	switch o.sc {
	case 0:
	case 2, 4:
		scs = []int{o.sc}
	default:
		return nil, fmt.Errorf("%w: %d chunks per stage", errGemvPlan, o.sc)
	}
	var all []rated
	for _, sc := range scs {
		for w := gemvMaxWarps; w >= 1; w-- {
			if o.warps != 0 && w != o.warps || o.warps == 0 && w < gemvMinWarps {
				continue
			}
			for kw := 1; kw <= w; kw *= 2 {
				if w%kw != 0 || o.kw != 0 && kw != o.kw {
					continue
				}
				if o.wg != 1 && o.rows == 0 && o.pair != 1 {
					all = md.plansCTA(all, m, n, k, lim, o, sc, w, kw, false)
				}
				if o.wg != -1 && lim.wg && w == gemvWgWarps && kw == 1 {
					all = md.plansCTA(all, m, n, k, lim, o, sc, w, kw, true)
				}
			}
		}
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("%w: m = %d, k = %d with %+v does not fit in %d bytes of shared memory",
			errGemvPlan, m, k, o, lim.smem)
	}
	slices.SortFunc(all, compareRated)
	// Plans the model does not rank, without options: a pair of 64-row
	// CTAs first (planGemv's choice) where there is one (gemvPairRows);
	// then, from gemvGroupPickTokens, the token-group plan of two groups
	// in clusters; the other group plans last (a full list only).
	var lead, gp, late []gemvPlan
	if o == (gemvOptions{}) {
		if hy, ok := md.hybridPlan(m, n, k, lim); ok {
			if hybridLeads(m, hy) {
				lead = append(lead, hy)
			} else {
				late = append(late, hy)
			}
		}
		if i := slices.IndexFunc(all, func(r rated) bool { return r.p.rb == 2 }); i >= 0 {
			lead = append(lead, all[i].p)
			all = slices.Delete(all, i, i+1)
		}
		gp = md.groupPlans(m, n, k, lim)
		if i := groupPick(m, gp); i >= 0 {
			lead, gp = append(lead, gp[i]), slices.Delete(gp, i, i+1)
		}
		if count < gemvMaxCandidates {
			gp = nil
		}
	}
	// A hybrid that does not lead comes second, after the first plan;
	// where there is room for only one plan, that is the first.
	ranked := max(0, count-len(lead)-len(gp)-len(late))
	if len(late) > 0 && len(lead) == 0 && ranked == 0 {
		late, ranked = nil, max(0, count-len(gp))
	}
	// Where both forms are weighed, at most half the ranked plans (rounded
	// up) are of either, unless the other runs short: a list an engine
	// times on its GPU should hold the best plans of both, whatever the
	// model's guess of the warpgroup form's worth (wgPercent) is there.
	per := ranked
	if lim.wg && o.wg == 0 {
		per = ranked - ranked/2
	}
	chosen := make([]rated, 0, min(ranked, len(all)))
	taken := map[bool]int{}
	for _, r := range all {
		if len(chosen) < ranked && taken[r.p.wg] < per {
			taken[r.p.wg]++
			chosen = append(chosen, r)
		}
	}
	for _, r := range all { // one form ran short: the next best of the other
		if len(chosen) < ranked && taken[r.p.wg] >= per && !slices.Contains(chosen, r) {
			chosen = append(chosen, r)
		}
	}
	slices.SortStableFunc(chosen, compareRated)
	out := lead
	for _, r := range chosen {
		out = append(out, r.p)
	}
	if len(late) > 0 {
		out = slices.Insert(out, min(1, len(out)), late...)
	}
	out = append(out, gp...)
	if o == (gemvOptions{}) && len(lead) == 0 {
		out = formLead(m, n, lim, out)
	}
	return out, nil
}

// gemvPairLeadTokens is the most tokens at which formLead runs a pair of
// 128-row CTAs first.
const gemvPairLeadTokens = 32

// formLead returns out with, where the model's own first plan leads (no
// hybrid, 64-row pair or token-group plan does), one plan of the
// warpgroup form moved to the front: up to gemvPairLeadTokens tokens the
// first pair of 128-row CTAs whose grid is one wave; else, where the
// first plan is the mma.sp form and either the grid of one slice of
// 128-row CTAs is one wave or there are more than 32 tokens, the first
// warpgroup plan of one slice. The model was fitted to the eight Llama-3
// projection shapes, and ranks the mma.sp form first on shapes outside
// them where the warpgroup form is faster: bench's 8 candidates with
// their medians (H100, BF16; docs/kernels.md) put
// SparseMatmul's own plan 11-15% behind the fastest on Llama-3-8B's
// stacked qkv (6144 × 4096) at 1-4 tokens, 5-19% on 70B's (10240 × 8192)
// at 8-64, 7% on 8B's gate_up (28672 × 4096) at 64 and 8-20% on
// TinyLlama's stacked shapes and q/o. With this rule those rows take the
// plan that was fastest, and no row of the 168 measured (the eight
// shapes, both models' stacks, TinyLlama's, M = 1-64) got slower by more
// than 1%; on an H200, where it was not derived, the same rows went from
// 2.1% to 0.7% behind the fastest on average, none slower
// (TestPlanGemvAgainstBench).
func formLead(m, n int, lim gemvLimits, out []gemvPlan) []gemvPlan {
	i := -1
	if m <= gemvPairLeadTokens {
		i = slices.IndexFunc(out, func(p gemvPlan) bool {
			return p.pair && p.rb != 1 && 2*ceilDiv(n/32, p.blocks()) <= lim.sms
		})
	}
	if i < 0 && len(out) > 0 && !out[0].wg && (ceilDiv(n, 128) <= lim.sms || m > 32) {
		i = slices.IndexFunc(out, func(p gemvPlan) bool { return p.wg && p.splits == 1 && p.groups == 0 && p.rb != 1 })
	}
	if i <= 0 {
		return out
	}
	first := out[i]
	return slices.Insert(slices.Delete(out, i, i+1), 0, first)
}

// gemvHyMaxTokens is the most tokens for which planGemv runs the hybrid
// (hybridPlan), and gemvHyMinCTAs the fewest CTAs: it was measured on
// 1024 rows (64 CTAs); on fewer the planner's plans fill more SMs.
const (
	gemvHyMaxTokens = 8
	gemvHyMinCTAs   = 64
)

// gemvHyLeadChunks is the longest slice, in chunks, on which planGemv runs
// the hybrid first at up to gemvHyMaxTokens tokens, and
// gemvHyLeadLongChunks the longest at up to gemvHyLeadLongTokens; on longer
// ones it is the second candidate, which engines and bench time.
// SparseMatmul's default against the fastest of bench's 8 candidates (BF16,
// µs): on 8B k/v (slices of 32 chunks) the hybrid was the
// fastest at 1-8 tokens on the H100 and the H200; on TinyLlama's down (2048
// × 5632, 44 chunks) at 1, 2, 4 tokens on the H200 (6.8, 7.0, 7.4) but not
// at 8 (an 8-slice plan was the fastest, 7.7-7.9), and at 1 on the H100
// (7.6 against 8.4 for the plans before it); on 70B k/v (64 chunks) on the
// H100 at 1-2 tokens only (7.0 against 7.2), and on the H200 it took 6.8,
// 6.8, 7.4, 7.9 at 1, 2, 4, 8 tokens against the 16-slice plan's 6.5, 6.6,
// 6.7, 6.9.
const (
	gemvHyLeadChunks     = 32
	gemvHyLeadLongChunks = 48
	gemvHyLeadLongTokens = 4
)

// hybridLeads reports whether planGemv runs the hybrid's plan hy for m
// tokens ahead of the model's (gemvHyLeadChunks).
func hybridLeads(m int, hy gemvPlan) bool {
	return hy.cps <= gemvHyLeadChunks || hy.cps <= gemvHyLeadLongChunks && m <= gemvHyLeadLongTokens
}

// hybridPlan returns the hybrid's pair (two slices of 32-row CTAs in
// 4-chunk stages, the activations staged whole up to 2 tokens and in
// windows of gemvHyWindow chunks from 4) that the candidates hold, for m
// of at most gemvHyMaxTokens tokens where its grid is one wave of at
// least gemvHyMinCTAs CTAs (n of 1024-2112 rows on an H100), and false
// where there is none: first (planGemv's plan) where hybridLeads says,
// else second. Measured against the planner's plan without it (H100,
// `pdl_probe hy`, µs; docs/kernels.md): 70B k/v (1024 × 8192) 7.0-7.3 against 8.0 at one token, 7.4
// against 8.1 at two, 7.5 against 8.1 at four, 8.1 against 8.3 at eight,
// but 9.2 against 8.3 at sixteen; 8B k/v (1024 × 4096) 5.0 against 6.1 at
// one token, 6.4 against 6.5 at sixteen.
func (md gemvModel) hybridPlan(m, n, k int, lim gemvLimits) (gemvPlan, bool) {
	if ctas := 2 * (n / 32); !lim.wg || m > gemvHyMaxTokens || ctas > lim.sms || ctas < gemvHyMinCTAs || k/gemvChunk < 2 {
		return gemvPlan{}, false
	}
	o := gemvOptions{rows: 32, pair: 1, sc: 4, window: -1}
	if m > 2 {
		o.window = 1
	}
	ps, err := md.candidates(m, n, k, lim, o, 1)
	if err != nil && o.window == -1 {
		o.window = 1
		ps, err = md.candidates(m, n, k, lim, o, 1)
	}
	if err != nil {
		o.window = -1 // a slice of one window is staged whole
		ps, err = md.candidates(m, n, k, lim, o, 1)
	}
	if err != nil {
		return gemvPlan{}, false
	}
	return ps[0], true
}

// gemvGroupMinTokens is the fewest tokens for which the candidates hold
// token-group plans. Two groups launched as clusters measured, against
// the planner's plan (H100, `pdl_probe clusters`; docs/kernels.md): at
// 16 tokens (groups of 8) 1.5-2% faster on k/v and 70B
// q/o, even on 8B q/o, 2.6% slower on 8B down; at 32 (groups of 16) 3-6%
// faster on k/v and 70B q/o, 2-3% slower on 8B q/o and down. `sfsurgery
// bench` at 32 tokens: 70B k/v 9.1 → 8.2 µs, 8B k/v 7.3 → 6.6.
const gemvGroupMinTokens = 9

// gemvGroupPickTokens and gemvGroupPickChunks bound where planGemv runs
// two token groups in clusters (groupPlans' first plan) instead of the
// model's plan: from 33 tokens, where a slice holds at most 32 chunks, so
// that the split-K sum the groups shorten is a large part of the call.
// At 64 tokens SparseMatmul's plan went, in µs (BenchmarkGPUDecode, BF16,
// "wg" → "auto": the model's plan → this one):
//
//	              H100          H200
//	8B q/o        15.2 → 13.3   13.1 → 12.2   (2 slices of 32 chunks)
//	8B k/v        10.5 → 9.4     9.7 → 8.8    (8 of 8)
//
// and `sfsurgery bench` found it the fastest of the 8 candidates for 70B
// k/v (8 slices of 16) on both. Longer slices won bench's rows on the
// H100 (1431e81's row → ea5b83b's: 8B down 33.3 → 30.2, 70B q/o 35.8 →
// 31.0, 70B down 102.0 → 98.3) but lost on the H200, whose DRAM
// outruns the L2 that the second group reads from (BenchmarkGPUDecode:
// 8B down 26.7 → 27.5, 70B down 76.5 → 89.6): there they stay
// candidates, which bench times.
const (
	gemvGroupPickTokens = 33
	gemvGroupPickChunks = 32
)

// gemvGroupPickShortTokens and gemvGroupPickShortChunks extend that pick
// down to 16 tokens where a slice holds at most 16 chunks (8 slices of
// k/v's 4096 or 8192 columns; every other Llama-3 shape's first group
// plan has slices of 32 chunks or more). There two groups of 8 or 16 in
// clusters were bench's fastest candidate at 16 and 32 tokens on the H100
// and the H200, both types (docs/decode-h*-*.md), while
// planGemv's own plan took, on the H200 (BF16, µs), 6.7 against 5.8 on
// 8B k/v and 7.8 against 7.1 on 70B k/v at 16 tokens.
const (
	gemvGroupPickShortTokens = 16
	gemvGroupPickShortChunks = 16
)

// gemvGroupPickMidTokens and gemvGroupPickMidChunks extend that pick, from
// 17 tokens (groups of 16), to slices of up to 24 chunks: TinyLlama's down
// (2048 × 5632, 4 slices of 22 chunks) at 32 tokens took 10.0 µs in two
// groups in clusters against 10.9 for planGemv's plan without the pick on
// the H100, 9.6 against 9.6-9.7 on the H200 (BF16, bench's candidates).
// At 16 tokens the same groups were 8% slower on the H200,
// so the pick starts above it.
const (
	gemvGroupPickMidTokens = 17
	gemvGroupPickMidChunks = 24
)

// gemvGroupPickMinChunks: from gemvGroupPickTokens, planGemv picks the
// first group plan whose slices hold at least this many chunks, where there
// is one, else the one of the most CTAs: on TinyLlama's k/v (256 × 2048,
// two 128-row blocks) at 64 tokens four groups of 16 (64 CTAs) took 5.0 µs
// against 6.1 for two groups in clusters (32 CTAs), on the H100 and the
// H200 alike (BF16, bench's candidates). On 8B k/v at 64 tokens
// two groups of 32 in clusters over 8 slices of 8 chunks took 8.26 µs, four
// groups of 16 over 4 slices of 16 7.37 (H100, BF16, SparseMatmul's plan
// against the fastest of bench's 8 candidates; F16 alike, and bench's
// fastest on the H200 too: 7.2); on 70B k/v two groups over 8 slices of 16
// were the fastest on both GPUs.
const gemvGroupPickMinChunks = 16

// groupPick returns the index of the group plan of gp that planGemv runs
// for m tokens (see gemvGroupPickTokens, gemvGroupPickShortTokens,
// gemvGroupPickMidTokens and gemvGroupPickMinChunks), or -1 for none.
func groupPick(m int, gp []gemvPlan) int {
	if len(gp) == 0 {
		return -1
	}
	if gp[0].cluster == 0 {
		return -1 // no two groups in clusters: groups of 8-32 tokens fill the grid
	}
	if m >= gemvGroupPickTokens {
		i := slices.IndexFunc(gp, func(p gemvPlan) bool { return p.cps >= gemvGroupPickMinChunks })
		if i < 0 { // short slices everywhere: the plan of the most CTAs
			i = 0
			for j, p := range gp {
				if p.splits*p.groups > gp[i].splits*gp[i].groups {
					i = j
				}
			}
		}
		if gp[i].cps <= gemvGroupPickChunks {
			return i
		}
		return -1
	}
	if m >= gemvGroupPickShortTokens && gp[0].cps <= gemvGroupPickShortChunks ||
		m >= gemvGroupPickMidTokens && gp[0].cps <= gemvGroupPickMidChunks {
		return 0
	}
	return -1
}

// groupPlans returns the token-group plans the candidates end with (at
// most two, of the warpgroup form on sm_90a devices, from
// gemvGroupMinTokens tokens): groups of 32 or 16 tokens where they make
// two to four groups, or two of 8, each with the most slices (8, 4, 2 or 1) that
// keep the grid within one wave, in 4-chunk stages, the activations staged
// whole where they fit; two groups launch as clusters. The model has no
// term for reading the weight once per group, so it does not rank them:
// an engine times them beside its plans, and planGemv picks one only
// where groupPick says (candidates).
func (md gemvModel) groupPlans(m, n, k int, lim gemvLimits) []gemvPlan {
	if !lim.wg || m < gemvGroupMinTokens {
		return nil
	}
	var out []gemvPlan
	rowCTAs := ceilDiv(n/32, gemvWgWarps)
	for _, tiles := range []int{4, 2, 1} {
		groups := ceilDiv(m, 8*tiles)
		if groups < 2 || groups > 4 || tiles == 1 && groups > 2 || len(out) == 2 {
			continue // groups of 8 tokens were measured as two only
		}
		for _, s := range []int{8, 4, 2, 1} {
			if rowCTAs*s*groups > lim.sms || s > k/gemvChunk {
				continue
			}
			// The activations staged whole where they fit (no window
			// switches, as measured), else in the model's windows.
			o := gemvOptions{wg: 1, sc: 4, splits: s, tiles: tiles, window: -1, rows: 128}
			ps, err := md.candidates(m, n, k, lim, o, 1)
			if err != nil {
				o.window = 0
				ps, err = md.candidates(m, n, k, lim, o, 1)
			}
			if err == nil {
				out = append(out, ps[0])
			}
			break
		}
	}
	return out
}

// gemvSweptSlices reports whether planGemv may choose s slices on its
// own: the slice counts BenchmarkGPUDecodeSweep times, so that the plans
// it chooses for the swept shapes are plans the sweep timed and
// TestGemvModelReplay checks what it will do, not a neighbour.
func gemvSweptSlices(s int) bool {
	switch s {
	case 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64:
		return true
	}
	return s > 64
}

// plansCTA appends to all every plan candidates weighs for CTAs of w
// warps, kw per row block, and stages of sc chunks, in the warpgroup form
// (wg; w = 4, kw = 1) or not: each slice length, the activations staged
// whole where they fit and in windows, with its cost. The warpgroup form
// has CTAs of 128 and of 64 rows (rb 4 and 2), and two slices without
// token groups are summed as a pair (unless o.pair is -1).
func (md gemvModel) plansCTA(all []rated, m, n, k int, lim gemvLimits, o gemvOptions, sc, w, kw int, wg bool) []rated {
	rbs := []int{0}
	if wg {
		rbs = []int{gemvWgWarps, 2}
		switch o.rows {
		case 128:
			rbs = rbs[:1]
		case 64:
			rbs = rbs[1:]
		case 32:
			rbs = []int{1} // the hybrid only where forced (hybridPlan)
		}
	}
	for _, rb := range rbs {
		if rb == 2 && sc != 2 && o.rows != 64 {
			continue // 64-row pairs in 2-chunk stages (gemvPairRows)
		}
		all = md.plansRB(all, m, n, k, lim, o, sc, w, kw, wg, rb)
	}
	return all
}

// plansRB is plansCTA for CTAs of rb row blocks (the warpgroup form's 4 or
// 2; 0 for the mma.sp kernel).
func (md gemvModel) plansRB(all []rated, m, n, k int, lim gemvLimits, o gemvOptions, sc, w, kw int, wg bool, rb int) []rated {
	tiles, groups, mc := gemvTiles(m), 0, m // mc: the tokens of a CTA
	if o.tiles != 0 {
		if !wg {
			return all
		}
		if tiles = min(o.tiles, tiles); ceilDiv(m, 8*tiles) > 1 {
			groups, mc = ceilDiv(m, 8*tiles), 8*tiles
		}
	}
	chunks := k / gemvChunk
	for _, windowed := range []bool{false, true} {
		if o.window == 1 && !windowed || o.window == -1 && windowed {
			continue
		}
		xw, maxCPS := 0, 0
		switch {
		case windowed && rb == 1:
			xw = gemvHyWindow
			if gemvSmemHy(m, tiles, sc, 0, xw, false) <= lim.smem {
				maxCPS = chunks
			}
		case rb == 1:
			st := gemvWgWarps * gemvDepth(sc)
			fixed := st*gemvStageBytes(sc) + 16*st + (gemvWgWarps-1)*1024*tiles
			maxCPS = min(((lim.smem-fixed)/(4*(min(m, 8*tiles)+1))-gemvPadWords)/gemvChunkWords, chunks)
		case windowed:
			xw = gemvWindow(sc, kw)
			if rb == 2 && o.rows != 64 {
				if xw = gemvPairWindow(tiles, sc, lim); xw < gemvWindow(sc, kw) {
					continue
				}
			}
			if wg && gemvSmemWG(tiles, sc, 0, xw, rb, false) <= lim.smem || !wg && gemvSmem(m, sc, w, 0, xw) <= lim.smem {
				maxCPS = chunks
			}
		case wg:
			// The buffer holds whole stages: cps ≤ the chunks that fit,
			// rounded down to a multiple of sc.
			fit := (lim.smem - gemvSmemWG(tiles, sc, 0, 0, rb, false)) / (8 * tiles * 128)
			maxCPS = min(fit/sc*sc, chunks)
			if rb == 2 && o.rows != 64 {
				maxCPS = min(maxCPS, gemvPairMaxWindow) // longer slices in windows
			}
		default:
			ring := w * gemvDepth(sc) * gemvStageBytes(sc)
			maxCPS = min(((lim.smem-ring)/(4*(m+1))-gemvPadWords)/gemvChunkWords, chunks)
		}
		lo, hi := 1, maxCPS
		if o.splits != 0 {
			lo = ceilDiv(chunks, min(o.splits, chunks))
			hi = lo
		}
		for cps := hi; cps >= lo && cps <= maxCPS; cps-- {
			s := ceilDiv(chunks, cps)
			if s > maxGridY {
				break
			}
			if cps > ceilDiv(chunks, s) {
				continue // the same slices as a shorter cps
			}
			if o.splits == 0 && !gemvSweptSlices(s) {
				continue
			}
			if windowed && cps <= xw {
				continue // one window: the slice staged whole
			}
			pxw := 0
			if windowed {
				pxw = xw
			}
			p := gemvPlan{tiles: tiles, sc: sc, warps: w, kw: kw, splits: s, cps: cps, xw: pxw, wg: wg, rb: rb, groups: groups}
			if groups == 2 && o.cluster != -1 {
				p.cluster = 2
			}
			// Two slices as a pair where its buffers fit too.
			p.pair = wg && s == 2 && groups == 0 && o.pair != -1 && o.coop != 1
			if p.pair && p.sharedBytes(m) > lim.smem {
				p.pair = false
			}
			if o.pair == 1 && !p.pair || rb == 2 && o.rows != 64 && !gemvPairRows(p, n, lim) {
				continue
			}
			widen := windowed && wg && rb == gemvWgWarps && sc == 2 && o.window == 0
			if widen {
				p = p.widened(m, lim)
			}
			p.smem = p.sharedBytes(m)
			if o.coop != 1 {
				all = append(all, rated{p: p, cost: md.rate(mc, n, k, lim, p)})
			}
			// The cooperative sum (128-row CTAs): every CTA resident at
			// once, one per SM.
			if wg && rb == gemvWgWarps && o.coop != -1 && o.pair != 1 && groups == 0 && s > 1 && m >= gemvCoopMinTokens &&
				ceilDiv(n/32, gemvWgWarps)*s <= lim.sms {
				p.coop, p.pair = true, false
				if widen {
					p = p.widened(m, lim)
				}
				p.smem = p.sharedBytes(m)
				all = append(all, rated{p: p, cost: md.rate(m, n, k, lim, p)})
			}
		}
	}
	return all
}

// gemvWideWindow returns the widest window of activations (a multiple of
// sc chunks) that a pair of 64-row CTAs holds in lim's shared memory, or
// 0.
func gemvWideWindow(tiles, sc int, lim gemvLimits) int {
	xw := 0
	for w := sc; gemvSmemWG(tiles, sc, 0, w, 2, true) <= lim.smem; w += sc {
		xw = w
	}
	return xw
}

// gemvPairMaxWindow is the widest window of activations, in chunks, that a
// pair of 64-row CTAs runs unforced.
const gemvPairMaxWindow = 16

// gemvPairWindow returns the window of activations, in chunks, of a pair
// of 64-row CTAs: gemvPairMaxWindow, or the widest that fits if narrower
// (gemvWideWindow); a slice of at most that many chunks is staged whole.
// Fewer window switches ran faster, up to 16 chunks; beyond that the
// first window, which the consumers stage before their first product,
// cost more than the switches it saved (H100, `pdl_probe pairwin`, µs,
// 8B down: at 8 tokens 25.9 in windows of 16 or 36, 26.4 staged whole;
// at 16 tokens 27.9 / 26.3 / 26.3 / 26.5 / 27.5 in windows of 8 / 12 /
// 16 / 24 / 36; at 32 tokens 31.1 / 28.8 / 27.1 / 27.0 in windows of 6 /
// 8 / 12 / 16; at 64 tokens 32.6 / 30.3 in windows of 6 / 8, the widest
// that fit; 8B q/o at 16 tokens 10.1 whole or in windows of 16, 10.2 in
// windows of 8, at 32 tokens 10.4 / 10.5 in windows of 12 / 16). The
// model prices such a window as one of gemvWindow's width (rate).
func gemvPairWindow(tiles, sc int, lim gemvLimits) int {
	return min(gemvPairMaxWindow/sc*sc, gemvWideWindow(tiles, sc, lim))
}

// gemvWGWindowSC2 is the window of activations, in chunks, of the
// warpgroup form's 128-row CTAs in 2-chunk stages where their buffers fit
// (else gemvWindow's 6), priced by the model as gemvWindow's. Measured
// (H100, `pdl_probe win128`, µs, windows of 6 / 8 at 64 tokens): 8B
// gate/up 29.0 / 28.65, 70B gate/up 103.7 / 100.9; a pair of 64-row CTAs
// gains the same way (gemvPairWindow). In 4-chunk stages gemvWindow's 8
// ran fastest (8B gate/up at 16 tokens 26.2 against 26.4 in windows of
// 16, at 32 tokens 26.6 against 27.2 in windows of 12; 70B q/o and down
// within 0.5%).
const gemvWGWindowSC2 = 8

// widened returns p, a windowed plan of 128-row CTAs in 2-chunk stages,
// in windows of gemvWGWindowSC2 chunks where its slice is longer and its
// buffers fit in lim's shared memory for m tokens, else in gemvWindow's.
func (p gemvPlan) widened(m int, lim gemvLimits) gemvPlan {
	wide := p
	wide.xw = gemvWGWindowSC2
	if p.cps > gemvWGWindowSC2 && wide.sharedBytes(m) <= lim.smem {
		return wide
	}
	p.xw = gemvWindow(p.sc, 1)
	return p
}

// gemvPairRows reports whether planGemv weighs p, of 64-row CTAs, unforced:
// only as a pair whose grid is one wave over at least half the SMs (n of
// 2112-4224 rows on an H100), where 128-row CTAs leave SMs idle, in 2-chunk
// stages (plansCTA), in windows of gemvPairWindow chunks. Measured against
// the best 128-row plan (H100, `pdl_probe pairs`; docs/kernels.md): 8B
// q/o 6-23% faster at every token count; 8B down 3% faster at 1 token,
// 1.5% slower at 16, even at 32, 2% faster at 64 (in windows of 6-8
// chunks; gemvPairWindow's are faster still). With one slice (70B q/o: 30.8
// against 30.3 µs at 16 tokens; 8B gate/up: 224 CTAs in two waves, 36.2
// against 29.1 at 64) and with more slices summed by tickets (70B k/v:
// even) they were no faster; 4-chunk stages ran even with 2-chunk ones at
// 1-16 tokens and slower at 32 (8B q/o: 11.4 against 10.9 µs) and 64 (13.5
// in the widest windows that fit, 4 chunks, against 11.5).
func gemvPairRows(p gemvPlan, n int, lim gemvLimits) bool {
	ctas := ceilDiv(n/32, 2) * p.splits
	return p.pair && 2*ctas >= lim.sms && ctas <= lim.sms
}

// gemvCoopMinTokens is the fewest tokens for which planGemv weighs the
// cooperative split-K sum: with fewer it measured slower than the ticket
// sum on an H100 (8B k_v at 32 tokens 9.7 against 9.2 µs, at 16 tokens and
// below 0.4-0.7 µs slower; docs/kernels.md), and below 4 its
// order of additions would differ from the ticket sum's.
const gemvCoopMinTokens = 33

// gemvMaxCandidates bounds the decode-kernel plans SparseCandidates offers.
const gemvMaxCandidates = 8

// String describes p as SparseCandidates lists it.
func (p gemvPlan) String() string {
	s := fmt.Sprintf("decode sc%d w%d kw%d s%d xw%d", p.sc, p.warps, p.kw, p.splits, p.xw)
	if p.wg {
		s += " wg"
	}
	switch p.rb {
	case 2:
		s += " r64"
	case 1:
		s += " r32"
	}
	if p.pair {
		s += " pair"
	}
	if p.groups > 1 {
		s += fmt.Sprintf(" tok%d", 8*p.tiles)
	}
	if p.cluster > 1 {
		s += fmt.Sprintf(" cl%d", p.cluster)
	}
	if p.coop {
		s += " coop"
	}
	return s
}
