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
// cp.async stages of sc chunks. With more than one slice the CTAs add their
// partial sums into a zeroed y.
const (
	gemvMaxTokens  = 64 // 8 tiles of 8 tokens
	gemvMaxWarps   = 8  // the kernels' __launch_bounds__(256)
	gemvMinWarps   = 2  // the smallest CTA planGemv picks unless forced
	gemvChunk      = 64 // dense K columns per chunk
	gemvChunkWords = 32 // u32 words of one token's activations per chunk
	gemvPadWords   = 4  // padding words per token row in shared memory
	gemvDefaultSC  = 2  // chunks per pipeline stage unless forced
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
}

// gemvPlan is one launch of the decode kernel.
type gemvPlan struct {
	tiles  int // 8-token tiles: 1, 2, 4 or 8
	sc     int // chunks per pipeline stage
	warps  int // warps per CTA, each owning 32 weight rows
	splits int // slices of K (grid.y); more than one adds into a zeroed y
	cps    int // 64-column chunks per slice (the last may hold fewer)
	smem   int // dynamic shared memory in bytes
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

// planGemv chooses the launch of the decode kernel for m tokens and an
// n × k weight on a device with limits lim; o forces parts of it.
//
// It tries every CTA size (from gemvMinWarps warps) and slice length that
// fit in shared memory and
// keeps the one that minimises the busiest SM's time: its share of the
// warps' chunks and of the staging of activations,
// ceil(CTAs/SMs)·(warps·cps + (m+1)·cps/gemvStageCost), plus gemvFixedWork
// for each wave of CTAs it runs, scaled up when the SM runs fewer than
// gemvResidentWarps warps or they keep fewer than gemvInFlight bytes in
// flight. Ties go to fewer slices (fewer atomic adds), then to larger CTAs
// (activations staged once for more rows).
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
	sc := o.sc
	switch sc {
	case 0:
		sc = gemvDefaultSC
	case 2, 4:
	default:
		return gemvPlan{}, fmt.Errorf("%w: %d chunks per stage", errGemvPlan, sc)
	}
	tiles := 1
	for 8*tiles < m {
		tiles *= 2
	}
	chunks := k / gemvChunk
	best, bestCost := gemvPlan{}, -1
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
			cost := ceilDiv(ctas, lim.sms*occ)*gemvFixedWork + ceilDiv(ctas, lim.sms)*(w*cps+ceilDiv((m+1)*cps, gemvStageCost))
			resident := min(occ, ceilDiv(ctas, lim.sms)) * w
			inFlight := resident * (gemvDepth(sc) - 1) * gemvStageBytes(sc)
			cost = max(cost, ceilDiv(cost*gemvInFlight, inFlight), ceilDiv(cost*gemvResidentWarps, resident))
			if bestCost < 0 || cost < bestCost || cost == bestCost && (s < best.splits || s == best.splits && w > best.warps) {
				best = gemvPlan{tiles: tiles, sc: sc, warps: w, splits: s, cps: cps, smem: smem}
				bestCost = cost
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

// launchGemv queues the decode kernel for op (after zeroing y when the
// plan adds partial sums), planning it once per shape, token count and
// options. The caller has checked the operands. It runs with the context
// current and the mutex held.
func (d *Device) launchGemv(op string, y, x, packed, meta *Buffer, dt DType, m, n, k int, o gemvOptions) error {
	key := gemvKey{m, n, k, o}
	p, ok := d.fn.gemvPlans[key]
	if !ok {
		var err error
		if p, err = planGemv(m, n, k, d.fn.gemvLim, o); err != nil {
			return argError("%s: %v", op, err)
		}
		if d.fn.gemvPlans == nil || len(d.fn.gemvPlans) >= gemvPlanCache {
			d.fn.gemvPlans = make(map[gemvKey]gemvPlan)
		}
		d.fn.gemvPlans[key] = p
	}
	if p.splits > 1 {
		if err := d.drv.check("cuMemsetD32Async", d.drv.cuMemsetD32A(y.ptr, 0, uint64(m)*uint64(n), d.stream)); err != nil {
			return fmt.Errorf("%s: zeroing y for %d slices: %w", op, p.splits, err)
		}
	}
	di := 0
	if dt == F16 {
		di = 1
	}
	fn := d.fn.gemv[di][bits.TrailingZeros(uint(p.tiles))][bits.TrailingZeros(uint(p.sc))-1]
	return d.launchShared("gemv", fn, p.grid(n), dim3{uint32(32 * p.warps), 1, 1}, p.smem,
		y.ptr, x.ptr, packed.ptr, meta.ptr, i32(m), i32(n), i32(k), i32(p.cps))
}
