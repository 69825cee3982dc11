package launchplan

// stageBytes and ringDepth mirror Stage<SC> in kernels/cuda/gemv.cuh: the bytes
// of one warp's pipeline stage (32 rows of sc chunks, then the meta of 2·sc
// k-tiles) and the stages in its ring.
func stageBytes(sc int) int { return 32*sc*64 + 2*sc*128 }
func ringDepth(sc int) int {
	if sc == 2 {
		return 4
	}
	return 3
}

// minWindow returns the chunks of a window of activations for stages of
// sc chunks and kw warps per row block: the least the kernel allows, the
// rounds of kw stages its rings keep in flight (the next window is queued
// as one starts and must have landed when it is reached).
func minWindow(sc, kw int) int { return kw * sc * (ringDepth(sc) - 1) }

// sharedMMA returns the dynamic shared memory of a CTA for m tokens: the
// warps' rings, then the activations of the m tokens and a row of zeros,
// over cps chunks (xw = 0) or in two windows of xw chunks.
func sharedMMA(m, sc, warps, cps, xw int) int {
	ring := warps * ringDepth(sc) * stageBytes(sc)
	if xw > 0 {
		return ring + 2*4*(m+1)*(xw*chunkWords+padWords)
	}
	return ring + 4*(m+1)*(cps*chunkWords+padWords)
}

// sharedWarpgroup returns the dynamic shared memory of a CTA of the warpgroup
// form (the entry points in kernels/cuda/sfsurgery_sm90a.cu) of rb row blocks:
// the rings (the same bytes whatever rb: ST = ringDepth(sc)·4/rb stages of
// each block), 1024 bytes to align the activations, their buffer (the
// slice's cps chunks rounded up to whole stages) or two of xw chunks, each
// chunk 128 bytes for each of the 8·tiles tokens, then 2·ST mbarriers;
// for rb = 2 the halves' exchange, 512 bytes per tile and block; for a
// pair its buffers and mbarriers, 1024 bytes per tile and 8 per block.
func sharedWarpgroup(tiles, sc, cps, xw, rb int, pair bool) int {
	if rb != 2 {
		rb = warpgroupWarps
	}
	ring := warpgroupWarps * ringDepth(sc) * stageBytes(sc)
	bufs, xcap := 1, ceilDiv(cps, sc)*sc
	if xw > 0 {
		bufs, xcap = 2, xw
	}
	b := ring + 1024 + bufs*xcap*8*tiles*128 + 2*ringDepth(sc)*warpgroupWarps/rb*8
	if rb == 2 {
		b += rb * 512 * tiles
	}
	if pair {
		b += rb * (1024*tiles + 8)
	}
	return b
}

// sharedHybrid returns the dynamic shared memory of a CTA of the hybrid
// (the gemv_hy entry points in kernels/cuda/sfsurgery_sm90a.cu) for m tokens: the
// warpgroup form's ring (ST = 4·ringDepth(sc) stages of the one block),
// the activations of min(m, 8·tiles) tokens and a row of zeros over cps
// chunks (xw = 0) or in two windows of xw chunks, as sharedMMA lays them
// out, 2·ST mbarriers, warps 1-3's sums (1024 bytes per tile each), and
// for a pair its buffer and mbarrier.
func sharedHybrid(m, tiles, sc, cps, xw int, pair bool) int {
	st := warpgroupWarps * ringDepth(sc)
	rows := min(m, 8*tiles) + 1
	x := 4 * rows * (cps*chunkWords + padWords)
	if xw > 0 {
		x = 2 * 4 * rows * (xw*chunkWords + padWords)
	}
	b := st*stageBytes(sc) + x + 16*st + (warpgroupWarps-1)*1024*tiles
	if pair {
		b += 1024*tiles + 8
	}
	return b
}

// hybridWindow is the window of activations, in chunks, of the hybrid's
// CTAs (a multiple of its rounds, 4·sc chunks, for sc of 2 and 4).
const hybridWindow = 16

// sharedBytes returns the dynamic shared memory of p for m tokens.
func (p Plan) sharedBytes(m int) int {
	if p.Warpgroup && p.RowBlocks == 1 {
		return sharedHybrid(m, p.TokenTiles, p.ChunksPerStage, p.ChunksPerSlice, p.WindowChunks, p.Pair)
	}
	if p.Warpgroup {
		return sharedWarpgroup(p.TokenTiles, p.ChunksPerStage, p.ChunksPerSlice, p.WindowChunks, p.RowBlocks, p.Pair)
	}
	return sharedMMA(m, p.ChunksPerStage, p.Warps, p.ChunksPerSlice, p.WindowChunks)
}

// tokenTiles returns the 8-token tiles of the kernel for m tokens: the
// least power of two that holds them (the kernels have 1, 2, 4 and 8).
func tokenTiles(m int) int {
	tiles := 1
	for 8*tiles < m {
		tiles *= 2
	}
	return tiles
}

// reduceLoads is the loads per lane that reduce in kernels/cuda/gemv.cuh
// keeps in flight from m = 4 (kLoads).
const reduceLoads = 32

// reduceBatches returns the batches of loads in which the last warp of
// a row block adds up s slices of partial sums for m tokens in tiles 8-token
// tiles: reduce in kernels/cuda/gemv.cuh keeps reduceLoads loads per lane in
// flight over the tokens (2·tiles per lane) from m = 4; below, each of 4
// lane groups takes 4 of its slices per batch.
func reduceBatches(m, tiles, s int) int {
	if m >= 4 {
		return ceilDiv(s, max(1, reduceLoads/(2*tiles)))
	}
	return ceilDiv(ceilDiv(s, 4), 4)
}
