package launchplan

// SweptSlices reports whether Choose may choose s slices on its
// own: the slice counts BenchmarkGPUDecodeSweep times, so that the plans
// it chooses for the swept shapes are plans the sweep timed and
// TestModelReplay checks what it will do, not a neighbour.
func SweptSlices(s int) bool {
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
// token groups are summed as a pair (unless o.Pair is -1).
func (md costModel) plansCTA(all []rated, m, n, k int, lim Limits, o Options, sc, w, kw int, wg bool) []rated {
	rbs := []int{0}
	if wg {
		rbs = []int{warpgroupWarps, 2}
		switch o.Rows {
		case 128:
			rbs = rbs[:1]
		case 64:
			rbs = rbs[1:]
		case 32:
			rbs = []int{1} // the hybrid only where forced (hybridPlan)
		}
	}
	for _, rb := range rbs {
		if rb == 2 && sc != 2 && o.Rows != 64 {
			continue // 64-row pairs in 2-chunk stages (pairRowsLead)
		}
		all = md.plansRowBlocks(all, m, n, k, lim, o, sc, w, kw, wg, rb)
	}
	return all
}

// plansRowBlocks is plansCTA for CTAs of rb row blocks (the warpgroup form's 4 or
// 2; 0 for the mma.sp kernel).
func (md costModel) plansRowBlocks(all []rated, m, n, k int, lim Limits, o Options, sc, w, kw int, wg bool, rb int) []rated {
	tiles, groups, mc := tokenTiles(m), 0, m // mc: the tokens of a CTA
	if o.TokenTiles != 0 {
		if !wg {
			return all
		}
		if tiles = min(o.TokenTiles, tiles); ceilDiv(m, 8*tiles) > 1 {
			groups, mc = ceilDiv(m, 8*tiles), 8*tiles
		}
	}
	chunks := k / ChunkColumns
	for _, windowed := range []bool{false, true} {
		if o.Window == 1 && !windowed || o.Window == -1 && windowed {
			continue
		}
		xw, maxCPS := 0, 0
		switch {
		case windowed && rb == 1:
			xw = hybridWindow
			if sharedHybrid(m, tiles, sc, 0, xw, false) <= lim.SharedPerBlock {
				maxCPS = chunks
			}
		case rb == 1:
			st := warpgroupWarps * ringDepth(sc)
			fixed := st*stageBytes(sc) + 16*st + (warpgroupWarps-1)*1024*tiles
			maxCPS = min(((lim.SharedPerBlock-fixed)/(4*(min(m, 8*tiles)+1))-padWords)/chunkWords, chunks)
		case windowed:
			xw = minWindow(sc, kw)
			if rb == 2 && o.Rows != 64 {
				if xw = pairWindow(tiles, sc, lim); xw < minWindow(sc, kw) {
					continue
				}
			}
			if wg && sharedWarpgroup(tiles, sc, 0, xw, rb, false) <= lim.SharedPerBlock || !wg && sharedMMA(m, sc, w, 0, xw) <= lim.SharedPerBlock {
				maxCPS = chunks
			}
		case wg:
			// The buffer holds whole stages: cps ≤ the chunks that fit,
			// rounded down to a multiple of sc.
			fit := (lim.SharedPerBlock - sharedWarpgroup(tiles, sc, 0, 0, rb, false)) / (8 * tiles * 128)
			maxCPS = min(fit/sc*sc, chunks)
			if rb == 2 && o.Rows != 64 {
				maxCPS = min(maxCPS, pairMaxWindow) // longer slices in windows
			}
		default:
			ring := w * ringDepth(sc) * stageBytes(sc)
			maxCPS = min(((lim.SharedPerBlock-ring)/(4*(m+1))-padWords)/chunkWords, chunks)
		}
		lo, hi := 1, maxCPS
		if o.Slices != 0 {
			lo = ceilDiv(chunks, min(o.Slices, chunks))
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
			if o.Slices == 0 && !SweptSlices(s) {
				continue
			}
			if windowed && cps <= xw {
				continue // one window: the slice staged whole
			}
			pxw := 0
			if windowed {
				pxw = xw
			}
			p := Plan{TokenTiles: tiles, ChunksPerStage: sc, Warps: w, WarpsPerRowBlock: kw, Slices: s, ChunksPerSlice: cps, WindowChunks: pxw, Warpgroup: wg, RowBlocks: rb, TokenGroups: groups}
			if groups == 2 && o.Cluster != -1 {
				p.Cluster = 2
			}
			// Two slices as a pair where its buffers fit too.
			p.Pair = wg && s == 2 && groups == 0 && o.Pair != -1 && o.Cooperative != 1
			if p.Pair && p.sharedBytes(m) > lim.SharedPerBlock {
				p.Pair = false
			}
			if o.Pair == 1 && !p.Pair || rb == 2 && o.Rows != 64 && !pairRowsLead(p, n, lim) {
				continue
			}
			widen := windowed && wg && rb == warpgroupWarps && sc == 2 && o.Window == 0
			if widen {
				p = p.widened(m, lim)
			}
			p.SharedBytes = p.sharedBytes(m)
			if o.Cooperative != 1 {
				all = append(all, rated{p: p, cost: md.rate(mc, n, k, lim, p)})
			}
			// The cooperative sum (128-row CTAs): every CTA resident at
			// once, one per SM.
			if wg && rb == warpgroupWarps && o.Cooperative != -1 && o.Pair != 1 && groups == 0 && s > 1 && m >= CooperativeMinTokens &&
				ceilDiv(n/32, warpgroupWarps)*s <= lim.SMs {
				p.Cooperative, p.Pair = true, false
				if widen {
					p = p.widened(m, lim)
				}
				p.SharedBytes = p.sharedBytes(m)
				all = append(all, rated{p: p, cost: md.rate(m, n, k, lim, p)})
			}
		}
	}
	return all
}
