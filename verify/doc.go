// Package verify proves a pruned checkpoint right. For every target
// weight it checks that
//
//  1. the weight is valid 2:4 (or 1:2 where the manifest says so);
//  2. a compressed form decodes exactly and re-encodes to the same bytes
//     (meta nibbles only 0x4 0x8 0x9 0xC 0xD 0xE, bitmask groups exactly
//     two bits);
//  3. with the original checkpoint, kept values are bit-exact, the kept
//     set is the one the rule picks, and every other tensor is
//     byte-identical; for a weight chosen by a calibration's decisions
//     (the manifest names wanda or ria), the weight is the original's
//     values at the places its mask keeps and +0.0 elsewhere, and for
//     sparsegpt, whose kept values are the calibration's, this check
//     does not apply and the report says so;
//  4. numerically, Y = W·X computed straight from the compressed form
//     (each group decoded through its metadata, the way the tensor core
//     does) equals the pruned dense product, in float64 on the CPU, or on
//     the GPU's sparse tensor cores against cuBLASLt (see [Options.Device]).
//     Elements non-finite in either product (a weight holding ±Inf, which
//     the rule keeps) must be non-finite in both the same way and are
//     left out of the error; the weights' non-finite positions are
//     listed in [Result.Notes];
//
// and, when the checkpoint has prune's report with per-tensor SHA-256
// digests, that every tensor of every shard hashes to its digest and the
// two list the same tensors, which sees any changed byte without the
// original; and for decided weights that the mask the output shows
// (prune24.MaskOf) hashes to the digest of the decisions' mask the
// report records ([CheckMask]), or, where the decisions keep zeros that
// no output can show, to the digest of the mask prune recorded as
// written, with a note.
//
// A Report says which checks passed per tensor, and in Checked and
// NotChecked what was checked and what was not, with the reason. Run
// returns an error only when the verification could not run at all,
// including when its context is done.
package verify
