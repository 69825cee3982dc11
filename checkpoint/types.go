package checkpoint

import (
	"crypto/sha256"
	"io"
	"os"
)

// MaxHeaderLen is the largest header the reader accepts, as in the
// reference implementation.
const MaxHeaderLen = 100_000_000

// IndexName is the file name of a sharded checkpoint's index.
const IndexName = "model.safetensors.index.json"

// TensorInfo describes one tensor of a safetensors file.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int64
	// Begin and End are the data_offsets of the header: byte offsets
	// relative to the start of the data section, End exclusive.
	Begin, End int64
}

// Size returns the tensor's size in bytes.
func (t TensorInfo) Size() int64 { return t.End - t.Begin }

// NumElements returns the product of the shape (1 for a rank-0 tensor).
func (t TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Header is the parsed and validated header of a safetensors file.
type Header struct {
	// Tensors in data-offset order.
	Tensors []TensorInfo
	// Metadata is the __metadata__ map, nil when the file has none.
	Metadata map[string]string
	// DataOffset is the absolute file offset of the data section
	// (8 + header length).
	DataOffset int64
}

// TensorSpec describes one tensor to write. Src must write exactly the
// tensor's bytes (elements × dtype size) when asked.
type TensorSpec struct {
	Name  string
	DType DType
	Shape []int64
	Src   io.WriterTo
}

// FileRange is a tensor source that copies an unchanged tensor out of an
// open safetensors file. The writer recognises it and copies with
// copy_file_range where the kernel allows.
type FileRange struct {
	File   *File
	Tensor TensorInfo
}

// ExtraFile is a non-weight file of an output: the contents of Data, the
// bytes Make returns, or a copy of the file at From (in that order of
// precedence). Make is called once every tensor of the output is
// written, so that it can describe them.
type ExtraFile struct {
	Name string // file name inside the output directory
	From string // path to copy from, when Data and Make are nil
	Data []byte // the contents, when set
	// Make returns the contents, when Data is nil; it is called after
	// every tensor is written.
	Make func() ([]byte, error)
}

// Shard is one safetensors file of an output checkpoint.
type Shard struct {
	Name     string // file name, e.g. "model-00001-of-00002.safetensors"
	Tensors  []TensorSpec
	Metadata map[string]string
}

// Output describes a checkpoint directory to write.
type Output struct {
	Shards []Shard
	// Index asks for model.safetensors.index.json; it is always written
	// when there is more than one shard.
	Index bool
	// IndexMetadata is merged into the index's "metadata" object;
	// total_size is computed by the writer.
	IndexMetadata map[string]any
	// Files are the other files of the directory (config.json, the
	// tokenizer, a report).
	Files []ExtraFile
}

// WriteOptions control WriteFile and WriteDir.
type WriteOptions struct {
	// Workers bounds how many tensors are written at once (0: GOMAXPROCS).
	Workers int
	// Force replaces an existing output instead of failing with ErrExist.
	Force bool
	// Protect lists input paths (files or directories). The output may not
	// be one of them, nor replace or lie inside a protected directory;
	// violating this fails with ErrOverwriteInput before anything is written.
	Protect []string
	// Progress, when set, is called (from several goroutines) with the
	// number of tensor bytes just written.
	Progress func(n int64)
	// Replaceable names files that an existing output directory may hold,
	// besides weights, an index and the new output's own files, for
	// Force to replace it: what an earlier write of the caller's put
	// there (a report, say).
	Replaceable []string
	// Digest, when set, is called (from several goroutines) with the
	// SHA-256 of every tensor's bytes as they lie in the output.
	Digest func(tensor string, sum [sha256.Size]byte)
	// Stale, when set, is told of each temporary file or directory that
	// an earlier write of the same output left behind (see CleanStale).
	Stale func(Stale)
	// Beside lists files that WriteFile writes next to the output file:
	// built once every tensor is written, before the output is renamed
	// into place, and renamed into place right after it.
	Beside []ExtraFile
}

// File is an open safetensors file: its validated header and its data,
// memory-mapped read-only. Open one with OpenFile.
type File struct {
	Header
	path   string
	f      *os.File
	size   int64          // file size in bytes
	mmap   []byte         // the whole file mapped read-only; nil for an empty data section
	byName map[string]int // tensor name -> index in Tensors
}

// osFile is the open file behind a File, for the writer's copy path.
func (f *File) osFile() *os.File { return f.f }
