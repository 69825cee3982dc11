package launchplan

import (
	"fmt"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// The PTX modules the decode kernels live in, as repository paths (both
// embedded in package kernels).
const (
	// ModuleSM80 is built for compute_80: the mma.sp form, for every
	// device of compute capability 8.0 or newer.
	ModuleSM80 = "kernels/ptx/sfsurgery.ptx"
	// ModuleSM90a is built for the arch-specific sm_90a target: the
	// warpgroup form and the hybrid, for compute capability 9.0 only
	// (Limits.Warpgroup).
	ModuleSM90a = "kernels/ptx/sfsurgery_sm90a.ptx"
)

// Launch is one launch of a decode kernel, as plain data that an engine
// loading the PTX executes without the planner: load Module, look up
// Entry, allow it SharedBytes of dynamic shared memory
// (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES; package kernels
// allows every entry point the opt-in maximum when it loads the module),
// and launch it with cuLaunchKernelEx on Grid, Block and, where not zero,
// Cluster, cooperatively if Cooperative, passing Params in order. Where
// the driver refuses it, launch Fallback instead. A record serves every
// output type and bias: the caller passes its y (float32 or the element
// type), its bias or null, and the out flag that says y's type.
// TestLaunchRecords holds the records of known plans.
type Launch struct {
	// Module is the PTX file holding Entry: ModuleSM80 or ModuleSM90a.
	Module string `json:"module"`
	// Entry is the kernel's entry point, e.g. "gemv_wg_bf16_t8_s2":
	// family, element type, 8-token tiles, chunks per stage.
	Entry string `json:"entry"`
	// Grid is the CTAs along x (row groups), y (slices of k) and z (token
	// groups).
	Grid [3]uint32 `json:"grid"`
	// Block is the threads per CTA along x, y and z.
	Block [3]uint32 `json:"block"`
	// Cluster is the CTAs per thread-block cluster along x, y and z, or
	// all zero for a launch without clusters.
	Cluster [3]uint32 `json:"cluster"`
	// SharedBytes is the dynamic shared memory per CTA.
	SharedBytes int `json:"shared_bytes"`
	// Cooperative asks for every CTA resident at once
	// (CU_LAUNCH_ATTRIBUTE_COOPERATIVE).
	Cooperative bool `json:"cooperative"`
	// Workspace is the split-K workspace the parameter of source
	// "workspace" points into; all zero where the launch needs none
	// (then pass a null pointer).
	Workspace Workspace `json:"workspace"`
	// Params are the kernel's parameters in order.
	Params []Param `json:"params"`
	// Fallback is the launch to queue instead when the driver refuses
	// this one: a cooperative launch with CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
	// (fewer CTAs fit at once than planned, as on a shared or partitioned
	// GPU), a launch in clusters with CUDA_ERROR_INVALID_CLUSTER_SIZE or
	// CUDA_ERROR_NOT_SUPPORTED. Nothing was queued then; the fallback
	// computes the same bits, and is what to launch for the plan's later
	// calls too. It has no fallback of its own; nil where the launch is
	// neither cooperative nor in clusters.
	Fallback *Launch `json:"fallback,omitempty"`
}

// Workspace is the split-K workspace of a launch of several slices: the
// u32 ticket counters, then the f32 partial sums, in one allocation. The
// workspace parameter points to the partial sums, which must start
// 16-byte aligned; the counters lie directly below that pointer (an
// engine may keep more counters below them: package kernels rounds their
// space up to 32 counters and shares one workspace among all its plans).
type Workspace struct {
	// Counters is the u32 ticket counters the launch uses below the
	// pointer. Zero them once, before the first launch: every launch
	// leaves them zero again.
	Counters int `json:"counters"`
	// Partials is the f32 partial sums from the pointer on. They need no
	// initialisation.
	Partials int64 `json:"partials"`
}

// Bytes returns the bytes of w: its counters and its partial sums.
func (w Workspace) Bytes() int64 { return 4 * (int64(w.Counters) + w.Partials) }

// Param is one kernel parameter of a launch.
type Param struct {
	// Name is the parameter's name in the CUDA source (kernels/cuda):
	// Y, X, P, U, W, M, N, K, xwin, kw or coop, B, out.
	Name string `json:"name"`
	// CType is its C type: "void*", "float*", "const uint16_t*",
	// "const uint32_t*" or "int" (32 bits).
	CType string `json:"c_type"`
	// Source says what to pass: the device address of an operand (null
	// for a bias of none), the out flag, or Value.
	Source Source `json:"source"`
	// Value is the int to pass where Source is SourceValue, else 0.
	Value int `json:"value"`
}

// Source names what a kernel parameter carries.
type Source string

// The sources of kernel parameters.
const (
	SourceY         Source = "y"         // the output y [m][n], float32 or the element type (as out says), 16-byte aligned
	SourceX         Source = "x"         // the activations x [m][k] of the element type
	SourcePacked    Source = "packed"    // the weight's kept values, packed [n][k/2]
	SourceMeta      Source = "meta"      // the weight's meta, as stored (int16, n·k/16 values)
	SourceWorkspace Source = "workspace" // the workspace's partial sums (Launch.Workspace), or null
	SourceBias      Source = "bias"      // the bias b [n] in the element type, or null for none
	SourceOut       Source = "out"       // 0 when y is float32, 1 when y is the element type: the caller's choice, as y's type
	SourceValue     Source = "value"     // the literal Param.Value
)

// elementName returns the name of element type dt in the entry points,
// or false for a type the decode kernels do not take.
func elementName(dt checkpoint.DType) (string, bool) {
	switch dt {
	case checkpoint.BF16:
		return "bf16", true
	case checkpoint.F16:
		return "f16", true
	}
	return "", false
}

// Launch returns the launch record of p for elements of type dt (BF16 or
// F16), m tokens and an n × k weight: the m, n and k p was planned for.
func (p Plan) Launch(dt checkpoint.DType, m, n, k int) (Launch, error) {
	ty, ok := elementName(dt)
	if !ok {
		return Launch{}, fmt.Errorf("%w: element type %v (the decode kernels take BF16 and F16)", ErrNoPlan, dt)
	}
	if p.TokenTiles < 1 || p.Warps < 1 || p.WarpsPerRowBlock < 1 || p.Slices < 1 || p.Slices > maxGridY {
		return Launch{}, fmt.Errorf("%w: not a plan: %+v", ErrNoPlan, p)
	}
	if !decodeShape(m, n, k) {
		return Launch{}, fmt.Errorf("%w: m = %d, n = %d, k = %d is not a shape of the decode kernels", ErrNoPlan, m, n, k)
	}
	l := p.launch(ty, m, n, k)
	if p.Cooperative || p.Pair || p.Cluster > 0 {
		// The last slice's sum and no clusters, the same bits. The shared
		// memory stays the plan's.
		q := p
		q.Cooperative, q.Pair, q.Cluster = false, false, 0
		f := q.launch(ty, m, n, k)
		f.SharedBytes = p.SharedBytes
		l.Fallback = &f
	}
	return l, nil
}

// launch is Launch without the fallback, for type name ty.
func (p Plan) launch(ty string, m, n, k int) Launch {
	counters, partials := p.workspace(m, n)
	l := Launch{
		Module:      ModuleSM80,
		Entry:       entryPoint(p.family(), ty, p.TokenTiles, p.ChunksPerStage),
		Grid:        p.grid(n),
		Block:       [3]uint32{uint32(p.threads()), 1, 1},
		Cluster:     p.clusterDims(),
		SharedBytes: p.SharedBytes,
		Cooperative: p.Cooperative,
		Workspace:   Workspace{Counters: counters, Partials: partials},
	}
	last := Param{Name: "kw", CType: "int", Source: SourceValue, Value: p.WarpsPerRowBlock}
	if p.Warpgroup {
		l.Module = ModuleSM90a
		last = Param{Name: "coop", CType: "int", Source: SourceValue}
		if p.Cooperative {
			last.Value = 1
		}
	}
	l.Params = []Param{
		{Name: "Y", CType: "void*", Source: SourceY},
		{Name: "X", CType: "const uint16_t*", Source: SourceX},
		{Name: "P", CType: "const uint16_t*", Source: SourcePacked},
		{Name: "U", CType: "const uint32_t*", Source: SourceMeta},
		{Name: "W", CType: "float*", Source: SourceWorkspace},
		{Name: "M", CType: "int", Source: SourceValue, Value: m},
		{Name: "N", CType: "int", Source: SourceValue, Value: n},
		{Name: "K", CType: "int", Source: SourceValue, Value: k},
		{Name: "xwin", CType: "int", Source: SourceValue, Value: p.WindowChunks},
		last,
		{Name: "B", CType: "const uint16_t*", Source: SourceBias},
		{Name: "out", CType: "int", Source: SourceOut},
	}
	return l
}

// family returns the name of the kernel family that runs p, the entry
// points' prefix: gemv (the mma.sp form, ModuleSM80), or in ModuleSM90a
// gemv_wg and gemv_wg64 (the warpgroup form's CTAs of 128 and 64 rows),
// gemv_hy (the hybrid's of 32), each also with _pair for the pair sum.
func (p Plan) family() string {
	if !p.Warpgroup {
		return "gemv"
	}
	f := "gemv_wg"
	switch p.RowBlocks {
	case 2:
		f = "gemv_wg64"
	case 1:
		f = "gemv_hy"
	}
	if p.Pair {
		f += "_pair"
	}
	return f
}

// entryPoint returns the entry point of family for element type ty, tiles
// 8-token tiles and stages of sc chunks.
func entryPoint(family, ty string, tiles, sc int) string {
	return fmt.Sprintf("%s_%s_t%d_s%d", family, ty, tiles, sc)
}

// EntryPoints returns every decode entry point of module (ModuleSM80 or
// ModuleSM90a) that a Launch can name, or nil for another module.
// TestEntryPointsInPTX checks them against the PTX's .entry lines.
func EntryPoints(module string) []string {
	var families []string
	switch module {
	case ModuleSM80:
		families = []string{"gemv"}
	case ModuleSM90a:
		families = []string{"gemv_wg", "gemv_wg64", "gemv_wg_pair", "gemv_wg64_pair", "gemv_hy", "gemv_hy_pair"}
	default:
		return nil
	}
	var out []string
	for _, f := range families {
		for _, ty := range []string{"bf16", "f16"} {
			for _, tiles := range []int{1, 2, 4, 8} {
				for _, sc := range []int{2, 4} {
					out = append(out, entryPoint(f, ty, tiles, sc))
				}
			}
		}
	}
	return out
}
