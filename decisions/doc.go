// Package decisions reads the decisions of a calibrated pruning method:
// the file `python -m sfsurgery calibrate` writes (schema
// sfsurgery-decisions/1, docs/formats.md §7), from which `sfsurgery prune
// --decisions` writes its output instead of choosing by magnitude.
//
// A decisions file is one safetensors file, read with the strict reader
// of package checkpoint. Its __metadata__ key "sfsurgery_decisions"
// holds a JSON object naming the method (wanda, ria or sparsegpt) and the
// calibration ([Meta]); its tensors are, for every target weight P.weight
// of shape [n, k], the mask P.weight.mask (U8 [n, ceil(k/8)], the bitmask
// layout: exactly 2 of every 4 kept, no bit past column k-1) and, for
// sparsegpt only, the updated weight P.weight.update (the weight's dtype
// and shape, ±0 wherever the mask prunes, finite everywhere).
//
// [Open] validates the file in itself: metadata, tensor names, dtypes,
// ranks, which tensors the method needs. [File.Lookup] matches it
// against a target weight of a model (shapes, dtypes), and
// [File.Extra] names a tensor that belongs to no target. The data are
// validated as they are read, a chunk of rows at a time
// ([Decision.ReadMask], [Decision.ReadUpdate]), so that a prune streams
// them in bounded memory. Every refusal is an [*Error] naming the file
// and the tensor, and wraps [ErrInvalid].
package decisions
