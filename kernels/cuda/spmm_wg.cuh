// spmm_wg.cuh: the prefill-size 2:4 product on Hopper's sparse tensor cores
// (sm_90a: wgmma.mma_async.sp), reading the weight exactly as stored
// (packed + meta, the bytes the decode kernels read):
//
//   Y[M][N] = X[M][K] · W[N][K]ᵀ (+ bias),  W given as packed[N][K/2] + meta.
//
// Work split. The output is cut into tiles of R = 128·NWG weight rows by BN
// tokens, and K into S splits (Splits); a unit of work is one split of
// one tile. Unsplit, a persistent grid of at most one CTA per SM takes units
// blockIdx.x, blockIdx.x + gridDim.x, … : the S splits of a tile one
// after the other, the tiles in Tiles' order (groups of kGroup row
// tiles, each swept token tile by token tile), so that the CTAs running
// at once share their weights and activations in L2; split, the grid is
// every unit, one each (Split K below). K goes in stages of kCols
// columns (Shape: 128 for the 128-row tiles, 64 for the 256-row ones),
// k-tiles of 32 columns each.
//
// Roles. The CTA is NWG consumer warpgroups and one producer warpgroup
// (the last), of which one thread works: for each stage it waits for its
// ring slot's `empty` mbarrier, announces the stage's bytes on the slot's
// `full` mbarrier and queues the bulk tensor copies (TMA) that complete
// on it: the activations of BN tokens (kCols / 64 boxes), the packed
// values of the R rows and their meta, through the tensor maps described
// at TensorMap (the
// copy engine zero-fills what lies out of bounds). The first thread of
// each consumer warpgroup arrives on `empty` once the warpgroup's products
// of the slot are done (as CUTLASS's PipelineTmaAsync releases a stage:
// one arrival a consumer warpgroup). With NWG =
// 2 the producer warpgroup gives up registers (setmaxnreg) to the
// consumers, whose accumulators take BN of them. (docs/kernels.md §2.6
// says why the copies are the copy engine's and A comes from shared
// memory.)
//
// Products. Both operands come from shared memory. Product h of
// consumer warpgroup c covers the tile's rows 128c + 64h … +63 (warp w
// the 16 rows at 16w of them: half w % 2 of a 32-row block of the stored
// meta), A the compressed 64 × 16 values of a k-tile in the kCols-byte
// swizzle (adesc: packed rows of kCols bytes, a k-tile's 32 bytes at 32p
// of them), B the BN tokens' 32 columns in the 128-byte swizzle
// (gemv_wg.cuh's wg_desc128); its meta word comes from a register, with
// selector 0 (for half 1, lane L's word is lane L ^ 2's, which selector 1
// would have read: docs/formats.md §2). A warp's meta words are
// double-buffered: the products of stage q may still read one set while
// the next stage's are loaded, and wgmma.wait_group 1 after stage q's
// products frees stage q - 1's set and slot. Stages are multiplied two at
// a time; a tile of an odd number of stages gets one more, which the copy
// engine zero-fills (its meta replaced by a valid pattern) and adds
// nothing.
//
// Shared memory of a stage: B (kCols / 64 boxes of BN token rows of 128
// bytes, unit u of token t at u ^ (t % 8), 1024-byte aligned), then A (R
// rows of kCols bytes: unit u of row r at u ^ ((r / 2) % 4) in the 64-byte
// swizzle, u ^ (r % 8) in the 128-byte one), then the meta (k-tile p's R
// words: U[(kKTiles·kc + p)·N + n0 + i] for i < R, as stored). Tokens past
// M, rows past N and columns past K (the padding stage among them) are
// zero-filled; a row block past N or a k-tile past K multiplies zeros with
// a valid meta pattern and adds nothing.
//
// Results. Accumulator d[4j + i] of product h of a consumer thread (g =
// lane / 4, tig = lane % 4) is row 128c + 64h + 16w + g + 8·(i / 2),
// token 8j + 2·tig + i % 2 of the tile; each is stored through Out as the
// decode kernels store theirs: plus the bias where there is one, as f32
// or rounded to the element type. An unsplit unit of a tile whose 16-bit
// sums fit one ring slot (128 rows by 64 tokens), or half of whose do
// (128 by 128 and 256 by 128, in two passes of half the rows; not 256 by
// 192), stores 16-bit output through its last stage's slot instead
// (staged_store): the same values, written as 16-byte chunks of token
// rows rather than 2-byte stores a thread, and the slot released to the
// producer only after the copy
// (TestGPUPrefillOutput checks every tile's output; the probe in
// tools/probes/splitk_probe.cu checks each stored value bit for bit).
//
// Split K (S > 1, the entry points built with kSplit). The S splits of
// a tile are the S CTAs of one cluster (cluster rank = split), one unit
// each: the grid is exactly the units. After its products each consumer
// thread stores its sums to its CTA's ring (free by then: every consumer
// warpgroup has passed a named barrier after its last products), in
// lane-interleaved float4s; a cluster barrier publishes them; CTA r adds
// the S CTAs' sums of the r-th S-th of the tile, in rank order, from
// distributed shared memory, and stores them as above; a second cluster
// barrier keeps every CTA's shared memory alive until all have read it.
// The result is the same bits every run (no atomics), though not those
// of S = 1. No workspace.
//
// Requirements (checked by launchplan.ChoosePrefill, which plans every
// launch): N ≥ 32 and N % 32 == 0, K ≥ 64 and K % 64 == 0, M ≥ 1,
// 1 ≤ S ≤ 8, blockDim.x = 128·(NWG + 1), dynamic shared memory Shape<NWG,
// BN>::kSmem bytes, the tensor maps of TensorMap, and for S > 1 clusters
// of (S, 1, 1) on a grid of exactly the units. CTAs past the units find
// no work and exit; a split past K (S above the stage pairs) adds zeros.
#pragma once

#include "gemv_wg.cuh"

namespace sfs {
namespace spmm_wg {

using gemv::Out;

// SFS_SPMM_GROUP sets kGroup, the row tiles of a group in the tile order
// (Tiles), for tools/probes/spmm_wg_probe.cu (docs/kernels.md §2.6 has
// the group sizes measured).
#ifndef SFS_SPMM_GROUP
#define SFS_SPMM_GROUP 16
#endif
constexpr int kGroup = SFS_SPMM_GROUP;

// SFS_SPMM_TRACE(point) marks points of a CTA's run (0 entry, 1 barriers
// set up, 2 its first stage landed, 3 its products done, 4 split K's sums
// published, 5 its stores done) for tools/probes/splitk_probe.cu, whose
// probe_trace.cuh defines it to stamp the time at each on thread 0 (a
// consumer); the product builds it to nothing.
#ifndef SFS_SPMM_TRACE
#define SFS_SPMM_TRACE(point)
#endif

// SFS_SPMM_COLS(NWG, BN) sets Shape's kCols, the columns of K a stage
// brings (64 or 128): 128 for the 128-row tiles, 64 for the 256-row ones
// (docs/kernels.md §2.6 has both measured on every tile); defined before
// this header, it builds another rule for tools/probes/splitk_probe.cu,
// whose tensor maps follow it (TensorMap). launchplan.PrefillTile.StageK
// holds the same rule for the launches.
#ifndef SFS_SPMM_COLS
#define SFS_SPMM_COLS(NWG, BN) ((NWG) == 1 ? 128 : 64)
#endif

// Shape holds the sizes of a tile of 128·NWG weight rows by BN tokens.
template <int NWG, int BN>
struct Shape {
  static_assert(NWG == 1 || NWG == 2, "one or two consumer warpgroups");
  static_assert(BN == 64 || BN == 128 || BN == 192, "64, 128 or 192 tokens a tile");
  static constexpr int kRows = 128 * NWG;
  static constexpr int kThreads = 128 * (NWG + 1);  // the consumers, then the producer's warpgroup
  static constexpr int kCols = SFS_SPMM_COLS(NWG, BN);
  static_assert(kCols == 64 || kCols == 128, "stages of 64 or 128 columns");
  static constexpr int kKTiles = kCols / 32;          // k-tiles of 32 columns a stage
  static constexpr int kBBytes = BN * 128 * (kCols / 64);  // kCols / 64 boxes of 64 columns
  static constexpr int kABytes = kRows * kCols;             // kCols / 2 packed values a row
  static constexpr int kMetaBytes = kKTiles * kRows * 4;
  static constexpr int kStageBytes = kBBytes + kABytes + kMetaBytes;
  static_assert(kStageBytes % 1024 == 0, "stages keep B 1024-byte aligned");
  // Ring depth: as many stages as 227 KB hold beside the alignment slack
  // and the barriers, at most 8.
  static constexpr int kFit = (232448 - 1024 - 128) / kStageBytes;
  static constexpr int kStages = kFit < 8 ? kFit : 8;
  static constexpr int kSmem = 1024 + kStages * kStageBytes + 16 * kStages;
};

// mma<kSel>(T, d, adesc, bdesc, e) adds A (64 rows of a k-tile at adesc,
// meta e with selector kSel) times B (the tile's tokens at bdesc) to d:
// one wgmma.mma_async.sp m64nBNk32 of the warpgroup, accumulating, both
// K-major.
template <int kSel>
__device__ __forceinline__ void mma(BF16, float (&d)[32], uint64_t adesc, uint64_t bdesc, uint32_t e) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sp.sync.aligned.m64n64k32.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, %34, %35, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(adesc), "l"(bdesc), "r"(e), "n"(kSel));
}

template <int kSel>
__device__ __forceinline__ void mma(F16, float (&d)[32], uint64_t adesc, uint64_t bdesc, uint32_t e) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sp.sync.aligned.m64n64k32.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, %34, %35, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(adesc), "l"(bdesc), "r"(e), "n"(kSel));
}

template <int kSel>
__device__ __forceinline__ void mma(BF16, float (&d)[64], uint64_t adesc, uint64_t bdesc, uint32_t e) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sp.sync.aligned.m64n128k32.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, %66, %67, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(adesc), "l"(bdesc), "r"(e), "n"(kSel));
}

template <int kSel>
__device__ __forceinline__ void mma(F16, float (&d)[64], uint64_t adesc, uint64_t bdesc, uint32_t e) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sp.sync.aligned.m64n128k32.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, %66, %67, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(adesc), "l"(bdesc), "r"(e), "n"(kSel));
}

template <int kSel>
__device__ __forceinline__ void mma(BF16, float (&d)[96], uint64_t adesc, uint64_t bdesc, uint32_t e) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sp.sync.aligned.m64n192k32.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, "
      "%96, %97, %98, %99, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(adesc), "l"(bdesc), "r"(e), "n"(kSel));
}

template <int kSel>
__device__ __forceinline__ void mma(F16, float (&d)[96], uint64_t adesc, uint64_t bdesc, uint32_t e) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sp.sync.aligned.m64n192k32.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, "
      "%96, %97, %98, %99, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(adesc), "l"(bdesc), "r"(e), "n"(kSel));
}

// reg_dec and reg_inc move the warpgroup's register budget to kRegs per
// thread (setmaxnreg; the kernel's cap at entry comes from its
// __launch_bounds__(kThreads, 1)).
template <int kRegs>
__device__ __forceinline__ void reg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void reg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// wg_wait waits until at most N of this warpgroup's committed groups of
// products are pending.
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Tiles is the tile grid of a product and the order the CTAs take it in:
// groups of kGroup row tiles (the last may hold fewer), one after the
// other; within a group, the row tiles of one token tile, then those of
// the next. The CTAs running at once then work on about kGroup row tiles
// and a few token tiles, whose weights and activations stay in L2.
struct Tiles {
  int m, n, count;
  __device__ __forceinline__ Tiles(int M, int N, int BN, int R)
      : m((M + BN - 1) / BN), n((N + R - 1) / R), count(m * n) {}
  // at sets the first token m0 and row n0 of tile t.
  __device__ __forceinline__ void at(int t, int BN, int R, int& m0, int& n0) const {
    const int span = kGroup * m;  // tiles of a whole group
    const int first = t / span * kGroup;
    const int rows = min(kGroup, n - first);
    const int i = t - first * m;
    n0 = (first + i % rows) * R;
    m0 = i / rows * BN;
  }
};

// Splits is split s of K's nk stages (of kCols columns) among S: stages
// first … first + count - 1, count even (the stage past K that makes it
// so is zero-filled by the copy engine). Every split but the last has
// the same even number of stages; splits past K have none.
struct Splits {
  int first, count;
  __device__ __forceinline__ Splits(int nk, int S, int s) {
    const int per = ((nk + S - 1) / S + 1) & ~1;
    first = s * per;
    const int n = max(0, min(nk - first, per));
    count = (n + 1) & ~1;
  }
};

// TensorMap is a CUDA tensor map (CUtensorMap: 128 opaque bytes, 64-byte
// aligned), made on the host by cuTensorMapEncodeTiled and passed by value
// as a __grid_constant__ parameter. The three of a product (made by the Go
// caller, kernels/prefill.go, through cuda.Driver.EncodeTensorMap2D), C
// the tile's kCols:
//   x: X as uint16 [M][K], box 64 × BN, 128-byte swizzle (C / 64 boxes a stage);
//   p: packed as uint16 [N][K/2], box C/2 × R, C-byte swizzle;
//   u: the meta as uint32 [K/32][N], box R × C/32, no swizzle;
// each with zeros for elements out of bounds (tokens past M, rows past N,
// columns past K).
struct __align__(64) TensorMap {
  uint64_t opaque[16];
};

// tma2d queues a bulk tensor copy of the box at (c0, c1) (innermost
// first) of tensor map tm to shared address dst, completing its bytes on
// the mbarrier bar.
__device__ __forceinline__ void tma2d(uint32_t dst, const TensorMap& tm, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&tm)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// produce is the producer's loop, run by one thread: every stage of every
// tile of the CTA, in order, into ring slot q % ST: it waits for the
// slot's `empty` phase, announces the stage's bytes on its `full`
// mbarrier and queues the three copies (activations, packed values,
// meta), which complete on it.
template <int NWG, int BN>
__device__ __forceinline__ void produce(uint32_t base, uint32_t bars, const TensorMap& tx, const TensorMap& tp,
                                        const TensorMap& tu, int M, int N, int K, int nsplit) {
  using S = Shape<NWG, BN>;
  constexpr int ST = S::kStages, R = S::kRows, C = S::kCols;
  const Tiles tl(M, N, BN, R);
  const int nk = (K + C - 1) / C, units = tl.count * nsplit;
  uint32_t q = 0;
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    int m0, n0;
    tl.at(u / nsplit, BN, R, m0, n0);
    const Splits sp(nk, nsplit, u % nsplit);
    for (int kc = sp.first; kc < sp.first + sp.count; ++kc, ++q) {
      const uint32_t s = q % ST;
      if (q >= ST) gemv::mbar_wait(bars + 8 * (ST + s), (q / ST - 1) & 1);
      const uint32_t st = base + s * S::kStageBytes, full = bars + 8 * s;
      gemv::mbar_expect(full, S::kStageBytes);
#pragma unroll
      for (int j = 0; j < C / 64; ++j) tma2d(st + j * BN * 128, tx, C * kc + 64 * j, m0, full);
      tma2d(st + S::kBBytes, tp, C / 2 * kc, n0, full);
      tma2d(st + S::kBBytes + S::kABytes, tu, n0, S::kKTiles * kc, full);
    }
  }
}

// desc64 returns the wgmma shared-memory matrix descriptor of a K-major
// tile in the 64-byte swizzle at shared address addr: rows of 64 bytes
// whose unit u sits at u ^ ((row / 2) % 4), 8-row groups 512 bytes apart.
__device__ __forceinline__ uint64_t desc64(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>(512 >> 4) << 32) | (static_cast<uint64_t>(2) << 62);
}

// adesc returns the descriptor of A's k-tile at addr in a stage of C
// columns: rows of C bytes in the C-byte swizzle.
template <int C>
__device__ __forceinline__ uint64_t adesc(uint32_t addr) {
  return C == 64 ? desc64(addr) : gemv::wg_desc128(addr);
}

// stage waits for ring slot q % ST, loads the warp's meta words e of it
// and issues its products (kKTiles k-tiles p, two 64-row halves h of the
// warpgroup's rows, A and B from shared memory), then waits for the stage
// before and releases its slot (unless first, the tile's first stage):
// one arrival a warpgroup, by its first thread once the warpgroup's
// products of that stage are done, as CUTLASS's PipelineTmaAsync
// releases its stages. The meta of a k-tile at or past left (the columns
// of K from the stage's first; ≤ 0 for a padding stage) or of a half not
// live (rows past N) is replaced by a valid pattern. e is double-buffered
// by the caller: the products of a stage may still read it while the
// next stage's are loaded.
template <typename T, int NWG, int BN, int KT = Shape<NWG, BN>::kKTiles>
__device__ __forceinline__ void stage(float (&acc)[2][BN / 2], uint32_t (&e)[KT][2], uint32_t base, uint32_t bars,
                                      uint32_t q, uint32_t arows, uint32_t moff, const bool (&live)[2], int left,
                                      bool first) {
  using S = Shape<NWG, BN>;
  constexpr int ST = S::kStages, C = S::kCols;
  const uint32_t s = q % ST;
  gemv::mbar_wait(bars + 8 * s, (q / ST) & 1);
  if (q == 0) SFS_SPMM_TRACE(2);
  const uint32_t st = base + s * S::kStageBytes;
#pragma unroll
  for (int p = 0; p < KT; ++p)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t v = gemv::lds32(st + S::kBBytes + S::kABytes + p * S::kRows * 4 + moff + 4 * 64 * h);
      e[p][h] = live[h] && 32 * p < left ? v : 0x44444444u;  // groups keeping positions 0 and 1
    }
  gemv::wg_fence();
#pragma unroll
  for (int p = 0; p < KT; ++p) {
    // k-tile p: bytes 64 (p % 2) of the token rows of box p / 2, and bytes
    // 32p of the packed rows.
    const uint64_t bd = gemv::wg_desc128(st + (p >> 1) * BN * 128 + (p & 1) * 64);
#pragma unroll
    for (int h = 0; h < 2; ++h) mma<0>(T{}, acc[h], adesc<C>(st + S::kBBytes + arows + h * 64 * C + p * 32), bd, e[p][h]);
  }
  gemv::wg_commit();
  wg_wait<1>();
  if (!first && (threadIdx.x & 127) == 0) gemv::mbar_arrive(bars + 8 * (ST + (q + ST - 1) % ST));
}

// store_sums stores product h's sums v of the warp (the accumulator
// layout above) for its rows row0 and row0 + 8 (lane's g added), tokens
// m0 + … past M left out.
template <typename T, int BN>
__device__ __forceinline__ void store_sums(const Out& out, const float (&v)[BN / 2], int row0, int m0, int M, int N,
                                           int tig) {
  float bias[2] = {};
  if (out.bias != nullptr) {
    bias[0] = to_f32(T{}, out.bias[row0]);
    bias[1] = to_f32(T{}, out.bias[row0 + 8]);
  }
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int tok = m0 + 8 * j + 2 * tig + (i & 1);
      if (tok < M) gemv::put1<T>(out, static_cast<size_t>(tok) * N + row0 + 8 * (i >> 1), v[4 * j + i] + bias[i >> 1]);
    }
  }
}

// kMaxSplits bounds S (a portable cluster size).
constexpr int kMaxSplits = 8;

// cluster_arrive_release and cluster_wait_acquire are the cluster
// barrier's halves that order shared memory writes before it against
// distributed shared memory reads after it.
__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait_acquire() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// cluster_arrive_relaxed and cluster_wait are the cluster barrier's halves
// that only wait for every thread of the cluster to arrive.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory"); }

// ld_dsmem4 loads the 16 bytes at shared::cluster address addr.
__device__ __forceinline__ float4 ld_dsmem4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// consumers_sync is a barrier of the NWG consumer warpgroups alone
// (named barrier 1; the producer's warpgroup never waits on it).
template <int NWG>
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(128 * NWG) : "memory");
}

// cluster_sum is split K's end for consumer thread ct (128·c + 32·w +
// lane) of a CTA of rank r among S (header: Split K; S a template
// argument, so that the S loads of a float4 are queued at once:
// tools/probes/dsmem_probe.cu times the sum with S an argument 0.4–0.8 µs
// slower): its sums acc go to
// the ring at base, float4 (h, f) of the thread at ((h·BN/8 + f)·128·NWG
// + ct)·16; after the cluster barrier the CTA adds, for each float4 e of
// its share (the r-th S-th of the tile's, in that layout), the S CTAs'
// in rank order and stores the four values: thread (c, w, lane) of the
// layout, h and f give rows 128c + 64h + 16w + lane/4 (+ 8) and tokens
// 8f + 2·(lane % 4) (+ 1) of the tile at (m0, n0).
template <typename T, int NWG, int BN, int S>
__device__ __forceinline__ void cluster_sum(const Out& out, const float (&acc)[2][BN / 2], uint32_t base, int r,
                                            int m0, int n0, int M, int N, int ct) {
  constexpr int kF = BN / 8;
  constexpr int kThreads = 128 * NWG;
  constexpr int kAll = 2 * kF * kThreads;  // float4s of the tile
  static_assert(kAll * 16 <= Shape<NWG, BN>::kStages * Shape<NWG, BN>::kStageBytes, "the sums fit in the ring");
  consumers_sync<NWG>();  // every warpgroup's products have read the ring
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int f = 0; f < kF; ++f) {
      gemv::sts128(base + ((h * kF + f) * kThreads + ct) * 16, acc[h][4 * f], acc[h][4 * f + 1], acc[h][4 * f + 2],
                   acc[h][4 * f + 3]);
    }
  cluster_arrive_release();
  cluster_wait_acquire();
  SFS_SPMM_TRACE(4);
  const int share = (kAll + S - 1) / S;
  const int lo = r * share, hi = min(kAll, lo + share);
  for (int e = lo + ct; e < hi; e += kThreads) {
    const uint32_t at = base + e * 16;
    float4 v[S];
#pragma unroll
    for (int s = 0; s < S; ++s) v[s] = ld_dsmem4(gemv::map_rank(at, s));
    float4 sum = v[0];
#pragma unroll
    for (int s = 1; s < S; ++s) sum.x += v[s].x, sum.y += v[s].y, sum.z += v[s].z, sum.w += v[s].w;
    // The layout's thread, product and float4 of e.
    const int t = e % kThreads, slot = e / kThreads, h = slot / kF, f = slot % kF;
    const int c = t >> 7, w = (t >> 5) & 3, lane = t & 31;
    const int row = n0 + 128 * c + 64 * h + 16 * w + (lane >> 2), tok = m0 + 8 * f + 2 * (lane & 3);
    const float vals[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int rr = row + 8 * (i >> 1), tt = tok + (i & 1);
      if (rr < N && tt < M) {
        const float b = out.bias != nullptr ? to_f32(T{}, out.bias[rr]) : 0.f;
        gemv::put1<T>(out, static_cast<size_t>(tt) * N + rr, vals[i] + b);
      }
    }
  }
  // The CTA's sums stay until every CTA has read them: a relaxed arrive,
  // which orders nothing (the loads it must follow have returned their
  // values, which the stores used), so that it does not wait for this
  // CTA's global stores to be performed as a release would.
  __syncwarp();  // the warp converged for the aligned barrier
  cluster_arrive_relaxed();
  cluster_wait();
}

// Staging says how a tile's unsplit 16-bit sums go through a ring slot:
// in one pass where all fit, in two where half the rows do (pass p the
// products h = p of every warpgroup), else not at all (0).
template <int NWG, int BN>
struct Staging {
  static constexpr int kBytes = Shape<NWG, BN>::kStageBytes;
  static constexpr int kRows = 128 * NWG;
  static constexpr int kPasses = BN * kRows * 2 <= kBytes ? 1 : (BN * kRows <= kBytes ? 2 : 0);
};

// staged_store stores a unit's sums, 16-bit, through the ring slot at
// slot (its last stage's, held from the producer), in Staging's passes:
// stmatrix.trans writes a pass's rows token-major (token t's RP outputs at
// t·2RP, 16-byte chunk cc of them at chunk cc ^ (t % 8)), then each
// consumer thread copies 16-byte chunks to the output.
template <typename T, int NWG, int BN>
__device__ __forceinline__ void staged_store(const Out& out, const float (&acc)[2][BN / 2], uint32_t slot, int m0,
                                             int n0, int M, int N, int w, int lane, int ct, const bool (&live)[2]) {
  constexpr int P = Staging<NWG, BN>::kPasses;
  static_assert(P == 1 || P == 2, "a staged tile's sums fit a ring slot in one or two passes");
  constexpr int RP = 128 * NWG / P, kChunks = RP / 8, kThreads = 128 * NWG;
  const int c = ct >> 7, g = lane >> 2, mi = lane >> 3, tt = lane & 7;
  consumers_sync<NWG>();  // every warp's products have read the slot
#pragma unroll
  for (int p = 0; p < P; ++p) {
    if (p > 0) consumers_sync<NWG>();  // the previous pass copied out of the slot
#pragma unroll
    for (int hh = 0; hh < 2 / P; ++hh) {
      const int h = P == 1 ? hh : p;
      float b0 = 0.f, b1 = 0.f;
      const int row = 128 * c + 64 * h + 16 * w + g;
      if (out.bias != nullptr && live[h]) {
        b0 = to_f32(T{}, out.bias[n0 + row]);
        b1 = to_f32(T{}, out.bias[n0 + row + 8]);
      }
#pragma unroll
      for (int j = 0; j < BN / 8; j += 2) {
        const uint32_t r0 = round16x2(T{}, acc[h][4 * j] + b0, acc[h][4 * j + 1] + b0);
        const uint32_t r1 = round16x2(T{}, acc[h][4 * j + 2] + b1, acc[h][4 * j + 3] + b1);
        const uint32_t r2 = round16x2(T{}, acc[h][4 * j + 4] + b0, acc[h][4 * j + 5] + b0);
        const uint32_t r3 = round16x2(T{}, acc[h][4 * j + 6] + b1, acc[h][4 * j + 7] + b1);
        const int tok = 8 * (j + (mi >> 1)) + tt;
        const int chunk = (P == 1 ? 16 * c + 8 * h : 8 * c) + 2 * w + (mi & 1);
        const uint32_t addr = slot + tok * (RP * 2) + ((chunk ^ (tok & 7)) * 16);
        asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0),
                     "r"(r1), "r"(r2), "r"(r3)
                     : "memory");
      }
    }
    consumers_sync<NWG>();  // the pass staged
    for (int i = ct; i < BN * kChunks; i += kThreads) {
      const int t = i / kChunks, cc = i % kChunks;
      const int r = P == 1 ? 8 * cc : 128 * (cc >> 3) + 64 * p + 8 * (cc & 7);  // cc's first row in the tile
      if (m0 + t >= M || n0 + r >= N) continue;
      uint32_t v0, v1, v2, v3;
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v0), "=r"(v1), "=r"(v2), "=r"(v3)
                   : "r"(slot + t * (RP * 2) + ((cc ^ (t & 7)) * 16))
                   : "memory");
      uint16_t* y = static_cast<uint16_t*>(out.y) + static_cast<size_t>(m0 + t) * N + n0 + r;
      asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(y), "r"(v0), "r"(v1), "r"(v2), "r"(v3) : "memory");
    }
  }
}

// consume is consumer warpgroup c's loop (warp w, lane): every unit of
// the CTA, its products stage by stage, then its stores (with the
// cluster's other splits for S > 1: cluster_sum). Product h of the warpgroup covers its
// rows 64h … 64h+63, warp w's 16 of them being rows 16w … 16w+15: the
// 16-row half w % 2 of row block 2h + w/2, whose meta words it reads with
// selector 0 (lane L reading, for half 1, the word of lane L ^ 2, which
// selector 1 would have read: docs/formats.md §2).
template <typename T, int NWG, int BN, bool kSplit>
__device__ __forceinline__ void consume(const Out& out, uint32_t base, uint32_t bars, int M, int N, int K, int nsplit,
                                        int c, int w, int lane) {
  using S = Shape<NWG, BN>;
  constexpr int ST = S::kStages, R = S::kRows, C = S::kCols, KT = S::kKTiles;
  const Tiles tl(M, N, BN, R);
  const int nk = (K + C - 1) / C, units = tl.count * nsplit;
  const uint32_t arows = static_cast<uint32_t>(128 * c * C);  // the warpgroup's first A row
  const uint32_t moff = static_cast<uint32_t>(4 * (128 * c + 32 * (w >> 1) + (lane ^ ((w & 1) << 1))));
  const int g = lane >> 2, tig = lane & 3;
  uint32_t q = 0;
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    int m0, n0;
    tl.at(u / nsplit, BN, R, m0, n0);
    const Splits sp(nk, nsplit, u % nsplit);
    const int r0 = n0 + 128 * c + 16 * w;  // the warp's first row of product 0
    const bool live[2] = {r0 < N, r0 + 64 < N};
    float acc[2][BN / 2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[h][i] = 0.f;
    uint32_t e0[KT][2], e1[KT][2];
    // A row block is inside N or past it as a whole (N % 32 == 0): past
    // it, the warp multiplies zeros with a valid meta pattern.
    for (int i = 0; i < sp.count; i += 2, q += 2) {
      const int kc = sp.first + i;
      stage<T, NWG, BN>(acc, e0, base, bars, q, arows, moff, live, K - C * kc, i == 0);
      stage<T, NWG, BN>(acc, e1, base, bars, q + 1, arows, moff, live, K - C * (kc + 1), false);
    }
    // The wait is unconditional (a no-op without products): behind a branch,
    // ptxas cannot prove the accumulators complete where the sums use them
    // and serializes every wgmma of the split entry points (its C7518).
    wg_wait<0>();
    // A 16-bit unit of a tile whose sums go through one ring slot, in one
    // or two passes (Staging), keeps its last stage's slot from the
    // producer until staged_store has copied them out.
    constexpr bool kStaged = !kSplit && Staging<NWG, BN>::kPasses > 0;
    const bool hold = kStaged && out.kind != 0 && sp.count > 0;
    if (sp.count > 0 && !hold && (threadIdx.x & 127) == 0) gemv::mbar_arrive(bars + 8 * (ST + (q - 1) % ST));
    SFS_SPMM_TRACE(3);
    if (kSplit) {
      const int r = u % nsplit, ct = 128 * c + 32 * w + lane;
      switch (nsplit) {
        case 1: cluster_sum<T, NWG, BN, 1>(out, acc, base, r, m0, n0, M, N, ct); break;
        case 2: cluster_sum<T, NWG, BN, 2>(out, acc, base, r, m0, n0, M, N, ct); break;
        case 3: cluster_sum<T, NWG, BN, 3>(out, acc, base, r, m0, n0, M, N, ct); break;
        case 4: cluster_sum<T, NWG, BN, 4>(out, acc, base, r, m0, n0, M, N, ct); break;
        case 5: cluster_sum<T, NWG, BN, 5>(out, acc, base, r, m0, n0, M, N, ct); break;
        case 6: cluster_sum<T, NWG, BN, 6>(out, acc, base, r, m0, n0, M, N, ct); break;
        case 7: cluster_sum<T, NWG, BN, 7>(out, acc, base, r, m0, n0, M, N, ct); break;
        default: cluster_sum<T, NWG, BN, kMaxSplits>(out, acc, base, r, m0, n0, M, N, ct); break;
      }
      continue;
    }
    if constexpr (kStaged) {
      if (hold) {
        staged_store<T, NWG, BN>(out, acc, base + ((q - 1) % ST) * S::kStageBytes, m0, n0, M, N, w, lane,
                                 128 * c + 32 * w + lane, live);
        gemv::proxy_fence();  // this thread's shared memory accesses before the copy engine's next writes
        consumers_sync<NWG>();  // every consumer's
        if ((threadIdx.x & 127) == 0) gemv::mbar_arrive(bars + 8 * (ST + (q - 1) % ST));
        continue;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (live[h]) store_sums<T, BN>(out, acc[h], r0 + 64 * h + g, m0, M, N, tig);
    }
  }
  SFS_SPMM_TRACE(5);
}

// kernel is the product: the barriers set up, then the roles. Without
// kSplit, K is one split whatever splits says (the kernel has no split-K
// code: its registers are those of the plain product); with it, splits
// is clamped to 1 … kMaxSplits and must be the cluster's size.
template <typename T, int NWG, int BN, bool kSplit>
__device__ __forceinline__ void kernel(const Out& out, const TensorMap& tx, const TensorMap& tp, const TensorMap& tu,
                                       int M, int N, int K, int splits) {
  const int nsplit = kSplit ? min(max(splits, 1), kMaxSplits) : 1;
  if (kSplit) {
    // A launch off the contract (clusters other than the splits, or a grid
    // other than the units) would read other CTAs' shared memory wrongly:
    // stop it instead.
    uint32_t nranks, rank;
    asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(nranks));
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    const Tiles tl(M, N, BN, Shape<NWG, BN>::kRows);
    if (nranks != static_cast<uint32_t>(nsplit) || rank != blockIdx.x % nsplit ||
        gridDim.x != static_cast<unsigned>(tl.count * nsplit)) {
      asm volatile("trap;\n");
    }
  }
  using S = Shape<NWG, BN>;
  constexpr int ST = S::kStages;
  extern __shared__ uint4 smem4[];
  const uint32_t base = (static_cast<uint32_t>(__cvta_generic_to_shared(smem4)) + 1023) & ~1023u;
  const uint32_t bars = base + ST * S::kStageBytes;  // full[ST], then empty[ST]
  const int tid = threadIdx.x;
  SFS_SPMM_TRACE(0);
  if (tid == 0) {
    for (int i = 0; i < ST; ++i) {
      gemv::mbar_init(bars + 8 * i, 1);                 // full: the producer's expect, then the bytes
      gemv::mbar_init(bars + 8 * (ST + i), NWG);  // empty: one thread a consumer warpgroup
    }
    gemv::proxy_fence();  // the initialised barriers visible to the copy engine
  }
  __syncthreads();
  SFS_SPMM_TRACE(1);
  const int wg = tid >> 7;
  if (wg == NWG) {
    if (NWG == 2) reg_dec<40>();
    if (tid == 128 * NWG) produce<NWG, BN>(base, bars, tx, tp, tu, M, N, K, nsplit);
  } else {
    if (NWG == 2) reg_inc<232>();
    consume<T, NWG, BN, kSplit>(out, base, bars, M, N, K, nsplit, wg, (tid >> 5) & 3, tid & 31);
  }
}

}  // namespace spmm_wg
}  // namespace sfs
