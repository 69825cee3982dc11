package kernels

import (
	"errors"
	"fmt"
	"math/bits"
)

// The decode-size kernel (cuda/gemv.cuh) serves SparseMatmul at m ≤
// gemvMaxTokens. Each CTA of up to gemvMaxWarps warps owns 32 weight rows
// per warp and one slice of K; it stages the slice's activations in shared
// memory once, and each warp streams its rows through its own ring of
// cp.async stages of sc chunks. With more than one slice the warps store
// their partial sums to a workspace and the last of each row block to
// finish adds them up in slice order and writes y: one launch, and the
// same bits every run.
const (
	gemvMaxTokens  = 64 // 8 tiles of 8 tokens
	gemvMaxWarps   = 8  // the kernels' __launch_bounds__(256)
	gemvMinWarps   = 2  // the smallest CTA planGemv picks unless forced
	gemvChunk      = 64 // dense K columns per chunk
	gemvChunkWords = 32 // u32 words of one token's activations per chunk
	gemvPadWords   = 4  // padding words per token row in shared memory
	// gemvFixedWork is a CTA's fixed cost (launch, staging the
	// activations, the first stage's latency) in units of the time an SM
	// takes to stream one warp's chunk (32 rows × 64 columns), for
	// planGemv's cost model.
	gemvFixedWork = 16
	// gemvInFlight is the weight bytes an SM should have in flight to
	// stream at its share of the memory bandwidth (about 1 µs of latency
	// at 4.8 TB/s over 132 SMs, with margin).
	gemvInFlight = 48 << 10
	// gemvResidentWarps is the number of warps an SM should run: a warp
	// issues about one instruction every 3 cycles alone (Nsight Compute,
	// H200), and streaming a chunk takes about as many instructions as the
	// SM's share of the bandwidth allows cycles, so two warps per scheduler.
	gemvResidentWarps = 8
	// gemvStageCost converts a CTA's staging of the activations into
	// planGemv's work units: (m+1)·cps 4-byte copies per lane, about four
	// instructions each, against about 50 instructions per warp-chunk.
	gemvStageCost = 12
	// gemvCTACost is what each CTA an SM runs costs beyond its chunks
	// (filling its pipeline, staging, storing): measured, 8-warp CTAs
	// with 2 slices beat 6-warp CTAs with 5 slices by 8% on Llama-3-8B
	// gate_up at m = 1 (2026-11-22, H200).
	gemvCTACost = 16
	// gemvSC4Percent scales the cost of 4-chunk stages (runs of 256 bytes
	// per row): 2-4% faster than 2-chunk stages of the same CTAs and slices
	// on the Llama-3 gate_up shapes at m ≤ 8 (same measurements).
	gemvSC4Percent = 97
	// gemvChunkBytes is the DRAM bytes of one warp's chunk: 32 rows of 64
	// packed bytes and 8 bytes of meta.
	gemvChunkBytes = 32 * (64 + 8)
	// gemvTailWork is the split-K tail of a launch, the ticket (one
	// acq_rel atomic) and the first batch of loads of the last warp's sum
	// (about two L2 round trips, 1.5 µs), and gemvTailBatch each further
	// batch (one round trip), both in planGemv's units (about 78 ns on an
	// H200: 2304 bytes at a 132nd of 3.9 TB/s).
	gemvTailWork  = 20
	gemvTailBatch = 8
)

// gemvStageSizes is the number of stage sizes (chunks per cp.async stage)
// the PTX has kernels for: 2 << j for functions.gemv[·][·][j].
const gemvStageSizes = 2

// gemvPlanCache bounds the plans a Device keeps (one per shape, token
// count and options); past it the cache starts over.
const gemvPlanCache = 4096

// Attributes the decode kernel needs (CUdevice_attribute,
// CUfunction_attribute).
const (
	attrMaxSmemPerSM   = 81 // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
	attrMaxSmemOptin   = 97 // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
	funcAttrMaxDynSmem = 8  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
)

// gemvLimits are the device properties planGemv works with.
type gemvLimits struct {
	sms   int // streaming multiprocessors
	smem  int // dynamic shared memory one CTA may use (the opt-in maximum)
	perSM int // shared memory of an SM
}

// loadGemv looks up the decode kernels, reads the shared-memory limits and
// lets each kernel use the opt-in maximum. It runs with the context current
// and the mutex held.
func (d *Device) loadGemv() error {
	drv := d.drv
	for dt, prefix := range []string{"gemv_bf16", "gemv_f16"} {
		for i := range d.fn.gemv[dt] {
			for j := range d.fn.gemv[dt][i] {
				name := fmt.Sprintf("%s_t%d_s%d", prefix, 1<<i, 2<<j)
				if err := drv.check("cuModuleGetFunction("+name+")", drv.cuModuleGetFn(&d.fn.gemv[dt][i][j], d.mod, name)); err != nil {
					return err
				}
			}
		}
	}
	var perSM, optin int32
	if err := drv.check("cuDeviceGetAttribute", drv.cuDeviceGetAttribute(&perSM, attrMaxSmemPerSM, d.dev)); err != nil {
		return fmt.Errorf("reading the shared memory per SM: %w", err)
	}
	if err := drv.check("cuDeviceGetAttribute", drv.cuDeviceGetAttribute(&optin, attrMaxSmemOptin, d.dev)); err != nil {
		return fmt.Errorf("reading the opt-in shared memory per block: %w", err)
	}
	d.fn.gemvLim = gemvLimits{sms: d.info.SMs, smem: int(optin), perSM: int(perSM)}
	for dt := range d.fn.gemv {
		for i := range d.fn.gemv[dt] {
			for _, f := range d.fn.gemv[dt][i] {
				if err := drv.check("cuFuncSetAttribute", drv.cuFuncSetAttr(f, funcAttrMaxDynSmem, optin)); err != nil {
					return fmt.Errorf("allowing %d bytes of shared memory to the decode kernel: %w", optin, err)
				}
			}
		}
	}
	return nil
}

// gemvOptions force parts of a decode-kernel plan (benchmarks and tests);
// zero fields are planGemv's choice.
type gemvOptions struct {
	sc     int // chunks per pipeline stage: 2 or 4
	warps  int // warps per CTA, 1 … gemvMaxWarps
	splits int // slices of k, rounded so that none is empty
	// force runs the decode kernel where SparseMatmul, whose options are
	// all zero, would hand the product to the tiled kernel
	// (gemvPrefersTiled); any non-zero option does too.
	force bool
}

// gemvPrefersTiled reports whether SparseMatmul runs the tiled kernel
// (cuda/spmm.cuh) instead of the decode kernel for m ≤ gemvMaxTokens tokens
// and an n × k weight on sms SMs: from m = 33 (the decode kernel's 8-tile
// version) when the tiled kernel's 64 × 64 tiles make at least 0.9 of a
// wave of CTAs. There the decode kernel, which stages the activations
// again for every CTA column and sums many slices, measured slower:
// the tiled kernel took 9-18% less time on Llama-3-8B gate_up (n = 14336)
// and -70B gate_up and down (n = 28672, 8192) at m = 64 (2026-11-22, H200).
// With fewer tiles (n = 4096, 1024) it leaves SMs idle and took 1.4-1.6×
// the decode kernel's time. Between m = 33 and 63 the switch is
// unmeasured.
func gemvPrefersTiled(m, n int, sms int) bool {
	return m > 32 && 10*(n/64) >= 9*sms
}

// launchTiled queues the tiled kernel, as SparseMatmul does above
// gemvMaxTokens tokens. It runs with the context current and the mutex
// held.
func (d *Device) launchTiled(y, x, packed, meta *Buffer, dt DType, m, n, k int) error {
	fn := d.fn.spmmBF16
	if dt == F16 {
		fn = d.fn.spmmF16
	}
	grid := dim3{uint32(ceilDiv(m, tile)), uint32(ceilDiv(n, tile)), 1}
	return d.launch("spmm", fn, grid, dim3{128, 1, 1}, y.ptr, x.ptr, packed.ptr, meta.ptr, i32(m), i32(n), i32(k))
}

// gemvPlan is one launch of the decode kernel.
type gemvPlan struct {
	tiles  int // 8-token tiles: 1, 2, 4 or 8
	sc     int // chunks per pipeline stage
	warps  int // warps per CTA, each owning 32 weight rows
	splits int // slices of K (grid.y); more than one uses the workspace
	cps    int // 64-column chunks per slice, ceil(k/64 / splits) (the last may hold fewer)
	smem   int // dynamic shared memory in bytes
	// work is the Device's split-K workspace, the same for all its plans;
	// nil until gemvPlanFor caches the plan.
	work *gemvWork
}

// gemvWork is the workspace of split-K launches: counters u32 ticket
// counters (one per 32-row block, zero between launches: each launch puts
// back the ones it used), then the f32 partial sums [splits][m][n]. One
// serves every plan of a Device, all of which point to it, because the
// Device's launches run one at a time on its one stream.
type gemvWork struct {
	buf      *Buffer // nil until a plan has more than one slice
	counters int     // u32 words before the partial sums, a multiple of 32
}

// partials returns the f32 partial sums w holds room for.
func (w *gemvWork) partials() int64 {
	if w.buf == nil {
		return 0
	}
	return w.buf.n/4 - int64(w.counters)
}

// ptr returns the address of w's partial sums, which the kernel takes
// (its counters lie just below).
func (w *gemvWork) ptr() uint64 { return w.buf.ptr + 4*uint64(w.counters) }

// growGemvWork makes w hold at least blocks counters and partials partial
// sums. A larger workspace replaces the old one once the work queued on
// the device is done, and its counters are zeroed on the stream. It runs
// with the context current and the mutex held.
func (d *Device) growGemvWork(w *gemvWork, blocks int, partials int64) error {
	counters := ceilDiv(max(blocks, w.counters), 32) * 32
	if w.buf != nil && counters <= w.counters && partials <= w.partials() {
		return nil
	}
	partials = max(partials, w.partials())
	if w.buf != nil {
		// Launches still queued may use the old workspace.
		if err := d.drv.check("cuCtxSynchronize", d.drv.cuCtxSynchronize()); err != nil {
			return err
		}
		old := w.buf
		w.buf, w.counters = nil, 0
		if err := d.free(old); err != nil {
			return err
		}
	}
	b, err := d.alloc(4 * (int64(counters) + partials))
	if err != nil {
		return err
	}
	if err := d.drv.check("cuMemsetD32Async", d.drv.cuMemsetD32A(b.ptr, 0, uint64(counters), d.stream)); err != nil {
		return errors.Join(err, d.free(b))
	}
	w.buf, w.counters = b, counters
	return nil
}

// grid returns the launch grid of p for n weight rows.
func (p gemvPlan) grid(n int) dim3 {
	return dim3{uint32(ceilDiv(n/32, p.warps)), uint32(p.splits), 1}
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

// gemvSmem returns the dynamic shared memory of a CTA for m tokens: the
// warps' rings, then the activations of the m tokens and a row of zeros
// over cps chunks.
func gemvSmem(m, sc, warps, cps int) int {
	return warps*gemvDepth(sc)*gemvStageBytes(sc) + 4*(m+1)*(cps*gemvChunkWords+gemvPadWords)
}

// errGemvPlan wraps the reasons planGemv refuses a shape.
var errGemvPlan = errors.New("no decode-kernel plan")

// gemvReduceBatches returns the batches of loads in which the last warp of
// a row block adds up s slices of partial sums for m tokens in tiles 8-token
// tiles: reduce in cuda/gemv.cuh keeps 16 loads per lane in flight, over
// the tokens (2·tiles per lane) from m = 4, else over the slices.
func gemvReduceBatches(m, tiles, s int) int {
	if m >= 4 {
		return ceilDiv(s, max(1, 16/(2*tiles)))
	}
	return ceilDiv(ceilDiv(s, 4), 4)
}

// planGemv chooses the launch of the decode kernel for m tokens and an
// n × k weight on a device with limits lim; o forces parts of it.
//
// It tries both stage sizes, every CTA size (from gemvMinWarps warps) and
// every slice length that fit in shared memory, and keeps the one that
// minimises the busiest SM's time, in units of the time an SM takes to
// stream one warp's chunk: its share of the warps' chunks and of the
// staging of activations, ceil(CTAs/SMs)·(warps·cps + (m+1)·cps /
// gemvStageCost + gemvCTACost), plus gemvFixedWork for each wave of CTAs
// it runs, scaled up when the SM runs fewer than gemvResidentWarps warps or
// they keep fewer than gemvInFlight bytes in flight; 4-chunk stages count
// gemvSC4Percent of that. With several slices it adds the split-K tail:
// gemvTailWork for the ticket and the first batch of the last warp's sum,
// gemvTailBatch for each further batch, and the SM's share of the partial
// sums' bytes (written once, read once). Ties go to fewer slices, then to
// larger CTAs (activations staged once for more rows), then to 2-chunk
// stages.
func planGemv(m, n, k int, lim gemvLimits, o gemvOptions) (gemvPlan, error) {
	if m < 1 || m > gemvMaxTokens || n < 32 || n%32 != 0 || k < gemvChunk || k%gemvChunk != 0 {
		return gemvPlan{}, fmt.Errorf("%w: m = %d, n = %d, k = %d", errGemvPlan, m, n, k)
	}
	if o.warps < 0 || o.warps > gemvMaxWarps || o.splits < 0 {
		return gemvPlan{}, fmt.Errorf("%w: %d warps, %d splits", errGemvPlan, o.warps, o.splits)
	}
	if lim.sms < 1 || lim.smem < 1 || lim.perSM < lim.smem {
		return gemvPlan{}, fmt.Errorf("%w: device limits %+v", errGemvPlan, lim)
	}
	scs := []int{2, 4}
	switch o.sc {
	case 0:
	case 2, 4:
		scs = []int{o.sc}
	default:
		return gemvPlan{}, fmt.Errorf("%w: %d chunks per stage", errGemvPlan, o.sc)
	}
	tiles := 1
	for 8*tiles < m {
		tiles *= 2
	}
	chunks := k / gemvChunk
	best, bestCost := gemvPlan{}, -1
	for _, sc := range scs {
		for w := gemvMaxWarps; w >= 1; w-- {
			if o.warps != 0 && w != o.warps || o.warps == 0 && w < gemvMinWarps {
				continue
			}
			ring := w * gemvDepth(sc) * gemvStageBytes(sc)
			maxCPS := min(((lim.smem-ring)/(4*(m+1))-gemvPadWords)/gemvChunkWords, chunks)
			lo, hi := 1, maxCPS
			if o.splits != 0 {
				lo = ceilDiv(chunks, min(o.splits, chunks))
				hi = lo
			}
			gx := ceilDiv(n/32, w)
			for cps := hi; cps >= lo && cps <= maxCPS; cps-- {
				s := ceilDiv(chunks, cps)
				if s > maxGridY {
					break
				}
				if cps > ceilDiv(chunks, s) {
					continue // the same slices as a shorter cps
				}
				smem := gemvSmem(m, sc, w, cps)
				ctas := gx * s
				occ := max(1, lim.perSM/(smem+1024))
				perSM := ceilDiv(ctas, lim.sms) // CTAs the busiest SM runs
				cost := ceilDiv(ctas, lim.sms*occ)*gemvFixedWork +
					perSM*(w*cps+ceilDiv((m+1)*cps, gemvStageCost)+gemvCTACost)
				resident := min(occ, perSM) * w
				inFlight := resident * (gemvDepth(sc) - 1) * gemvStageBytes(sc)
				cost = max(cost, ceilDiv(cost*gemvInFlight, inFlight), ceilDiv(cost*gemvResidentWarps, resident))
				if sc == 4 {
					cost = ceilDiv(cost*gemvSC4Percent, 100)
				}
				if s > 1 {
					cost += gemvTailWork + gemvTailBatch*(gemvReduceBatches(m, tiles, s)-1) +
						ceilDiv(2*4*s*m*n, lim.sms*gemvChunkBytes)
				}
				if bestCost < 0 || cost < bestCost || cost == bestCost &&
					(s < best.splits || s == best.splits && (w > best.warps || w == best.warps && sc < best.sc)) {
					best = gemvPlan{tiles: tiles, sc: sc, warps: w, splits: s, cps: cps, smem: smem}
					bestCost = cost
				}
			}
		}
	}
	if bestCost < 0 {
		return gemvPlan{}, fmt.Errorf("%w: m = %d, k = %d with %+v does not fit in %d bytes of shared memory",
			errGemvPlan, m, k, o, lim.smem)
	}
	return best, nil
}

// gemvKey identifies a plan in a Device's cache.
type gemvKey struct {
	m, n, k int
	o       gemvOptions
}

// gemvPlanFor returns the cached plan for m tokens, an n × k weight and
// options o, planning it (and growing the Device's split-K workspace for
// it) the first time. It runs with the context current and the mutex held.
func (d *Device) gemvPlanFor(m, n, k int, o gemvOptions) (gemvPlan, error) {
	key := gemvKey{m, n, k, o}
	if p, ok := d.fn.gemvPlans[key]; ok {
		return p, nil
	}
	p, err := planGemv(m, n, k, d.fn.gemvLim, o)
	if err != nil {
		return gemvPlan{}, err
	}
	// Every cached plan holds the one workspace; keep it when the cache
	// starts over.
	var w *gemvWork
	for _, c := range d.fn.gemvPlans {
		w = c.work
		break
	}
	if w == nil {
		w = new(gemvWork)
	}
	if p.splits > 1 {
		if err := d.growGemvWork(w, n/32, int64(p.splits)*int64(m)*int64(n)); err != nil {
			return gemvPlan{}, fmt.Errorf("allocating the split-K workspace: %w", err)
		}
	}
	p.work = w
	if d.fn.gemvPlans == nil || len(d.fn.gemvPlans) >= gemvPlanCache {
		d.fn.gemvPlans = make(map[gemvKey]gemvPlan)
	}
	d.fn.gemvPlans[key] = p
	return p, nil
}

// launchGemv queues the decode kernel for op: one launch, planned once per
// shape, token count and options; with all options zero, the tiled kernel
// where gemvPrefersTiled says so. The caller has checked the operands. It
// runs with the context current and the mutex held.
func (d *Device) launchGemv(op string, y, x, packed, meta *Buffer, dt DType, m, n, k int, o gemvOptions) error {
	if o == (gemvOptions{}) && gemvPrefersTiled(m, n, d.fn.gemvLim.sms) {
		return d.launchTiled(y, x, packed, meta, dt, m, n, k)
	}
	p, err := d.gemvPlanFor(m, n, k, o)
	if errors.Is(err, errGemvPlan) {
		return argError("%s: %v", op, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	var work uint64 // unused by a launch of one slice
	if p.splits > 1 {
		work = p.work.ptr()
	}
	di := 0
	if dt == F16 {
		di = 1
	}
	fn := d.fn.gemv[di][bits.TrailingZeros(uint(p.tiles))][bits.TrailingZeros(uint(p.sc))-1]
	return d.launchShared("gemv", fn, p.grid(n), dim3{uint32(32 * p.warps), 1, 1}, p.smem,
		y.ptr, x.ptr, packed.ptr, meta.ptr, work, i32(m), i32(n), i32(k))
}
