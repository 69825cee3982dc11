package prune24

import (
	"fmt"
	"math"
)

// matrixBytes returns rows·cols·dt.size(), or an error wrapping ErrShape
// when a dimension is negative, cols is not a multiple of 4 or the size
// overflows an int. dt must be valid.
func matrixBytes(dt elem, rows, cols int) (int, error) {
	if rows < 0 || cols < 0 {
		return 0, fmt.Errorf("%w: %d×%d matrix", ErrShape, rows, cols)
	}
	if cols%4 != 0 {
		return 0, fmt.Errorf("%w: %d columns is not a multiple of 4", ErrShape, cols)
	}
	return mulBytes(rows, cols, dt.size())
}

// mulBytes returns a·b·c for non-negative a, b, c, or an error wrapping
// ErrShape when the product overflows an int.
func mulBytes(a, b, c int) (int, error) {
	n := a
	for _, f := range [...]int{b, c} {
		if f != 0 && n > math.MaxInt/f {
			return 0, fmt.Errorf("%w: %d×%d×%d bytes overflows", ErrShape, a, b, c)
		}
		n *= f
	}
	return n, nil
}

// wholeRows returns how many cols-column rows of dt n bytes hold, or an
// error wrapping ErrShape when cols is negative or not a multiple of 4 or n
// is not a whole number of rows. dt must be valid.
func wholeRows(n int, dt elem, cols int) (int, error) {
	if cols < 0 || cols%4 != 0 {
		return 0, fmt.Errorf("%w: %d columns is not a multiple of 4", ErrShape, cols)
	}
	if cols == 0 {
		if n != 0 {
			return 0, fmt.Errorf("%w: %d bytes of 0-column rows", ErrShape, n)
		}
		return 0, nil
	}
	if cols > math.MaxInt/dt.size() {
		return 0, fmt.Errorf("%w: %d columns overflows", ErrShape, cols)
	}
	rowBytes := cols * dt.size()
	if n%rowBytes != 0 {
		return 0, fmt.Errorf("%w: %d bytes is not a whole number of %d-column %v rows", ErrShape, n, cols, dt)
	}
	return n / rowBytes, nil
}

// checkLen returns an error wrapping ErrShape unless the buffer called
// name has length got == want.
func checkLen(name string, got, want int) error {
	if got != want {
		return fmt.Errorf("%w: %s is %d bytes, want %d", ErrShape, name, got, want)
	}
	return nil
}
