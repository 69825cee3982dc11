// Package checkpoint reads, validates and writes safetensors files and
// Hugging Face checkpoints made of them.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes
// of JSON describing each tensor (dtype, shape, data_offsets) plus an
// optional __metadata__ map of strings, and the data section, which the
// tensors must tile exactly.
//
// # Reading
//
// [OpenFile] opens one file: it reads the header with pread, validates it
// with [ParseHeader], which is stricter than the reference implementation
// (no duplicate keys, exact field names, exact tiling, see its
// documentation), and memory-maps the file read-only. [File.Data] returns
// a tensor's bytes as a zero-copy slice of the mapping and [File.Release]
// drops pages already processed. Opening touches no tensor data, so
// opening a checkpoint of any size is quick.
//
// [Open] opens a checkpoint: a single file, an index file
// (model.safetensors.index.json, parsed by [ParseIndex]) or a model
// directory, and checks the shards against the index.
//
// # Errors
//
// Every error about malformed input is an *[Error] that names the file,
// the tensor and the byte offset where known, and wraps one sentinel, so
// the class can be tested with [errors.Is]: [ErrFormat] for anything
// malformed, and below it [ErrInvalidHeader], [ErrInvalidOffset],
// [ErrIndex] and the others. Errors of the operating system are wrapped
// in an *Error as well and keep their identity ([io/fs.ErrNotExist] and
// the like).
//
// # Concurrency
//
// A File and a Checkpoint may be read from several goroutines at once;
// Close must not run concurrently with any other method, and the slices
// returned by Data must not be used after it.
package checkpoint
