package launchplan

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// PrefillTile is a tile shape of the prefill kernel (kernels/cuda/spmm_wg.cuh,
// in [ModuleSM90a]): Rows weight rows (128 per consumer warpgroup) by
// Tokens tokens.
type PrefillTile struct {
	Rows, Tokens int
	// StageUS and SplitStageUS are a unit's time per 64-column stage of
	// K, in µs, in the plain and the split-K entry point: what
	// PrefillCandidates weighs each unit's stages by. Fitted, with the
	// cost model's other constants, to every plan `sfsurgery bench
	// --out-dtype bf16` timed on an H200 from 128 to 4096 tokens on the
	// Llama-3 projections and their stacks, y in BF16 as the serving
	// package writes it (TestPrefillAgainstBench replays them,
	// TestPrefillFit fits them).
	StageUS, SplitStageUS float64
}

// PrefillTiles returns the prefill kernel's tiles, largest first.
func PrefillTiles() []PrefillTile {
	return []PrefillTile{
		{Rows: 256, Tokens: 192, StageUS: 0.694, SplitStageUS: 0.596},
		{Rows: 256, Tokens: 128, StageUS: 0.418, SplitStageUS: 0.419},
		{Rows: 128, Tokens: 128, StageUS: 0.170, SplitStageUS: 0.248},
		{Rows: 128, Tokens: 64, StageUS: 0.134, SplitStageUS: 0.151},
	}
}

// Geometry of the prefill kernel (spmm_wg.cuh's Shape).
const (
	prefillStageK    = 64     // dense columns of the cost model's stage, and what K must be a multiple of
	prefillMaxStages = 8      // ring slots at most
	prefillSmemCap   = 232448 // the opt-in shared memory of sm_90, which Shape sizes its ring for
)

// Threads is the block size: the consumer warpgroups and the producer's.
func (t PrefillTile) Threads() int { return t.Rows + 128 }

// StageK is the columns of K one stage of the kernel brings into a ring
// slot (spmm_wg.cuh's Shape::kCols): 128 for the 128-row tiles, 64 for
// the 256-row ones. The packed values' tensor map has boxes of StageK/2
// columns in the StageK-byte swizzle, the meta's boxes StageK/32 rows.
func (t PrefillTile) StageK() int {
	if t.Rows == 128 {
		return 128
	}
	return 64
}

// stageBytes is one ring slot: the activations (2·StageK bytes a
// token), the packed values (StageK bytes a row) and the meta (StageK/8
// bytes a row).
func (t PrefillTile) stageBytes() int {
	c := t.StageK()
	return t.Tokens*2*c + t.Rows*c + t.Rows*c/8
}

// Stages is the ring depth: as many slots as fit beside the alignment
// slack and the barriers, at most prefillMaxStages.
func (t PrefillTile) Stages() int {
	return min(prefillMaxStages, (prefillSmemCap-1024-128)/t.stageBytes())
}

// SharedBytes is the dynamic shared memory a CTA needs: 1024 bytes of
// alignment slack, the ring and two mbarriers a slot.
func (t PrefillTile) SharedBytes() int { return 1024 + t.Stages()*t.stageBytes() + 16*t.Stages() }

// String names the tile as "r<Rows> t<Tokens>" (Prefill.String's middle).
func (t PrefillTile) String() string { return fmt.Sprintf("r%d t%d", t.Rows, t.Tokens) }

// Entry is the tile's entry point for element type ty ("bf16", "f16")
// and K in splits splits: the plain product for one, its split-K build
// (suffix "_splitk") for more.
func (t PrefillTile) Entry(ty string, splits int) string {
	e := fmt.Sprintf("spmm_wg_%s_r%d_t%d", ty, t.Rows, t.Tokens)
	if splits > 1 {
		e += "_splitk"
	}
	return e
}

// PrefillEntryPoints returns every entry point of the prefill kernel.
func PrefillEntryPoints() []string {
	var out []string
	for _, t := range PrefillTiles() {
		for _, ty := range []string{"bf16", "f16"} {
			out = append(out, t.Entry(ty, 1), t.Entry(ty, 2))
		}
	}
	return out
}

// Prefill is one launch of the prefill kernel: Entry on a grid of Grid
// CTAs of Block threads with SharedBytes of dynamic shared memory, K split
// Splits ways. Unsplit, the grid is persistent (at most one CTA per SM);
// split, it is every unit, in clusters of Splits CTAs along x. Its
// parameters are y, the tensor maps of x, packed and meta (by value), m,
// n, k, the bias (or null), the output type (0 float32, 1 the element
// type) and Splits; the maps are those of spmm_wg.cuh's TensorMap, with
// the tile's boxes.
type Prefill struct {
	Tile        PrefillTile
	Splits      int // K in this many splits, each a unit of work (1: none)
	Entry       string
	Grid        int
	Block       int
	SharedBytes int
}

// Cluster is the launch's cluster size along x: Splits for a split
// launch, 0 (no clusters) for one split.
func (p Prefill) Cluster() int {
	if p.Splits > 1 {
		return p.Splits
	}
	return 0
}

// MaxPrefillSplits bounds the splits of K the planner considers and an
// executor accepts.
const MaxPrefillSplits = 8

// Cost model of the prefill kernel, in µs (fitted with the tiles'
// StageUS; TestPrefillAgainstBench).
const (
	// prefillUnitUS is a unit's time besides its stages: the ring
	// filling, the last products and the stores.
	prefillUnitUS = 1.851
	// prefillSplitUS and prefillSumKiBUS are what splitting K adds: once,
	// and per KiB of f32 sums a CTA reads from the cluster's other CTAs
	// in the sum, which the cluster network's bandwidth bounds
	// (docs/kernels.md §2.6).
	prefillSplitUS  = 2.773
	prefillSumKiBUS = 0.037
	// prefillTrafficUS is the time per MiB that the CTAs running at once
	// bring into shared memory a stage, over the launch's stages: a
	// stage takes longer the more CTAs share L2 and memory bandwidth.
	prefillTrafficUS = 0.0343
	// prefillWeightUS is the time per GiB of weight (packed values and
	// meta) that a 64-column stage takes on top of its tile's: a stage
	// takes longer the larger the weight, whose stream comes from memory
	// rather than L2 (the 70B shapes at 128 tokens, where r128 t128 in two
	// splits, half the stages, beats r128 t64 unsplit by 14%).
	prefillWeightUS = 0.0966
)

// PrefillClusterCTAs is the most CTAs of the prefill kernel (one a SM:
// every tile's ring takes over half an SM's shared memory) that run at
// once in clusters of splits CTAs on sms SMs. A cluster runs on one GPC,
// so a size that does not divide the GPCs' SM counts leaves SMs idle.
// cluster_occupancy.cu (cudaOccupancyMaxActiveClusters at 150–200 KB a
// CTA) measured on an H200 (132 SMs), clusters of 1 to 8: 132 alone, 66
// of 2, 39 of 3, 30 of 4, 22 of 5, 17 of 6, 15 of 7 and 15 of 8 (an H100
// gave the same for 1, 2, 4 and 8). Another SM count takes the same share
// of its SMs, in whole clusters (TestPrefillClusterCTAs).
func PrefillClusterCTAs(sms, splits int) int {
	if splits <= 1 {
		return sms
	}
	measured := [...]int{2: 132, 3: 117, 4: 120, 5: 110, 6: 102, 7: 105, 8: 120}
	ctas := 0
	if splits < len(measured) {
		ctas = measured[splits]
	}
	if ctas == 0 { // a size not measured: the smallest share measured
		ctas = 102
	}
	if sms != 132 {
		ctas = ctas * sms / 132
	}
	return ctas / splits * splits
}

// prefillSplitStages is spmm_wg.cuh's Splits: the stages of the first
// (longest) of splits splits of k's ceil(k/stageK) stages (even: a stage
// past k pads an odd count), and whether every split has work.
func prefillSplitStages(k, stageK, splits int) (int, bool) {
	nk := ceilDiv(k, stageK)
	per := (ceilDiv(nk, splits) + 1) &^ 1
	return per, (splits-1)*per < nk
}

// prefillTerms are the cost model's terms for one launch, each weighed
// by one constant: stages, the waves of units times the 64-column
// stages of a unit's split (its kernel stages, StageK columns each, in
// 64-column units; by the tile's StageUS, or SplitStageUS for several
// splits); waves (by prefillUnitUS); traffic, the kernel stages times the
// MiB a stage brings into the shared memory of the CTAs that run at once
// (by prefillTrafficUS); and, for several splits, split = 1 (by
// prefillSplitUS) and sumKiB = Rows·Tokens·4·(splits−1)/splits/1024,
// the KiB a CTA reads from the others in the sum (by prefillSumKiBUS).
// weight, the 64-column stages times the weight's GiB (n·k·9/16 bytes;
// by prefillWeightUS).
// The model is linear in its constants, so TestPrefillFit fits them to
// bench rows by least squares.
type prefillTerms struct{ stages, waves, split, sumKiB, traffic, weight float64 }

// termsOf returns the terms of tile t with k in splits splits for an m ×
// n × k product on sms SMs; the waves count the CTAs that run at once in
// the launch's clusters (PrefillClusterCTAs).
func termsOf(t PrefillTile, splits, m, n, k, sms int) prefillTerms {
	per, _ := prefillSplitStages(k, t.StageK(), splits)
	units := ceilDiv(m, t.Tokens) * ceilDiv(n, t.Rows) * splits
	ctas := max(1, PrefillClusterCTAs(sms, splits))
	waves := float64(ceilDiv(units, ctas))
	active := float64(min(units, ctas))
	x := prefillTerms{stages: waves * float64(per*t.StageK()/prefillStageK), waves: waves,
		traffic: waves * float64(per) * active * float64(t.stageBytes()) / (1 << 20)}
	x.weight = x.stages * float64(n) * float64(k) * 9 / 16 / (1 << 30)
	if splits > 1 {
		x.split, x.sumKiB = 1, float64(t.Rows*t.Tokens*4*(splits-1))/float64(splits)/1024
	}
	return x
}

// prefillCost is the model's time, in µs, of tile t with k in splits
// splits for an m × n × k product on sms SMs: its terms (termsOf) by the
// constants.
func prefillCost(t PrefillTile, splits, m, n, k, sms int) float64 {
	x := termsOf(t, splits, m, n, k, sms)
	stage := t.StageUS
	if splits > 1 {
		stage = t.SplitStageUS
	}
	return x.stages*stage + x.waves*prefillUnitUS + x.split*prefillSplitUS + x.sumKiB*prefillSumKiBUS + x.traffic*prefillTrafficUS + x.weight*prefillWeightUS
}

// String names p as kernels.Device.SparseCandidates lists it: "prefill",
// the tile and the splits of K, e.g. "prefill r128 t64 s4".
func (p Prefill) String() string { return fmt.Sprintf("prefill %s s%d", p.Tile, p.Splits) }

// ChoosePrefill plans the prefill kernel for an m × n × k product of
// element type dt on a device with lim (lim.Warpgroup set): the first of
// PrefillCandidates. TestChoosePrefill holds the choices measured best.
func ChoosePrefill(dt checkpoint.DType, m, n, k int, lim Limits) (Prefill, error) {
	ps, err := PrefillCandidates(dt, m, n, k, lim, 1)
	if err != nil {
		return Prefill{}, err
	}
	return ps[0], nil
}

// PrefillCandidates returns up to limit launches of the prefill kernel for
// an m × n × k product, least estimated time first: every tile that fits
// lim's shared memory, unsplit and, where its tiles leave SMs idle, with
// K in up to MaxPrefillSplits splits that all have work and whose
// clusters fill at most one wave (PrefillClusterCTAs), timed by the cost model (prefillCost: waves of units, their stages,
// and the split-K sum); ties go to the larger tile, then the fewer
// splits.
func PrefillCandidates(dt checkpoint.DType, m, n, k int, lim Limits, limit int) ([]Prefill, error) {
	return prefillCandidates(dt, m, n, k, lim, limit, MaxPrefillSplits)
}

// prefillCandidates is PrefillCandidates with at most maxSplits splits.
func prefillCandidates(dt checkpoint.DType, m, n, k int, lim Limits, limit, maxSplits int) ([]Prefill, error) {
	ty, ok := elementName(dt)
	if !ok {
		return nil, fmt.Errorf("%w: prefill: element type %v, want BF16 or F16", ErrNoPlan, dt)
	}
	switch {
	case !lim.Warpgroup:
		return nil, fmt.Errorf("%w: prefill: needs the sm_90a module (compute capability 9.0)", ErrNoPlan)
	case m < 1 || m > MaxDim || n < 32 || n > MaxDim || n%32 != 0 || k < 64 || k > MaxDim || k%prefillStageK != 0:
		return nil, fmt.Errorf("%w: prefill: m = %d, n = %d, k = %d: want 1 ≤ m ≤ %d, n a multiple of 32 and k of 64, each at most %[5]d",
			ErrNoPlan, m, n, k, MaxDim)
	case lim.SMs < 1:
		return nil, fmt.Errorf("%w: prefill: %d SMs", ErrNoPlan, lim.SMs)
	}
	type scored struct {
		p    Prefill
		cost float64
	}
	var all []scored
	for _, t := range PrefillTiles() {
		if t.SharedBytes() > lim.SharedPerBlock {
			continue
		}
		tiles := ceilDiv(m, t.Tokens) * ceilDiv(n, t.Rows)
		for s := 1; s <= maxSplits; s++ {
			if _, ok := prefillSplitStages(k, t.StageK(), s); !ok || s > 1 && tiles*s > PrefillClusterCTAs(lim.SMs, s) {
				break
			}
			all = append(all, scored{prefillWith(t, s, ty, m, n, lim), prefillCost(t, s, m, n, k, lim.SMs)})
		}
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("%w: prefill: no tile fits %d bytes of shared memory", ErrNoPlan, lim.SharedPerBlock)
	}
	slices.SortStableFunc(all, func(a, b scored) int { return cmp.Compare(a.cost, b.cost) })
	out := make([]Prefill, 0, min(limit, len(all)))
	for _, c := range all[:min(limit, len(all))] {
		out = append(out, c.p)
	}
	return out, nil
}

// prefillWith is the launch of tile t with K in splits splits for an m ×
// n product.
func prefillWith(t PrefillTile, splits int, ty string, m, n int, lim Limits) Prefill {
	units := ceilDiv(m, t.Tokens) * ceilDiv(n, t.Rows) * splits
	grid := min(units, lim.SMs)
	if splits > 1 {
		grid = units
	}
	return Prefill{Tile: t, Splits: splits, Entry: t.Entry(ty, splits), Grid: grid, Block: t.Threads(),
		SharedBytes: t.SharedBytes()}
}

// WithTile returns the launch of the same m × n × k product with tile t
// and K in splits splits instead (tests and benchmarks force each so);
// p's element type must be dt's. A tile that needs more shared memory
// than lim allows, or splits of which one would have no work, leave p as
// it is.
func (p Prefill) WithTile(t PrefillTile, splits int, dt checkpoint.DType, m, n, k int, lim Limits) Prefill {
	ty, ok := elementName(dt)
	if !ok || t.SharedBytes() > lim.SharedPerBlock || splits < 1 || splits > MaxPrefillSplits {
		return p
	}
	if _, ok := prefillSplitStages(k, t.StageK(), splits); !ok {
		return p
	}
	return prefillWith(t, splits, ty, m, n, lim)
}

// PrefillRecord is the prefill kernel's launch for the token counts From
// … To of one shape, as plain data for an engine that loads the PTX
// (docs/launch.md): load Module, look up Entry, allow it SharedBytes of
// dynamic shared memory, and launch it on min(ceil(m/Tokens)·ceil(n/Rows),
// SMs) CTAs of Block threads with the parameters y, the tensor maps of x
// (uint16 [m][k], box 64 × Tokens, 128-byte swizzle), packed (uint16
// [n][k/2], box C/2 × Rows, C-byte swizzle) and meta (uint32 [k/32][n],
// box Rows × C/32, no swizzle), C the tile's StageK (128 for 128 rows, 64
// for 256), each by value, then m, n, k, the bias (or
// null), the output type (0 float32, 1 the element type) and Splits.
// With Splits > 1 (the _splitk entry points) the grid is every unit,
// ceil(m/Tokens)·ceil(n/Rows)·Splits CTAs, in clusters of (Splits, 1, 1).
// The last record of a shape has one split and serves every m above its To too: correct for any m, and
// ChoosePrefill's own choice there on the Llama-family shapes
// (TestPrefillRecords).
type PrefillRecord struct {
	From        int    `json:"from"`
	To          int    `json:"to"`
	Module      string `json:"module"`
	Entry       string `json:"entry"`
	Rows        int    `json:"rows"`
	Tokens      int    `json:"tokens"`
	Splits      int    `json:"splits"`
	Block       int    `json:"block"`
	SharedBytes int    `json:"shared_bytes"`
}

// PrefillRecordsTo is how far PrefillRecords plans: the token counts past
// it take the last record (ChoosePrefill's tile no longer changes there
// on the Llama-family shapes: TestPrefillRecords).
const PrefillRecordsTo = 1 << 18

// PrefillRecords returns ChoosePrefill's launches of an n × k weight of
// element type dt for every token count from MaxTokens+1 to
// PrefillRecordsTo, as ranges of the same launch (entry point and
// splits), in order. ChoosePrefill
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
		if last := len(out) - 1; last >= 0 && out[last].Entry == p.Entry && out[last].Splits == p.Splits {
			out[last].To = to
			continue
		}
		out = append(out, PrefillRecord{From: from, To: to, Module: ModuleSM90a, Entry: p.Entry, Rows: p.Tile.Rows,
			Tokens: p.Tile.Tokens, Splits: p.Splits, Block: p.Block, SharedBytes: p.SharedBytes})
	}
	if last := out[len(out)-1]; last.Splits != 1 {
		return nil, fmt.Errorf("%w: prefill: %dx%d splits k %d ways at %d tokens; the last record serves every m past it and must not split",
			ErrNoPlan, n, k, last.Splits, last.To)
	}
	return out, nil
}

// prefillBlock divides every tile's Tokens and MaxTokens: the token
// counts ChoosePrefill cannot tell apart come in blocks of it
// (TestPrefillBlock).
const prefillBlock = 64
