package cuda

import (
	"errors"
	"fmt"
)

// ErrNoLibrary is wrapped by the error of [Load] when the driver library
// cannot be opened.
var ErrNoLibrary = errors.New("cuda: driver library not found")

// ErrNoSymbol is wrapped by the error of a call whose optional entry
// point the loaded driver lacks.
var ErrNoSymbol = errors.New("cuda: the driver lacks this entry point")

// Error is a failed driver call.
type Error struct {
	Op   string // the function called, e.g. "cuMemAlloc_v2"
	Code Result // its result code
	Name string // the code's name, e.g. "CUDA_ERROR_OUT_OF_MEMORY"
}

// Error returns "OP: NAME (CODE)", e.g.
// "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)".
func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (%d)", e.Op, e.Name, int(e.Code))
}

// IsResult reports whether err is or wraps an [*Error] of result r.
func IsResult(err error, r Result) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == r
}
