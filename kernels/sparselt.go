package kernels

import (
	"errors"
	"fmt"
	"os"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/cusparselt"
)

// ErrNoSparseLt is wrapped by the error of [Device.OpenSparseLt] when
// cuSPARSELt cannot be found, loaded or used on this machine.
var ErrNoSparseLt = errors.New("kernels: cuSPARSELt unavailable")

// SparseLt is NVIDIA's cuSPARSELt (package cusparselt) loaded on a
// [Device]: compression of 2:4 weights into its own layout, and matmul
// plans cached per shape, on the Device's buffers and stream. Its methods
// are serialised with the Device's; Close releases it (the Device's Close
// frees its buffers but not the library).
type SparseLt struct {
	d      *Device
	lib    *cusparselt.Library
	ws     *Buffer // workspace, grown to the largest plan's need
	plans  map[*cusparselt.Plan]*SparseLtPlan
	closed bool
}

// OpenSparseLt finds and initialises cuSPARSELt for d (the environment
// variable SFSURGERY_CUSPARSELT may name the library file). An error that
// means the library is missing, unusable or too old wraps
// [ErrNoSparseLt]; callers go on without it.
func (d *Device) OpenSparseLt() (*SparseLt, error) {
	env := os.Getenv("SFSURGERY_CUSPARSELT")
	home, _ := os.UserHomeDir()
	var errs []error
	for _, path := range cusparselt.Candidates(env, home, os.Getenv("VIRTUAL_ENV")) {
		s, err := d.openSparseLt(path)
		if err == nil {
			return s, nil
		}
		if errors.Is(err, ErrClosed) {
			return nil, err
		}
		errs = append(errs, err)
	}
	if env != "" {
		return nil, fmt.Errorf("%w: SFSURGERY_CUSPARSELT=%s: %w", ErrNoSparseLt, env, errors.Join(errs...))
	}
	return nil, fmt.Errorf("%w (tried the soname, python wheels, /usr/local/cuda; set SFSURGERY_CUSPARSELT): %w",
		ErrNoSparseLt, errs[len(errs)-1])
}

func (d *Device) openSparseLt(path string) (*SparseLt, error) {
	lib, err := cusparselt.Load(path)
	if err != nil {
		return nil, err
	}
	if err := d.do(func() error { return lib.Init(d.stream) }); err != nil {
		return nil, errors.Join(err, lib.Release())
	}
	return &SparseLt{d: d, lib: lib, plans: make(map[*cusparselt.Plan]*SparseLtPlan)}, nil
}

// Version returns the library's version number, e.g. 800 for 0.8.0.
func (s *SparseLt) Version() int { return s.lib.Version() }

// Path returns the file the library was loaded from.
func (s *SparseLt) Path() string { return s.lib.Path() }

// String says which cuSPARSELt is in use, e.g. "cuSPARSELt 0.8.0 (/path)".
func (s *SparseLt) String() string { return s.lib.String() }

// do runs fn on the device's thread with the mutex held, after checking
// that s is open.
func (s *SparseLt) do(fn func() error) error {
	if s == nil {
		return fmt.Errorf("%w: nil SparseLt", ErrClosed)
	}
	return s.d.do(func() error {
		if s.closed {
			return fmt.Errorf("%w: cuSPARSELt was closed", ErrClosed)
		}
		return fn()
	})
}

// Close destroys the cached plans and the library handle and frees the
// workspace. Calling it again does nothing.
func (s *SparseLt) Close() error {
	if s == nil {
		return nil
	}
	err := s.d.do(func() error {
		if s.closed {
			return nil
		}
		s.closed = true
		var errs []error
		errs = append(errs, s.lib.Destroy())
		if s.ws != nil && s.ws.ptr != 0 {
			errs = append(errs, s.d.free(s.ws))
		}
		return errors.Join(errs...)
	})
	if errors.Is(err, ErrClosed) {
		// The Device was closed first: its context and buffers are gone.
		err = nil
	}
	return errors.Join(err, s.lib.Release())
}

// CompressedSize returns the bytes of the compressed form of a 2:4
// weight n×k of type dt, the size of the destination of
// [SparseLt.Compress].
func (s *SparseLt) CompressedSize(dt checkpoint.DType, n, k int) (int64, error) {
	size, _, err := s.compressedSize(dt, n, k)
	return size, err
}

func (s *SparseLt) compressedSize(dt checkpoint.DType, n, k int) (size, scratch int64, err error) {
	if err := checkDims("SparseLt.CompressedSize", dt, 1, n, k); err != nil {
		return 0, 0, err
	}
	err = s.do(func() error {
		var err error
		size, scratch, err = s.lib.CompressedSize(dataType(dt), n, k)
		return err
	})
	return size, scratch, err
}

// Compress writes into dst the library's compressed form of the weight w
// [n][k] (row-major, type dt), which must already be 2:4 along k (as
// sfsurgery prunes it). dst holds at least CompressedSize bytes. The
// compression runs on the GPU, on the device's stream.
func (s *SparseLt) Compress(dst, w *Buffer, dt checkpoint.DType, n, k int) error {
	const op = "SparseLt.Compress"
	if err := checkDims(op, dt, 1, n, k); err != nil {
		return err
	}
	wBytes, err := size(n, k, 2)
	if err != nil {
		return err
	}
	cBytes, scratchBytes, err := s.compressedSize(dt, n, k)
	if err != nil {
		return err
	}
	return s.do(func() error {
		if err := s.d.operands(op, operand{dst, "dst", cBytes}, operand{w, "w", wBytes}); err != nil {
			return err
		}
		var scratch *Buffer
		if scratchBytes > 0 {
			if scratch, err = s.d.alloc(scratchBytes); err != nil {
				return err
			}
		}
		err := s.lib.Compress(dst.ptr, w.ptr, bufPtr(scratch), dataType(dt), n, k, s.d.stream)
		if scratch != nil {
			// The stream must finish with the scratch before it is freed.
			err = errors.Join(err, s.d.drv.CtxSynchronize(), s.d.free(scratch))
		}
		return err
	})
}

// workspace returns a workspace of at least n bytes (nil for 0). It runs
// with the mutex held.
func (s *SparseLt) workspace(n int64) (*Buffer, error) {
	if n == 0 {
		return nil, nil
	}
	if s.ws != nil && s.ws.ptr != 0 && s.ws.n >= n {
		return s.ws, nil
	}
	if s.ws != nil && s.ws.ptr != 0 {
		if err := s.d.drv.CtxSynchronize(); err != nil {
			return nil, err
		}
		if err := s.d.free(s.ws); err != nil {
			return nil, err
		}
	}
	ws, err := s.d.alloc(n)
	if err != nil {
		return nil, fmt.Errorf("cuSPARSELt workspace: %w", err)
	}
	s.ws = ws
	return ws, nil
}
