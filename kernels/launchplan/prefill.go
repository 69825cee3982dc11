package launchplan

import (
	"fmt"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// PrefillTile is a tile shape of the prefill kernel (kernels/cuda/spmm_wg.cuh,
// in [ModuleSM90a]): Rows weight rows (128 per consumer warpgroup) by
// Tokens tokens.
type PrefillTile struct {
	Rows, Tokens int
	// Rate is the tile's throughput per SM on full waves, relative to the
	// fastest tile's, as measured on an H100 at 16384 tokens on the
	// Llama-3 projections (docs/kernels.md): what ChoosePrefill weighs
	// each tile's work by.
	Rate float64
}

// PrefillTiles returns the prefill kernel's tiles, largest first.
func PrefillTiles() []PrefillTile {
	return []PrefillTile{
		{Rows: 256, Tokens: 192, Rate: 1},
		{Rows: 256, Tokens: 128, Rate: 0.9},
		{Rows: 128, Tokens: 128, Rate: 0.7},
		{Rows: 128, Tokens: 64, Rate: 0.55},
	}
}

// Geometry of the prefill kernel (spmm_wg.cuh's Shape).
const (
	prefillStageK    = 64     // dense columns a stage
	prefillMaxStages = 8      // ring slots at most
	prefillSmemCap   = 232448 // the opt-in shared memory of sm_90, which Shape sizes its ring for
)

// Threads is the block size: the consumer warpgroups and the producer's.
func (t PrefillTile) Threads() int { return t.Rows + 128 }

// stageBytes is one ring slot: the activations (128 bytes a token), the
// packed values (64 bytes a row) and the meta (8 bytes a row).
func (t PrefillTile) stageBytes() int { return t.Tokens*128 + t.Rows*64 + t.Rows*8 }

// Stages is the ring depth: as many slots as fit beside the alignment
// slack and the barriers, at most prefillMaxStages.
func (t PrefillTile) Stages() int {
	return min(prefillMaxStages, (prefillSmemCap-1024-128)/t.stageBytes())
}

// SharedBytes is the dynamic shared memory a CTA needs: 1024 bytes of
// alignment slack, the ring and two mbarriers a slot.
func (t PrefillTile) SharedBytes() int { return 1024 + t.Stages()*t.stageBytes() + 16*t.Stages() }

// String names the tile as "r<Rows> t<Tokens>" (SparseCandidates' plan
// name is "prefill " and this).
func (t PrefillTile) String() string { return fmt.Sprintf("r%d t%d", t.Rows, t.Tokens) }

// Entry is the tile's entry point for element type ty ("bf16", "f16").
func (t PrefillTile) Entry(ty string) string {
	return fmt.Sprintf("spmm_wg_%s_r%d_t%d", ty, t.Rows, t.Tokens)
}

// PrefillEntryPoints returns every entry point of the prefill kernel.
func PrefillEntryPoints() []string {
	var out []string
	for _, t := range PrefillTiles() {
		for _, ty := range []string{"bf16", "f16"} {
			out = append(out, t.Entry(ty))
		}
	}
	return out
}

// Prefill is one launch of the prefill kernel: Entry on a persistent grid
// of Grid CTAs (at most one per SM) of Block threads with SharedBytes of
// dynamic shared memory. Its parameters are y, the tensor maps of x,
// packed and meta (by value), m, n, k, the bias (or null) and the output
// type (0 float32, 1 the element type); the maps are those of
// spmm_wg.cuh's TensorMap, with the tile's boxes.
type Prefill struct {
	Tile        PrefillTile
	Entry       string
	Grid        int
	Block       int
	SharedBytes int
}

// ChoosePrefill plans the prefill kernel for an m × n × k product of
// element type dt on a device with lim (lim.Warpgroup set). It picks the
// tile with the least estimated time, its waves (ceil(tiles / SMs)) times
// its work per tile over its Rate; ties go to the larger tile.
// TestChoosePrefill holds the choices measured best on an H100.
func ChoosePrefill(dt checkpoint.DType, m, n, k int, lim Limits) (Prefill, error) {
	ty, ok := elementName(dt)
	if !ok {
		return Prefill{}, fmt.Errorf("%w: prefill: element type %v, want BF16 or F16", ErrNoPlan, dt)
	}
	switch {
	case !lim.Warpgroup:
		return Prefill{}, fmt.Errorf("%w: prefill: needs the sm_90a module (compute capability 9.0)", ErrNoPlan)
	case m < 1 || m > MaxDim || n < 32 || n > MaxDim || n%32 != 0 || k < 64 || k > MaxDim || k%prefillStageK != 0:
		return Prefill{}, fmt.Errorf("%w: prefill: m = %d, n = %d, k = %d: want 1 ≤ m ≤ %d, n a multiple of 32 and k of 64, each at most %[5]d",
			ErrNoPlan, m, n, k, MaxDim)
	case lim.SMs < 1:
		return Prefill{}, fmt.Errorf("%w: prefill: %d SMs", ErrNoPlan, lim.SMs)
	}
	var best Prefill
	bestCost := 0.0
	for _, t := range PrefillTiles() {
		if t.SharedBytes() > lim.SharedPerBlock {
			continue
		}
		tiles := ceilDiv(m, t.Tokens) * ceilDiv(n, t.Rows)
		cost := float64(ceilDiv(tiles, lim.SMs)) * float64(t.Rows*t.Tokens) / t.Rate
		if best.Entry == "" || cost < bestCost {
			best = prefillWith(t, ty, m, n, lim)
			bestCost = cost
		}
	}
	if best.Entry == "" {
		return Prefill{}, fmt.Errorf("%w: prefill: no tile fits %d bytes of shared memory", ErrNoPlan, lim.SharedPerBlock)
	}
	return best, nil
}

// prefillWith is the launch of tile t for an m × n product.
func prefillWith(t PrefillTile, ty string, m, n int, lim Limits) Prefill {
	tiles := ceilDiv(m, t.Tokens) * ceilDiv(n, t.Rows)
	return Prefill{Tile: t, Entry: t.Entry(ty), Grid: min(tiles, lim.SMs), Block: t.Threads(), SharedBytes: t.SharedBytes()}
}

// WithTile returns the launch of the same product with tile t instead
// (tests and benchmarks force each tile so); p's element type must be
// dt's. A tile that needs more shared memory than lim allows leaves p as
// it is.
func (p Prefill) WithTile(t PrefillTile, dt checkpoint.DType, m, n int, lim Limits) Prefill {
	ty, ok := elementName(dt)
	if !ok || t.SharedBytes() > lim.SharedPerBlock {
		return p
	}
	return prefillWith(t, ty, m, n, lim)
}

// PrefillRecord is the prefill kernel's launch for the token counts From
// … To of one shape, as plain data for an engine that loads the PTX
// (docs/launch.md): load Module, look up Entry, allow it SharedBytes of
// dynamic shared memory, and launch it on min(ceil(m/Tokens)·ceil(n/Rows),
// SMs) CTAs of Block threads with the parameters y, the tensor maps of x
// (uint16 [m][k], box 64 × Tokens, 128-byte swizzle), packed (uint16
// [n][k/2], box 32 × Rows, 64-byte swizzle) and meta (uint32 [k/32][n],
// box Rows × 2, no swizzle), each by value, then m, n, k, the bias (or
// null) and the output type (0 float32, 1 the element type). The last
// record of a shape serves every m above its To too: correct for any m,
// and ChoosePrefill's own choice there on the Llama-family shapes
// (TestPrefillRecords).
type PrefillRecord struct {
	From        int    `json:"from"`
	To          int    `json:"to"`
	Module      string `json:"module"`
	Entry       string `json:"entry"`
	Rows        int    `json:"rows"`
	Tokens      int    `json:"tokens"`
	Block       int    `json:"block"`
	SharedBytes int    `json:"shared_bytes"`
}

// PrefillRecordsTo is how far PrefillRecords plans: the token counts past
// it take the last record (ChoosePrefill's tile no longer changes there
// on the Llama-family shapes: TestPrefillRecords).
const PrefillRecordsTo = 1 << 17

// PrefillRecords returns ChoosePrefill's launches of an n × k weight of
// element type dt for every token count from MaxTokens+1 to
// PrefillRecordsTo, as ranges of the same launch, in order. ChoosePrefill
// sees m only through ceil(m / Tokens), every Tokens a multiple of
// prefillBlock, so it is asked once per block of prefillBlock token
// counts (TestPrefillRecords checks both ends of every range).
func PrefillRecords(dt checkpoint.DType, n, k int, lim Limits) ([]PrefillRecord, error) {
	var out []PrefillRecord
	for from := MaxTokens + 1; from <= PrefillRecordsTo; from += prefillBlock {
		to := min(from+prefillBlock-1, PrefillRecordsTo)
		p, err := ChoosePrefill(dt, to, n, k, lim)
		if err != nil {
			return nil, err
		}
		if last := len(out) - 1; last >= 0 && out[last].Entry == p.Entry {
			out[last].To = to
			continue
		}
		out = append(out, PrefillRecord{From: from, To: to, Module: ModuleSM90a, Entry: p.Entry, Rows: p.Tile.Rows,
			Tokens: p.Tile.Tokens, Block: p.Block, SharedBytes: p.SharedBytes})
	}
	return out, nil
}

// prefillBlock divides every tile's Tokens and MaxTokens: the token
// counts ChoosePrefill cannot tell apart come in blocks of it
// (TestPrefillBlock).
const prefillBlock = 64
