package cuda

import (
	"fmt"
	"unsafe"

	"github.com/sfsurgery/sfsurgery/internal/dynlib"
)

// TensorMap is a CUDA tensor map (CUtensorMap): 128 opaque bytes that
// describe a tiled view of a tensor in device memory for the bulk tensor
// copies of sm_90 (cp.async.bulk.tensor). A kernel takes it by value, as
// a __grid_constant__ parameter: pass it to [Driver.LaunchArgs] with
// [TensorArg].
type TensorMap struct{ words [16]uint64 }

// Swizzle is a tensor map's shared-memory swizzle (CUtensorMapSwizzle):
// the 16-byte unit u of a box row lands at unit u XOR (row bits).
type Swizzle int32

// The swizzles of [TensorMap2D].
const (
	SwizzleNone Swizzle = 0 // CU_TENSOR_MAP_SWIZZLE_NONE
	Swizzle64B  Swizzle = 2 // CU_TENSOR_MAP_SWIZZLE_64B: rows of 64 bytes, unit u at u ^ ((row/2) % 4)
	Swizzle128B Swizzle = 3 // CU_TENSOR_MAP_SWIZZLE_128B: rows of 128 bytes, unit u at u ^ (row % 8)
)

// TensorMap2D is a 2-D row-major tensor of Rows × Cols elements of
// ElemBytes bytes (2 or 4; copied as raw bits) at device address Addr,
// rows Cols·ElemBytes bytes apart, copied in boxes of BoxCols × BoxRows.
// Elements out of bounds read as zero.
type TensorMap2D struct {
	Addr             uint64
	ElemBytes        int
	Cols, Rows       int
	BoxCols, BoxRows int
	Swizzle          Swizzle
}

// Tensor map encoding values (cuda.h; tools/abi/cuabi.c checks them).
const (
	tensorUint16      = 1 // CU_TENSOR_MAP_DATA_TYPE_UINT16
	tensorUint32      = 2 // CU_TENSOR_MAP_DATA_TYPE_UINT32
	tensorInterleave0 = 0 // CU_TENSOR_MAP_INTERLEAVE_NONE
	tensorL2Promo256  = 3 // CU_TENSOR_MAP_L2_PROMOTION_L2_256B
	tensorOOBZero     = 0 // CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: zeros
)

// maxTensorDim is the largest size of a tensor map's dimension
// (cuTensorMapEncodeTiled: each globalDim is at most 2^32).
const maxTensorDim = 1 << 32

// check validates v against the driver's rules for a tiled 2-D map and
// returns its data type. The driver's bound on the row stride (under
// 2^40 bytes) needs no check of its own: with at most 2^32 columns of at
// most 4 bytes a row is at most 2^34 bytes (TestTensorMap2DDims holds
// it).
func (v TensorMap2D) check() (int32, error) {
	var dt int32
	switch v.ElemBytes {
	case 2:
		dt = tensorUint16
	case 4:
		dt = tensorUint32
	default:
		return 0, fmt.Errorf("tensor map: %d-byte elements, want 2 or 4", v.ElemBytes)
	}
	pitch := v.Cols * v.ElemBytes
	switch {
	case v.Addr%16 != 0:
		return 0, fmt.Errorf("tensor map: address %#x is not 16-byte aligned", v.Addr)
	case v.Cols < 1 || v.Rows < 1 || uint64(v.Cols) > maxTensorDim || uint64(v.Rows) > maxTensorDim:
		return 0, fmt.Errorf("tensor map: %d × %d elements, each side 1 … 2^32", v.Rows, v.Cols)
	case pitch%16 != 0:
		return 0, fmt.Errorf("tensor map: row pitch %d bytes is not a multiple of 16", pitch)
	case v.BoxCols < 1 || v.BoxCols > 256 || v.BoxRows < 1 || v.BoxRows > 256:
		return 0, fmt.Errorf("tensor map: box %d × %d, each side 1 … 256", v.BoxRows, v.BoxCols)
	case (v.BoxCols*v.ElemBytes)%16 != 0:
		return 0, fmt.Errorf("tensor map: box row of %d bytes is not a multiple of 16", v.BoxCols*v.ElemBytes)
	}
	width := 0 // the swizzle's row width, 0 for none
	switch v.Swizzle {
	case SwizzleNone:
	case Swizzle64B:
		width = 64
	case Swizzle128B:
		width = 128
	default:
		return 0, fmt.Errorf("tensor map: swizzle %d, want SwizzleNone, Swizzle64B or Swizzle128B", v.Swizzle)
	}
	if width != 0 && v.BoxCols*v.ElemBytes > width {
		return 0, fmt.Errorf("tensor map: box row of %d bytes is wider than its %d-byte swizzle", v.BoxCols*v.ElemBytes, width)
	}
	return dt, nil
}

// EncodeTensorMap2D makes the tensor map of v (cuTensorMapEncodeTiled).
// A driver without it (before CUDA 12.0) gives an error wrapping
// [ErrNoSymbol].
func (d *Driver) EncodeTensorMap2D(v TensorMap2D) (TensorMap, error) {
	dt, err := v.check()
	if err != nil {
		return TensorMap{}, err
	}
	if d.cuTensorMapEncodeTiled == nil {
		return TensorMap{}, fmt.Errorf("%w: cuTensorMapEncodeTiled", ErrNoSymbol)
	}
	// The driver writes a 64-byte aligned CUtensorMap.
	var buf [24]uint64
	tm := (*TensorMap)(unsafe.Add(unsafe.Pointer(&buf[0]), (64-uintptr(unsafe.Pointer(&buf[0]))%64)%64))
	dims := [2]uint64{uint64(v.Cols), uint64(v.Rows)}
	strides := [1]uint64{uint64(v.Cols * v.ElemBytes)}
	box := [2]uint32{uint32(v.BoxCols), uint32(v.BoxRows)}
	elem := [2]uint32{1, 1}
	r := d.cuTensorMapEncodeTiled(tm, dt, 2, v.Addr, &dims[0], &strides[0], &box[0], &elem[0],
		tensorInterleave0, int32(v.Swizzle), tensorL2Promo256, tensorOOBZero)
	if err := d.check("cuTensorMapEncodeTiled", r); err != nil {
		return TensorMap{}, err
	}
	return *tm, nil
}

// bindOptional binds the entry points a driver may lack with bind
// ([dynlib.Bind] on the driver library, in [Load]). One the driver lacks
// (an error wrapping [dynlib.ErrNoSymbol]) stays nil, and its calls give
// an error wrapping [ErrNoSymbol]; any other failure to bind is returned
// as it is, wrapped with the entry point's name. TestBindOptional holds
// both.
func (d *Driver) bindOptional(bind func(dynlib.Symbol) error) error {
	if err := dynlib.BindOptional(bind, dynlib.Sym(&d.cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled")); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	return nil
}
