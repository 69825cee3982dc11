package prune24

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the package returns wraps exactly one of
// them, so callers can test the class with [errors.Is].
var (
	// ErrShape reports a buffer length or matrix shape that does not fit
	// the dtype, the rule or the format.
	ErrShape = errors.New("invalid shape")
	// ErrDType reports an element type other than F16, BF16 and F32.
	ErrDType = errors.New("unsupported dtype")
	// ErrInvalidRule reports a Rule other than Rule24 and Rule12.
	ErrInvalidRule = errors.New("unsupported sparsity rule")
	// ErrNaN reports a NaN in data to be pruned; see [NaNError].
	ErrNaN = errors.New("NaN")
	// ErrNot24 reports data that does not satisfy its sparsity rule; see
	// [StructureError].
	ErrNot24 = errors.New("not 2:4 sparse")
	// ErrMeta reports invalid Ampere metadata; see [MetaError].
	ErrMeta = errors.New("invalid 2:4 metadata")
	// ErrBitmask reports an invalid sparse-24-bitmask mask; see
	// [BitmaskError].
	ErrBitmask = errors.New("invalid 2:4 bitmask")
	// ErrRule reports pruned data that differs from what [Prune] gives;
	// see [RuleError].
	ErrRule = errors.New("differs from the prune rule")
)

// NaNError reports a NaN found while pruning. It wraps ErrNaN.
type NaNError struct {
	Row, Col int // location of the first NaN, Row counted from rowBase
}

// Error formats e as "row R, column C: NaN".
func (e *NaNError) Error() string {
	return fmt.Sprintf("row %d, column %d: NaN", e.Row, e.Col)
}

// Unwrap returns ErrNaN.
func (e *NaNError) Unwrap() error { return ErrNaN }

// StructureError reports a group that keeps more elements than its rule
// allows. It wraps ErrNot24.
type StructureError struct {
	Row, Col int  // row, and first column of the group
	Rule     Rule // the rule broken: Rule24 for a group of 4, Rule12 for a pair
	Nonzero  int  // nonzero elements in the group
}

// Error formats e as "row R, column C: 3 nonzeros in a 2:4 group".
func (e *StructureError) Error() string {
	what := "group"
	if e.Rule == Rule12 {
		what = "pair"
	}
	return fmt.Sprintf("row %d, column %d: %d nonzeros in a %v %s", e.Row, e.Col, e.Nonzero, e.Rule, what)
}

// Unwrap returns ErrNot24.
func (e *StructureError) Unwrap() error { return ErrNot24 }

// MetaError reports a metadata nibble of the Ampere layout that is not one
// of the index pairs PyTorch writes. It wraps ErrMeta.
type MetaError struct {
	Row, Group int  // row, and group of 4 (or, for F32, pair) within it
	Nibble     byte // the offending nibble
	Rule       Rule // Rule24 for F16 and BF16, Rule12 for F32
}

// Error formats e as "row R, group G: meta nibble 0x0 is not a valid 2:4
// index pair".
func (e *MetaError) Error() string {
	what := "2:4 index pair"
	if e.Rule == Rule12 {
		what = "1:2 index"
	}
	return fmt.Sprintf("row %d, group %d: meta nibble %#x is not a valid %s", e.Row, e.Group, e.Nibble, what)
}

// Unwrap returns ErrMeta.
func (e *MetaError) Unwrap() error { return ErrMeta }

// BitmaskError reports a group of a sparse-24-bitmask mask without exactly
// 2 bits set, or set padding bits after the last column. It wraps
// ErrBitmask.
type BitmaskError struct {
	Row, Group int  // row, and group of 4 within it
	Bits       int  // bits set in the group (or in the padding)
	Padding    bool // the bits are padding past the last column (Group is cols/4)
}

// Error formats e as "row R, group G: 3 mask bits set, want 2".
func (e *BitmaskError) Error() string {
	if e.Padding {
		return fmt.Sprintf("row %d, group %d: %d padding bits set past the last column, want 0", e.Row, e.Group, e.Bits)
	}
	return fmt.Sprintf("row %d, group %d: %d mask bits set, want 2", e.Row, e.Group, e.Bits)
}

// Unwrap returns ErrBitmask.
func (e *BitmaskError) Unwrap() error { return ErrBitmask }

// RuleError reports the first element where pruned data differs from what
// [Prune] makes of the original. It wraps ErrRule.
type RuleError struct {
	Row, Col  int
	Got, Want uint32 // the element's bits in the pruned data and from the rule
}

// Error formats e as "row R, column C: bits 0x3c00, the rule gives 0x0".
func (e *RuleError) Error() string {
	return fmt.Sprintf("row %d, column %d: bits %#x, the rule gives %#x", e.Row, e.Col, e.Got, e.Want)
}

// Unwrap returns ErrRule.
func (e *RuleError) Unwrap() error { return ErrRule }

// OffsetRows returns err with the row of its location counted from base:
// for callers that hand these functions a chunk of a larger matrix whose
// first row is base. Errors without a row are returned as they are.
func OffsetRows(err error, base int) error {
	var (
		nan *NaNError
		st  *StructureError
		me  *MetaError
		be  *BitmaskError
		re  *RuleError
	)
	switch {
	case base == 0 || err == nil:
		return err
	case errors.As(err, &nan):
		e := *nan
		e.Row += base
		return &e
	case errors.As(err, &st):
		e := *st
		e.Row += base
		return &e
	case errors.As(err, &me):
		e := *me
		e.Row += base
		return &e
	case errors.As(err, &be):
		e := *be
		e.Row += base
		return &e
	case errors.As(err, &re):
		e := *re
		e.Row += base
		return &e
	}
	return err
}
