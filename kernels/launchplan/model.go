package launchplan

import "math/bits"

// costModel is Choose's cost model of the decode kernel: for each form
// (the mma.sp kernel, and on sm_90a the warpgroup form) the busiest SM's
// time, in units of the time an SM takes to stream one warp's chunk (32
// rows × 64 columns: 2304 bytes, about 100 ns at a 132nd of 3 TB/s), with
// constants fitted to that form's sweep, and the warpgroup form's costs
// scaled into the mma.sp form's by warpgroupPercent.
type costModel struct {
	mma       formCosts // the mma.sp form (kernels/cuda/gemv.cuh)
	warpgroup formCosts // the warpgroup form (kernels/cuda/gemv_wg.cuh)
	// warpgroupPercent converts the warpgroup form's costs into the mma.sp
	// form's units, by token tiles (1, 2, 4, 8), fitted with warpgroup so that
	// the plan of either form the model chooses is the fastest measured.
	warpgroupPercent [4]int
}

// formCosts are one form's constants of costModel.
type formCosts struct {
	fixedWork int // each wave of CTAs an SM runs (launch, first stage's latency)
	// smPeak is the percentage of its share of the memory bandwidth (the
	// copy rate over the SMs) one SM can stream when others stream less
	// or idle.
	smPeak           int
	fourChunkPercent int // the cost of 4-chunk stages (longer runs per row) against 2-chunk ones
	inFlight         int // weight bytes an SM must keep in flight to stream at its share
	residentWarps    int // warps an SM must run to keep its schedulers issuing
	ctaCost          int // each CTA an SM runs, beyond its chunks (fill, drain, stores)
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
	// (finish_coop in kernels/cuda/gemv_wg.cuh) costs as, whatever the slices.
	coopBatches int
	// pairWork is the warpgroup form's pair sum (two slices in clusters
	// of two, finish_pair in kernels/cuda/gemv_wg.cuh), in place of the tail and
	// the partial sums' bytes: one trip between the pair's SMs.
	pairWork int
}

// defaultModel returns the model Choose uses. The mma.sp form's
// constants were fitted (TestModelFit with -fit=mma: coordinate
// descent from 40 starts) to an H100 sweep of six Llama-3 shapes; among
// the timed plans of each of the eight Llama-3 projection shapes and
// token counts 1-64 of the H100 sweep (25573 plans,
// testdata/gemv-sweep-h100.txt.gz), the one they rate cheapest is 1.4%
// slower than the fastest on average and 5.9% at worst
// (TestModelReplay). The fit has thirteen constants and several sets
// score the same, so read them as a description of that GPU, not as
// physics: 4-chunk stages run better than the other terms say (fourChunkPercent
// 75), staging activations while the weights stream costs nothing
// (windowStage 1 << 20), and a split-K tail (tailWork 10 units of about
// 100 ns, tailBatch 16 per further batch of loads) costs less than its
// reputation.
//
// The warpgroup form is priced with the same constants scaled by
// warpgroupPercent, measured on the H100 (the probe's ratios at 1-4
// tiles, and at 8 BenchmarkGPUDecode's best plans of each form on the 8B
// shapes), its cooperative sum as coopBatches batches of a ticket sum
// (measured: 0.6 µs slower than one batch, about a batch saved per
// batch beyond two). Over the form's H100 sweep (2355
// plans, gemv-sweep-wg-h100.txt.gz) that is 1.1% slower than the fastest
// on average and 9.9% at worst within the form (TestModelReplayWarpgroup),
// 1.2% and 9.9% choosing between the forms (its "forms" case).
// Constants of its own fitted to that sweep (-fit=forms with
// SFSURGERY_FIT_WG=1) replay at 0.7% and 5.4%, but the sweep times plans
// one launch after another and bench times CUDA-graph replays: with them
// bench's 8 candidates missed the best plan of 8B q/o at M = 1 (9.7 →
// 10.3 µs) while gaining on 70B k/v, even on average; refitted to sweeps
// timed as graph replays (SFSURGERY_SWEEP_GRAPHS) they were still even
// on average, rows ±3-9% either way (docs/kernels.md).
func defaultModel() costModel {
	mma := formCosts{
		fixedWork:        24,
		smPeak:           110,
		fourChunkPercent: 75,
		inFlight:         48 << 10,
		residentWarps:    4,
		ctaCost:          0,
		stageCost:        4,
		windowStage:      1 << 20,
		windowCost:       0,
		sliceCost:        0,
		tailWork:         10,
		tailBatch:        16,
		groupCost:        4,
	}
	// The warpgroup form: the mma.sp form's constants, its cooperative sum
	// measured (coopBatches), the scale measured (warpgroupPercent).
	warpgroup := mma
	warpgroup.coopBatches = 2
	warpgroup.pairWork = 1
	return costModel{mma: mma, warpgroup: warpgroup, warpgroupPercent: [4]int{96, 92, 91, 96}}
}

// cost returns the model's time for the decode kernel's mma.sp form on m
// tokens and an n × k weight with stages of sc chunks, CTAs of w warps, kw
// of them per row block, slices of cps chunks and windows of xw chunks of
// activations (0: staged whole), on a device with limits lim (see
// formCosts.costSmem).
func (md costModel) cost(m, n, k int, lim Limits, sc, w, kw, cps, xw int) int {
	return md.mma.costSmem(m, n, k, lim, sc, w, w/kw, kw, cps, xw, sharedMMA(m, sc, w, cps, xw), false)
}

// rate returns the model's time for plan p: cost, and for the warpgroup
// form its own constants' cost with its own shared memory (occupancy) and
// row blocks per CTA, its split-K sum priced as coopBatches batches when
// cooperative and as pairWork for a pair, scaled by warpgroupPercent.
func (md costModel) rate(m, n, k int, lim Limits, p Plan) int {
	if !p.Warpgroup {
		return md.cost(m, n, k, lim, p.ChunksPerStage, p.Warps, p.WarpsPerRowBlock, p.ChunksPerSlice, p.WindowChunks)
	}
	xw := p.WindowChunks
	switch {
	case p.RowBlocks == 2 && (xw == 0 || xw > minWindow(p.ChunksPerStage, 1)):
		// 64-row CTAs staged whole or in wide windows: priced as the
		// narrow window, as measured (pairWindow).
		xw = min(minWindow(p.ChunksPerStage, 1), p.ChunksPerSlice)
	case xw > minWindow(p.ChunksPerStage, 1):
		xw = minWindow(p.ChunksPerStage, 1) // wideWindow's windows, likewise
	}
	c := md.warpgroup.costSmem(m, n, k, lim, p.ChunksPerStage, p.Warps, p.blocks(), p.WarpsPerRowBlock, p.ChunksPerSlice, xw, p.SharedBytes, p.Pair)
	if p.Cooperative {
		c += md.warpgroup.tailBatch * (md.warpgroup.coopBatches - reduceBatches(m, p.TokenTiles, p.Slices))
	}
	return ceilDiv(c*md.warpgroupPercent[bits.TrailingZeros(uint(p.TokenTiles))], 100)
}

// costSmem returns a form's time for a CTA of w warps owning `blocks` row
// blocks in smem bytes of shared memory:
//
//	ceil(CTAs / (SMs·occupancy))·fixedWork
//	  + max(all chunks / SMs, the busiest SM's chunks·100/smPeak)
//	  + ceil(CTAs/SMs)·(staging + ctaCost + windowCost·(windows-1) [+ groupCost]),
//
// scaled up when an SM runs fewer than residentWarps warps or they keep
// fewer than inFlight bytes in flight, and by fourChunkPercent for 4-chunk
// stages that a warp's share of a slice fills (at least 4·kw chunks: on
// shorter slices the stages run part empty; priced as full, TinyLlama's
// k/v, 256 × 2048 in 16 slices of 2 chunks, ran 16-20% behind bench's
// fastest plan); with several slices plus
// sliceCost per slice, the tail and the SM's share of the partial sums'
// bytes (written once, read once), or for a pair (two slices summed in a
// cluster's shared memory) pairWork.
func (md formCosts) costSmem(m, n, k int, lim Limits, sc, w, blocks, kw, cps, xw, smem int, pair bool) int {
	tiles := tokenTiles(m)
	s := ceilDiv(k/ChunkColumns, cps)
	ctas := ceilDiv(n/32, blocks) * s
	occ := max(1, lim.SharedPerSM/(smem+1024))
	perSM := ceilDiv(ctas, lim.SMs) // CTAs the busiest SM runs
	staging, windows := ceilDiv((m+1)*cps, md.stageCost), 1
	if xw > 0 {
		windows = ceilDiv(cps, xw)
		staging = ceilDiv((m+1)*xw, md.stageCost) + ceilDiv((m+1)*(cps-xw), md.windowStage)
	}
	group := 0
	if kw > 1 {
		group = md.groupCost
	}
	stream := max(ceilDiv(n/32*(k/ChunkColumns), lim.SMs), ceilDiv(perSM*blocks*cps*100, md.smPeak))
	cost := ceilDiv(ctas, lim.SMs*occ)*md.fixedWork + stream +
		perSM*(staging+md.ctaCost+md.windowCost*(windows-1)+group)
	resident := min(occ, perSM) * w
	inFlight := resident * (ringDepth(sc) - 1) * stageBytes(sc)
	cost = max(cost, ceilDiv(cost*md.inFlight, inFlight), ceilDiv(cost*md.residentWarps, resident))
	if sc == 4 && cps >= sc*kw {
		cost = ceilDiv(cost*md.fourChunkPercent, 100)
	}
	if pair {
		cost += md.pairWork
	} else if s > 1 {
		cost += md.sliceCost*s + md.tailWork + md.tailBatch*(reduceBatches(m, tiles, s)-1) +
			ceilDiv(2*4*s*m*n, lim.SMs*chunkBytes)
	}
	return cost
}
