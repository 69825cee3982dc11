// Package surgery runs the checkpoint transformations of sfsurgery: it
// selects the target weights of a LLaMA-family checkpoint, plans the
// output (which tensors are pruned, skipped or copied, in which format,
// how large), and streams the result through package checkpoint's atomic
// writer with the pure functions of package prune24.
//
// What it writes is modelled by package format: the three output formats
// (PyTorch's CUTLASS packed values plus reordered metadata, "ampere";
// compressed-tensors' sparse-24-bitmask, "bitmask"; pruned dense weights,
// "dense"), the manifest stored in every shard's __metadata__, so that
// verify and unpack know what they read, and the prune report.
package surgery
