package kernels

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/cuda"
)

// The decode-size kernel (cuda/gemv.cuh) serves SparseMatmul at m ≤
// gemvMaxTokens. Each CTA of up to gemvMaxWarps warps owns blocks of 32
// weight rows, kw warps per block, and one slice of K; it stages the
// slice's activations in shared memory, whole or in windows of a few
// stages, and each warp streams its block's rows through its own ring of
// cp.async stages of sc chunks, the block's kw warps taking the slice's
// stages in turn and adding their sums in shared memory at the end. With
// more than one slice the blocks store their partial sums to a workspace
// and the last of each row block to finish adds them up in slice order
// and writes y: one launch, and the same bits every run. On compute
// capability 9.0 the kernel also comes in a warpgroup form
// (cuda/gemv_wg.cuh, from the sm_90a module: a producer warp queues the
// weight copies, four consumer warps multiply with wgmma.sp), with the
// same results bit for bit; from gemvCoopMinTokens its launches of several
// slices may be cooperative, every slice sharing the sum (the same bits
// again), and fall back to the last slice's sum where the driver refuses
// them; and its launches may split the tokens into groups of 8·tiles, one
// per grid.z, each with its own slices (token groups: fewer partial sums
// at 64 tokens, the weight read from L2 once per group), two groups
// launched as thread-block clusters so that they run side by side. Its
// launches of two slices run as pairs, each two CTAs of a row group one
// cluster, the second pushing its sums into the first's shared memory
// (the same bits as the last slice's sum, which is the fallback where
// the driver refuses the clusters); and its CTAs hold 128 rows or 64.
// The sm_90a module also holds the hybrid (cuda/gemv_hy.cuh): CTAs of one
// 32-row block, the warpgroup form's producer feeding four mma.sp
// consumer warps, the mma.sp kernel's bits with kw = 4, which planGemv
// runs as a pair for k/v-sized weights at up to 8 tokens (hybridPlan).
// planGemv (gemvplan.go) chooses the launch; the candidates an engine
// times add token-group plans from gemvGroupMinTokens.
const (
	gemvMaxTokens  = 64 // 8 tiles of 8 tokens
	gemvMaxWarps   = 8  // the kernels' __launch_bounds__(256)
	gemvMinWarps   = 2  // the smallest CTA planGemv picks unless forced
	gemvChunk      = 64 // dense K columns per chunk
	gemvChunkWords = 32 // u32 words of one token's activations per chunk
	gemvPadWords   = 4  // padding words per token row in shared memory
	// gemvChunkBytes is the DRAM bytes of one warp's chunk: 32 rows of 64
	// packed bytes and 8 bytes of meta.
	gemvChunkBytes = 32 * (64 + 8)
)

// gemvStageSizes is the number of stage sizes (chunks per cp.async stage)
// the PTX has kernels for: 2 << j for functions.gemv[·][·][j].
const gemvStageSizes = 2

// gemvPlanCache bounds the plans a Device keeps (one per shape, token
// count and options); past it the cache starts over.
const gemvPlanCache = 4096

// gemvLimits are the device properties planGemv works with.
type gemvLimits struct {
	sms   int  // streaming multiprocessors
	smem  int  // dynamic shared memory one CTA may use (the opt-in maximum)
	perSM int  // shared memory of an SM
	wg    bool // the warpgroup form (sm_90a PTX) is loaded
}

// lookupGemv finds the decode kernels named prefix_{bf16,f16}_t{1,2,4,8}_s{2,4}
// in module mod.
func (d *Device) lookupGemv(fns *[2][4][gemvStageSizes]cuda.Function, mod cuda.Module, prefix string) error {
	for dt, ty := range []string{"bf16", "f16"} {
		for i := range fns[dt] {
			for j := range fns[dt][i] {
				name := fmt.Sprintf("%s_%s_t%d_s%d", prefix, ty, 1<<i, 2<<j)
				var err error
				if fns[dt][i][j], err = d.drv.ModuleGetFunction(mod, name); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// loadGemv looks up the decode kernels (and, when its module is loaded,
// their warpgroup form), reads the shared-memory limits and lets each
// kernel use the opt-in maximum. It runs with the context current and the
// mutex held.
func (d *Device) loadGemv() error {
	drv := d.drv
	if err := d.lookupGemv(&d.fn.gemv, d.mod, "gemv"); err != nil {
		return err
	}
	if d.mod90a != 0 {
		for f := range d.fn.gemvWG {
			if err := d.lookupGemv(&d.fn.gemvWG[f], d.mod90a, gemvWGFamily(f)); err != nil {
				return err
			}
		}
	}
	perSM, err := drv.DeviceAttribute(d.dev, cuda.AttrMaxSharedMemoryPerSM)
	if err != nil {
		return fmt.Errorf("reading the shared memory per SM: %w", err)
	}
	optin, err := drv.DeviceAttribute(d.dev, cuda.AttrMaxSharedMemoryPerBlockOptin)
	if err != nil {
		return fmt.Errorf("reading the opt-in shared memory per block: %w", err)
	}
	d.fn.gemvLim = gemvLimits{sms: d.info.SMs, smem: optin, perSM: perSM, wg: d.mod90a != 0}
	all := []*[2][4][gemvStageSizes]cuda.Function{&d.fn.gemv}
	for f := range d.fn.gemvWG {
		all = append(all, &d.fn.gemvWG[f])
	}
	for _, fns := range all {
		for dt := range fns {
			for i := range fns[dt] {
				for _, f := range fns[dt][i] {
					if f == 0 {
						continue // the warpgroup form is not loaded
					}
					if err := drv.FuncSetAttribute(f, cuda.FuncAttrMaxDynamicSharedSize, optin); err != nil {
						return fmt.Errorf("allowing %d bytes of shared memory to the decode kernel: %w", optin, err)
					}
				}
			}
		}
	}
	return nil
}

// gemvWork is the workspace of split-K launches: counters u32 ticket
// counters (one per 32-row block, two for a cooperative plan's arrivals and
// departures; zero between launches: each launch puts back the ones it
// used), then the f32 partial sums [splits][m][n]. One
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
func (w *gemvWork) ptr() cuda.DevicePtr { return w.buf.ptr + 4*cuda.DevicePtr(w.counters) }

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
		if err := d.drv.CtxSynchronize(); err != nil {
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
	if err := d.drv.MemsetD32Async(b.ptr, 0, counters, d.stream); err != nil {
		return errors.Join(err, d.free(b))
	}
	w.buf, w.counters = b, counters
	return nil
}

// gemvKey identifies a plan in a Device's cache: candidate cand (0:
// planGemv's choice) for a shape, token count and options.
type gemvKey struct {
	m, n, k int
	o       gemvOptions
	cand    int
}

// gemvPlanFor returns the cached plan for m tokens, an n × k weight,
// options o and candidate cand (see gemvCandidates), planning it (and
// growing the Device's split-K workspace for it) the first time. It runs
// with the context current and the mutex held.
func (d *Device) gemvPlanFor(m, n, k int, o gemvOptions, cand int) (gemvPlan, error) {
	key := gemvKey{m, n, k, o, cand}
	if p, ok := d.fn.gemvPlans[key]; ok {
		return p, nil
	}
	p, err := gemvCandidate(m, n, k, d.fn.gemvLim, o, cand)
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
	if counters, partials := p.workspace(m, n); counters > 0 {
		if err := d.growGemvWork(w, counters, partials); err != nil {
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

// launchGemv queues the decode kernel for op with candidate plan cand (0:
// planGemv's): one launch, planned once per shape, token count, options
// and candidate. The caller has checked the operands. It runs with the
// context current and the mutex held.
func (d *Device) launchGemv(op string, y, x, packed, meta *Buffer, dt checkpoint.DType, m, n, k int, o gemvOptions, cand int) error {
	p, err := d.gemvPlanFor(m, n, k, o, cand)
	if errors.Is(err, errGemvPlan) {
		return argError("%s: %v", op, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	var work cuda.DevicePtr // unused by a launch of one slice
	if p.splits > 1 {
		work = p.work.ptr()
	}
	di := 0
	if dt == checkpoint.F16 {
		di = 1
	}
	ti, si := bits.TrailingZeros(uint(p.tiles)), bits.TrailingZeros(uint(p.sc))-1
	block := cuda.Dim3{uint32(p.threads()), 1, 1}
	i32 := cuda.Int32
	if p.wg {
		launch := func(p gemvPlan) error {
			f := p.family()
			flag := 0
			if p.coop {
				flag = 1
			}
			cfg := cuda.LaunchConfig{Grid: p.grid(n), Block: block, SharedBytes: p.smem,
				Cooperative: p.coop, Cluster: p.clusterDims()}
			return d.launch(gemvWGFamily(f), d.fn.gemvWG[f][di][ti][si], cfg,
				uint64(y.ptr), uint64(x.ptr), uint64(packed.ptr), uint64(meta.ptr), uint64(work),
				i32(m), i32(n), i32(k), i32(p.xw), i32(flag))
		}
		err := launch(p)
		if p.coop && cuda.IsResult(err, cuda.ErrorCooperativeLaunchTooLarge) ||
			(p.cluster > 0 || p.pair) && (cuda.IsResult(err, cuda.ErrorInvalidClusterSize) || cuda.IsResult(err, cuda.ErrorNotSupported)) {
			// Fewer CTAs fit at once than planGemv counted on (a shared or
			// partitioned GPU), or the device takes no such clusters: the
			// last slice's sum, or no clusters (the same bits either way),
			// now and for the plan's later launches. Nothing was queued.
			p.coop, p.cluster, p.pair = false, 0, false
			d.fn.gemvPlans[gemvKey{m, n, k, o, cand}] = p
			return launch(p)
		}
		return err
	}
	return d.launch("gemv", d.fn.gemv[di][ti][si], grid3(p.grid(n), block, p.smem),
		uint64(y.ptr), uint64(x.ptr), uint64(packed.ptr), uint64(meta.ptr), uint64(work),
		i32(m), i32(n), i32(k), i32(p.xw), i32(p.kw))
}
