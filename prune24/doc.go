// Package prune24 implements 2:4 semi-structured pruning and the packed
// formats of 2:4 weights as pure functions over raw little-endian bits.
//
// A matrix is row-major W[rows][cols] (for nn.Linear, rows is the output
// and cols the input dimension) of elements of a checkpoint.DType, F16,
// BF16 or F32, held as raw bytes exactly as in a safetensors file. Groups
// are 4 consecutive elements along a row, so cols must be a multiple of 4.
//
// [Prune] keeps, in every group, the 2 elements of largest magnitude
// ([Rule24]), or the larger of every pair ([Rule12], the 1:2 form that the
// Ampere layout uses for F32). Selection compares raw bits as integers: the
// magnitude order is the unsigned order of the bits without the sign bit,
// so +Inf ranks above every finite value and NaN is rejected. Ties go to
// the lower index. Pruned slots and kept -0.0 become +0.0; every other kept
// value is copied bit for bit.
//
// Two packed forms are supported:
//
//   - [PackAmpere] and [UnpackAmpere]: PyTorch's CUTLASS layout (packed
//     values plus reordered int16 metadata), byte for byte as
//     torch.sparse.to_sparse_semi_structured writes it.
//   - [PackBitmask] and [UnpackBitmask]: the sparse-24-bitmask format of
//     compressed-tensors (kept values plus an LSB-first bitmask).
//
// [PruneAmpere] and [PruneBitmask] prune and pack in one pass over the
// unpruned matrix, with the same result as Prune followed by the packing.
//
// [PruneMask] keeps what a given mask names instead (the decisions of a
// calibrated method, in the bitmask layout; [CheckMask] validates one),
// with the same output and statistics as Prune when the mask is the set
// Prune keeps; the packers take its output as they take Prune's.
// [MaskOf] gives the mask a 2:4 matrix shows.
//
// [Check] and [CheckRule] verify that data is 2:4 sparse and that it is
// exactly what [Prune] produces from an original; [CheckMasked] that it
// is what PruneMask produces from an original and a mask.
//
// [DecodeFloat64] and [F16ToFloat64], [BF16ToFloat64], [F32ToFloat64]
// give the exact values of elements.
//
// Every function validates every buffer length against the dtype and shape
// and returns an error wrapping [ErrShape] or [ErrDType] (any other
// element type; see [CheckDType]) rather than panicking. Errors about a
// location in the data are typed ([*NaNError], [*StructureError],
// [*MetaError], [*BitmaskError], [*RuleError]) and wrap a sentinel that
// [errors.Is] can test.
package prune24
