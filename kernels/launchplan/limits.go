package launchplan

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Limits are the device properties the planner works with.
type Limits struct {
	SMs            int `json:"sms"`              // streaming multiprocessors
	SharedPerBlock int `json:"shared_per_block"` // dynamic shared memory one CTA may use: the opt-in maximum
	SharedPerSM    int `json:"shared_per_sm"`    // shared memory of one SM
	// Warpgroup reports that the sm_90a module ([ModuleSM90a]: the
	// warpgroup form and the hybrid) is loaded, on a device of compute
	// capability 9.0.
	Warpgroup bool `json:"warpgroup"`
}

// KnownLimits returns the limits of GPUs by name, for planning without
// the GPU at hand: "h100" and "h200" (SXM: 132 SMs, sm_90a), "a100"
// (108 SMs) and "l4" (58 SMs, sm_89). A device's own limits, read by
// package kernels, are what SparseMatmul plans with; TestKnownLimitsH100
// on a GPU host checks the H100's against them.
func KnownLimits() map[string]Limits {
	hopper := Limits{SMs: 132, SharedPerBlock: 232448, SharedPerSM: 233472, Warpgroup: true}
	return map[string]Limits{
		"h100": hopper,
		"h200": hopper,
		"a100": {SMs: 108, SharedPerBlock: 166912, SharedPerSM: 167936},
		"l4":   {SMs: 58, SharedPerBlock: 101376, SharedPerSM: 102400},
	}
}

// Geometry of the decode kernels (kernels/cuda/gemv.cuh).
const (
	// MaxTokens is the most tokens a decode kernel multiplies: 8 tiles of
	// 8 tokens.
	MaxTokens = 64
	// ChunkColumns is the dense columns of k in one chunk, the unit of
	// the kernels' pipelines; k must be a multiple of it.
	ChunkColumns = 64
	maxWarps     = 8  // the kernels' __launch_bounds__(256)
	minWarps     = 2  // the smallest CTA Choose picks unless forced
	chunkWords   = 32 // u32 words of one token's activations per chunk
	padWords     = 4  // padding words per token row in shared memory
	// chunkBytes is the DRAM bytes of one warp's chunk: 32 rows of 64
	// packed bytes and 8 bytes of meta.
	chunkBytes = 32 * (64 + 8)
	// warpgroupWarps is the warpgroup form's consumer warps (kWgWarps in
	// kernels/cuda/gemv_wg.cuh), one row block each.
	warpgroupWarps = 4
	maxGridY       = 65535 // CUDA's grid.y limit: the slices of k
	// MaxDim is the largest n or k a plan takes: every kernel parameter
	// and grid dimension of its launch then fits a 32-bit int.
	MaxDim = 1 << 30
)

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// ErrLimits is wrapped by ParseLimits' error for text that is not a
// device's limits.
var ErrLimits = errors.New("not device limits")

// ParseLimits reads limits given as text: the name of a GPU in
// KnownLimits (any case), or a JSON object with exactly the fields of
// Limits, as a launch document's "limits" holds them, e.g.
// {"sms":132,"shared_per_block":232448,"shared_per_sm":233472,"warpgroup":true}
// (what the serving package passes for the GPU it runs on). It returns
// the limits and a description: "h100 (named limits)" or "given limits".
// TestParseLimits and FuzzParseLimits hold it.
func ParseLimits(s string) (Limits, string, error) {
	if lim, ok := KnownLimits()[strings.ToLower(s)]; ok {
		return lim, strings.ToLower(s) + " (named limits)", nil
	}
	if !strings.HasPrefix(strings.TrimSpace(s), "{") {
		return Limits{}, "", fmt.Errorf("%w: %q is not a known GPU (%s) or a JSON object of limits", ErrLimits, s, strings.Join(knownNames(), ", "))
	}
	var raw struct {
		SMs            *int  `json:"sms"`
		SharedPerBlock *int  `json:"shared_per_block"`
		SharedPerSM    *int  `json:"shared_per_sm"`
		Warpgroup      *bool `json:"warpgroup"`
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return Limits{}, "", fmt.Errorf("%w: %v", ErrLimits, err)
	}
	if dec.More() {
		return Limits{}, "", fmt.Errorf("%w: data after the JSON object", ErrLimits)
	}
	if raw.SMs == nil || raw.SharedPerBlock == nil || raw.SharedPerSM == nil || raw.Warpgroup == nil {
		return Limits{}, "", fmt.Errorf("%w: want all of sms, shared_per_block, shared_per_sm and warpgroup", ErrLimits)
	}
	lim := Limits{SMs: *raw.SMs, SharedPerBlock: *raw.SharedPerBlock, SharedPerSM: *raw.SharedPerSM, Warpgroup: *raw.Warpgroup}
	if lim.SMs < 1 || lim.SMs > maxSMs || lim.SharedPerBlock < 1 || lim.SharedPerSM < lim.SharedPerBlock || lim.SharedPerSM > maxSharedPerSM {
		return Limits{}, "", fmt.Errorf("%w: %d SMs, %d bytes of shared memory per block, %d per SM", ErrLimits, lim.SMs, lim.SharedPerBlock, lim.SharedPerSM)
	}
	return lim, "given limits", nil
}

// Bounds of the limits ParseLimits takes: far above any GPU's, so that
// no plan's arithmetic on them overflows.
const (
	maxSMs         = 1 << 12
	maxSharedPerSM = 1 << 24
)

// knownNames returns KnownLimits' names, sorted.
func knownNames() []string {
	names := slices.Collect(maps.Keys(KnownLimits()))
	slices.Sort(names)
	return names
}
