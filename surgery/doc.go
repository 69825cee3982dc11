// Package surgery runs the checkpoint transformations of sfsurgery: it
// selects the target weights of a LLaMA-family checkpoint, plans the
// output (which tensors are pruned, skipped or copied, in which format,
// how large), and streams the result through package checkpoint's atomic
// writer with the pure functions of package prune24.
//
// Three output formats are supported (see [Format]): PyTorch's CUTLASS
// packed values plus reordered metadata ("ampere"), compressed-tensors'
// sparse-24-bitmask ("bitmask"), and pruned dense weights ("dense"). Each
// output records what was done in a [Manifest] stored in every shard's
// __metadata__, so that verify and unpack know what they read.
package surgery
