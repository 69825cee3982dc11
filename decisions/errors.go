package decisions

import (
	"errors"
	"strconv"
)

// ErrInvalid is wrapped by every refusal of a decisions file: not one,
// malformed, or not made for the model and targets at hand.
var ErrInvalid = errors.New("invalid decisions")

// Error is a refusal of a decisions file, as one line: "FILE: tensor
// "NAME": what". It wraps ErrInvalid, and the error of another package
// that caused it where there is one (a checkpoint.ErrFormat class, a
// prune24.ErrBitmask).
type Error struct {
	// File is the decisions file's path.
	File string
	// Tensor is the tensor of the file concerned (one that is there, or
	// one that should be); empty for the file as a whole.
	Tensor string
	// Detail says what is wrong.
	Detail string
	// Err is the cause, when another package found it; nil otherwise.
	Err error
}

// Error formats e as "FILE: tensor "NAME": detail".
func (e *Error) Error() string {
	s := e.File + ": "
	if e.Tensor != "" {
		s += "tensor " + strconv.Quote(e.Tensor) + ": "
	}
	return s + e.Detail
}

// Unwrap returns ErrInvalid and the cause, if any.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}
