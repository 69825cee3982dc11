package kernels

import (
	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/cuda"
)

// The kernels read 16-bit weights and activations of type checkpoint.BF16
// or checkpoint.F16; their results are float32, or for the decode and
// prefill kernels (SparseOperands.YType) of the element type.

// validType reports whether the kernels read elements of type dt.
func validType(dt checkpoint.DType) bool { return dt == checkpoint.BF16 || dt == checkpoint.F16 }

// dataType returns the cudaDataType_t of dt, one of the types validType
// accepts.
func dataType(dt checkpoint.DType) cuda.DataType {
	if dt == checkpoint.BF16 {
		return cuda.R16BF
	}
	return cuda.R16F
}
