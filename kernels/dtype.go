package kernels

import (
	"fmt"

	"github.com/sfsurgery/sfsurgery/cuda"
)

// DType is the element type of the 16-bit weights and activations that the
// kernels read. Results are always float32.
type DType int

// The data types the kernels support.
const (
	BF16 DType = iota + 1 // bfloat16
	F16                   // IEEE half precision
)

// String returns "BF16", "F16", or "DType(N)" for an unknown value.
func (dt DType) String() string {
	switch dt {
	case BF16:
		return "BF16"
	case F16:
		return "F16"
	}
	return fmt.Sprintf("DType(%d)", int(dt))
}

// valid reports whether dt is one of the supported data types.
func (dt DType) valid() bool { return dt == BF16 || dt == F16 }

// cudaDataType returns the cudaDataType_t value of dt.
func (dt DType) cudaDataType() cuda.DataType {
	if dt == BF16 {
		return cuda.R16BF
	}
	return cuda.R16F
}
