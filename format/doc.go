// Package format models what sfsurgery writes to disk and reads back:
// the output formats ([Format]: ampere, bitmask, dense), the [Manifest]
// that every output shard carries in its __metadata__, the prune
// [Report] written beside an output, and the lookup of weights stored in
// a compressed 2:4 form ([FindCompressed], [Compressed.DecodeRows]).
//
// It holds no pipeline: package surgery writes these files and package
// verify checks them, both through this package, so that neither needs
// the other. docs/formats.md specifies the layouts.
package format
