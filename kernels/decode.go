package kernels

import (
	"errors"
	"fmt"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/cuda"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// The decode kernels (cuda/gemv.cuh, and on compute capability 9.0 the
// warpgroup form and the hybrid of the sm_90a module) serve SparseMatmul
// at m ≤ launchplan.MaxTokens. Package launchplan chooses each launch and
// describes it as a launchplan.Launch record; the Device launches from
// the record alone: its entry point, grid, block, cluster, shared memory
// and parameters, and its fallback where the driver refuses a
// cooperative launch or the clusters (TestGPUDecodeCoopFallback,
// TestGPUDecodeClusterFallback, TestGPUDecodePair).

// decodePlanCache bounds the launch records a Device keeps (one per
// element type, shape, token count, options and candidate); past it the
// cache starts over.
const decodePlanCache = 4096

// decoder is what a Device keeps for the decode kernels: their functions
// by entry point, the limits they are planned with, the launch records
// made so far and the split-K workspace all records share. It is used
// with the Device's context current and its mutex held.
type decoder struct {
	funcs map[string]cuda.Function // every entry point of launchplan.EntryPoints (and PrefillEntryPoints) in the loaded modules
	lim   launchplan.Limits
	// note says why the sm_90a module (the warpgroup form) is not loaded.
	note    string
	records map[decodeKey]launchplan.Launch
	work    workspace
}

// decodeKey identifies a launch record in a Device's cache: candidate
// cand (0: launchplan.Choose's plan) for an element type, shape, token
// count and options.
type decodeKey struct {
	dt      checkpoint.DType
	m, n, k int
	o       launchplan.Options
	cand    int
}

// loadDecode looks up the decode kernels of the loaded modules and the
// prefill kernel of the sm_90a one, reads the shared-memory limits and
// lets each kernel use the opt-in maximum. It
// runs with the context current and the mutex held.
func (d *Device) loadDecode() error {
	drv := d.drv
	d.dec.funcs = make(map[string]cuda.Function)
	modules := []struct {
		mod  cuda.Module
		name string
	}{{d.mod, launchplan.ModuleSM80}, {d.mod90a, launchplan.ModuleSM90a}}
	for _, m := range modules {
		if m.mod == 0 {
			continue // the sm_90a module is not loaded
		}
		names := launchplan.EntryPoints(m.name)
		if m.name == launchplan.ModuleSM90a {
			names = append(names, launchplan.PrefillEntryPoints()...)
		}
		for _, name := range names {
			f, err := drv.ModuleGetFunction(m.mod, name)
			if err != nil {
				return err
			}
			d.dec.funcs[name] = f
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
	d.dec.lim = launchplan.Limits{SMs: d.info.SMs, SharedPerBlock: optin, SharedPerSM: perSM, Warpgroup: d.mod90a != 0}
	for _, f := range d.dec.funcs {
		if err := drv.FuncSetAttribute(f, cuda.FuncAttrMaxDynamicSharedSize, optin); err != nil {
			return fmt.Errorf("allowing %d bytes of shared memory to the decode and prefill kernels: %w", optin, err)
		}
	}
	return nil
}

// decodeRecord returns the cached launch record for key, planning it (and
// growing the Device's split-K workspace for it) the first time. It runs
// with the context current and the mutex held.
func (d *Device) decodeRecord(key decodeKey) (launchplan.Launch, error) {
	if l, ok := d.dec.records[key]; ok {
		return l, nil
	}
	p, err := launchplan.Candidate(key.m, key.n, key.k, d.dec.lim, key.o, key.cand)
	if err != nil {
		return launchplan.Launch{}, err
	}
	l, err := p.Launch(key.dt, key.m, key.n, key.k)
	if err != nil {
		return launchplan.Launch{}, err
	}
	if l.Workspace.Counters > 0 {
		if err := d.growWorkspace(l.Workspace.Counters, l.Workspace.Partials); err != nil {
			return launchplan.Launch{}, fmt.Errorf("allocating the split-K workspace: %w", err)
		}
	}
	if d.dec.records == nil || len(d.dec.records) >= decodePlanCache {
		d.dec.records = make(map[decodeKey]launchplan.Launch)
	}
	d.dec.records[key] = l
	return l, nil
}

// launchDecode queues the decode kernel for op with candidate plan cand
// (0: launchplan.Choose's): one launch, planned once per element type,
// shape, token count, options and candidate. The caller has checked the
// operands. It runs with the context current and the mutex held.
func (d *Device) launchDecode(op string, ops SparseOperands, o launchplan.Options, cand int) error {
	key := decodeKey{ops.DType, ops.M, ops.N, ops.K, o, cand}
	l, err := d.decodeRecord(key)
	if errors.Is(err, launchplan.ErrNoPlan) {
		return argError("%s: %v", op, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	err = d.launchRecord(l, ops)
	if l.Fallback != nil && refused(l, err) {
		// Fewer CTAs fit at once than the plan counted on (a shared or
		// partitioned GPU), or the device takes no such clusters: the
		// record's fallback (the same bits), now and for the plan's later
		// launches. Nothing was queued.
		l = *l.Fallback
		d.dec.records[key] = l
		return d.launchRecord(l, ops)
	}
	return err
}

// refused reports whether err is the driver refusing launch l's
// cooperative launch or its clusters, where l's fallback serves.
func refused(l launchplan.Launch, err error) bool {
	return l.Cooperative && cuda.IsResult(err, cuda.ErrorCooperativeLaunchTooLarge) ||
		l.Cluster != [3]uint32{} && (cuda.IsResult(err, cuda.ErrorInvalidClusterSize) || cuda.IsResult(err, cuda.ErrorNotSupported))
}

// launchRecord queues launch record l on the operands of ops: the
// function of its entry point, its parameters built from their sources
// (the bias null where ops has none, out 1 where y is of the element
// type).
// It runs with the context current and the mutex held.
func (d *Device) launchRecord(l launchplan.Launch, ops SparseOperands) error {
	fn, ok := d.dec.funcs[l.Entry]
	if !ok {
		return fmt.Errorf("launch %s: no such entry point loaded (module %s)", l.Entry, l.Module)
	}
	args := make([]uint64, len(l.Params))
	for i, p := range l.Params {
		switch p.Source {
		case launchplan.SourceY:
			args[i] = uint64(ops.Y.ptr)
		case launchplan.SourceX:
			args[i] = uint64(ops.X.ptr)
		case launchplan.SourcePacked:
			args[i] = uint64(ops.Packed.ptr)
		case launchplan.SourceMeta:
			args[i] = uint64(ops.Meta.ptr)
		case launchplan.SourceWorkspace:
			if l.Workspace != (launchplan.Workspace{}) { // else unused: null
				args[i] = uint64(d.dec.work.ptr())
			}
		case launchplan.SourceBias:
			if ops.Bias != nil { // else none: null
				args[i] = uint64(ops.Bias.ptr)
			}
		case launchplan.SourceOut:
			if ops.elementY() {
				args[i] = cuda.Int32(1)
			}
		case launchplan.SourceValue:
			args[i] = cuda.Int32(p.Value)
		default:
			return fmt.Errorf("launch %s: parameter %s from unknown source %q", l.Entry, p.Name, p.Source)
		}
	}
	cfg := cuda.LaunchConfig{Grid: cuda.Dim3(l.Grid), Block: cuda.Dim3(l.Block), SharedBytes: l.SharedBytes,
		Cooperative: l.Cooperative, Cluster: cuda.Dim3(l.Cluster)}
	return d.launch(l.Entry, fn, cfg, args...)
}
