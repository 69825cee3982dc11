package checkpoint

import (
	"errors"
	"fmt"
	"strconv"
)

// Sentinel errors. Every error the package returns for a malformed file
// wraps exactly one of these, so callers can test the class with
// [errors.Is]; the names follow the reference implementation's.
var (
	// ErrFormat is wrapped by every error about a malformed checkpoint.
	ErrFormat = errors.New("invalid safetensors")

	ErrHeaderTooSmall    = fmt.Errorf("%w: file shorter than the 8-byte header length", ErrFormat)
	ErrHeaderTooLarge    = fmt.Errorf("%w: header length over the 100,000,000-byte limit", ErrFormat)
	ErrInvalidHeaderLen  = fmt.Errorf("%w: header length past the end of the file", ErrFormat)
	ErrInvalidHeader     = fmt.Errorf("%w: header is not valid UTF-8 JSON", ErrFormat)
	ErrDuplicateKey      = fmt.Errorf("%w: duplicate key", ErrFormat)
	ErrUnknownField      = fmt.Errorf("%w: unknown or wrongly cased field", ErrFormat)
	ErrUnknownDType      = fmt.Errorf("%w: unknown dtype", ErrFormat)
	ErrInvalidOffset     = fmt.Errorf("%w: data offsets do not tile the data section", ErrFormat)
	ErrTensorInvalidInfo = fmt.Errorf("%w: tensor size does not match dtype and shape", ErrFormat)
	ErrOverflow          = fmt.Errorf("%w: size overflows", ErrFormat)
	ErrMisaligned        = fmt.Errorf("%w: sub-byte tensor does not end on a byte", ErrFormat)
	ErrIncompleteBuffer  = fmt.Errorf("%w: data section length differs from the tensors' extent", ErrFormat)
	ErrInvalidMetadata   = fmt.Errorf("%w: __metadata__ must map strings to strings", ErrFormat)
	ErrIndex             = fmt.Errorf("%w: sharded index is inconsistent", ErrFormat)
	ErrMissingShard      = fmt.Errorf("%w: shard named by the index is missing", ErrIndex)
	ErrNotCheckpoint     = errors.New("not a safetensors checkpoint")
	ErrExist             = errors.New("output exists")
	ErrNotReplaceable    = errors.New("refusing to replace the output path")
	// ErrInstalled is wrapped by a writer's error that comes after the
	// output was renamed into place: the output is there, whole.
	ErrInstalled         = errors.New("the output was written")
	ErrOverwriteInput    = errors.New("output would overwrite an input")
	ErrInvalidTensorName = errors.New("invalid tensor name")
)

// Error describes a problem in a checkpoint file: which file, which tensor
// and which byte offset where known, and the sentinel class it belongs to.
type Error struct {
	File   string // path of the file, empty if unknown
	Tensor string // tensor name, empty if none
	Off    int64  // byte offset in the file, -1 if unknown
	Err    error  // the sentinel class (one of the Err* values)
	Detail string // what exactly is wrong
}

// Error formats e as "file: tensor "name": byte N: class: detail".
func (e *Error) Error() string {
	s := ""
	if e.File != "" {
		s = e.File + ": "
	}
	if e.Tensor != "" {
		s += "tensor " + strconv.Quote(e.Tensor) + ": "
	}
	if e.Off >= 0 {
		s += "byte " + strconv.FormatInt(e.Off, 10) + ": "
	}
	s += e.Err.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the sentinel class.
func (e *Error) Unwrap() error { return e.Err }
