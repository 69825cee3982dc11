package kernels

import (
	"errors"
	"fmt"
	"os"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/cublaslt"
)

// loadCublasLt finds cuBLASLt (env: SFSURGERY_CUBLASLT, or empty), gives
// it a workspace of the device and sets d.lt, trying the candidates of
// cublaslt.Candidates in turn. It runs with the context current and the
// mutex held. The error says what was tried.
func (d *Device) loadCublasLt(env string) error {
	home, _ := os.UserHomeDir()
	var errs []error
	for _, path := range cublaslt.Candidates(env, home, os.Getenv("VIRTUAL_ENV")) {
		err := d.openCublasLt(path)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	if env != "" {
		return fmt.Errorf("no cuBLASLt: SFSURGERY_CUBLASLT=%s: %w", env, errors.Join(errs...))
	}
	return fmt.Errorf("no cuBLASLt (tried %d candidates: sonames, python wheels, /usr/local/cuda; "+
		"set SFSURGERY_CUBLASLT): %w", len(errs), errs[len(errs)-1])
}

// openCublasLt loads cuBLASLt from path with a workspace of
// cublaslt.WorkspaceBytes.
func (d *Device) openCublasLt(path string) error {
	lt, err := cublaslt.Open(path)
	if err != nil {
		return err
	}
	ws, err := d.alloc(cublaslt.WorkspaceBytes)
	if err != nil {
		return errors.Join(fmt.Errorf("cuBLASLt workspace: %w", err), lt.Close())
	}
	lt.SetWorkspace(ws.ptr, ws.n)
	d.lt, d.ltWork = lt, ws
	return nil
}

// ltShape is the cuBLASLt shape of a dense product of inputs of dt with
// y of yType (float32 for "" or checkpoint.F32, else dt).
func ltShape(dt, yType checkpoint.DType, m, n, k int) cublaslt.Shape {
	s := cublaslt.Shape{Type: dataType(dt), M: m, N: n, K: k}
	if yType == dt {
		s.Out = s.Type
	}
	return s
}

// ltMatmul queues the product of ops through cuBLASLt with its algorithm
// algo. It runs with the context current and the mutex held.
func (d *Device) ltMatmul(ops DenseOperands, algo int) error {
	return d.lt.Matmul(ops.Y.ptr, ops.X.ptr, ops.W.ptr, ltShape(ops.DType, ops.YType, ops.M, ops.N, ops.K), algo, d.stream)
}
