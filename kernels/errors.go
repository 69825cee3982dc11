package kernels

import (
	"errors"
	"fmt"
)

// ErrUnavailable is wrapped by every error that means this machine cannot
// run GPU checks at all: no CUDA driver, no device, a device older than
// sm_80, or a driver too old for the embedded PTX.
var ErrUnavailable = errors.New("kernels: GPU unavailable")

// ErrArgument is wrapped by errors about invalid arguments: sizes, shapes,
// data types, or buffers that do not fit the operation.
var ErrArgument = errors.New("kernels: invalid argument")

// ErrClosed is wrapped by errors from a closed Device or a freed Buffer.
var ErrClosed = errors.New("kernels: use of closed device or freed buffer")

// unavailable returns an error wrapping ErrUnavailable (and cause, if any)
// with a one-line reason.
func unavailable(reason string, cause error) error {
	if cause == nil {
		return fmt.Errorf("%w: %s", ErrUnavailable, reason)
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, reason, cause)
}

// argError returns an error wrapping ErrArgument.
func argError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrArgument, fmt.Sprintf(format, args...))
}

// wrap prefixes err with the package name unless it already wraps one of
// the package's sentinels (whose messages carry the prefix).
func wrap(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrArgument) || errors.Is(err, ErrClosed) {
		return err
	}
	return fmt.Errorf("kernels: %w", err)
}
