package prune24

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// elem is an element type the kernels handle. Every exported function
// resolves its checkpoint.DType to an elem once, so that no loop compares
// type names.
type elem uint8

// The element types of the kernels.
const (
	elemF16  elem = iota + 1 // IEEE 754 binary16
	elemBF16                 // bfloat16: the upper 16 bits of a binary32
	elemF32                  // IEEE 754 binary32
)

// elemOf returns the elem of dt, or an error wrapping ErrDType unless dt
// is F16, BF16 or F32.
func elemOf(dt checkpoint.DType) (elem, error) {
	switch dt {
	case checkpoint.F16:
		return elemF16, nil
	case checkpoint.BF16:
		return elemBF16, nil
	case checkpoint.F32:
		return elemF32, nil
	}
	return 0, fmt.Errorf("%w: %q (want F16, BF16 or F32)", ErrDType, dt)
}

// CheckDType returns nil if the functions of this package take elements
// of type dt (F16, BF16 or F32), and otherwise an error wrapping ErrDType.
func CheckDType(dt checkpoint.DType) error {
	_, err := elemOf(dt)
	return err
}

// String returns the safetensors name of e ("F16", "BF16", "F32").
func (e elem) String() string {
	switch e {
	case elemF16:
		return string(checkpoint.F16)
	case elemBF16:
		return string(checkpoint.BF16)
	}
	return string(checkpoint.F32)
}

// size returns the size of one element in bytes.
func (e elem) size() int {
	if e == elemF32 {
		return 4
	}
	return 2
}

// float64 decodes the low e.size() bytes' worth of bits (an element as
// read little-endian) as a value of type e. Higher bits are ignored.
func (e elem) float64(bits uint64) float64 {
	switch e {
	case elemF16:
		return F16ToFloat64(uint16(bits))
	case elemBF16:
		return BF16ToFloat64(uint16(bits))
	}
	return F32ToFloat64(uint32(bits))
}

// DecodeFloat64 sets dst[i] to the value of element i of src, elements of
// type dt read little-endian, for every i of dst. The values are exact
// (see [F16ToFloat64]); a NaN decodes to a NaN. src must hold exactly
// len(dst) elements: otherwise the error wraps ErrShape, and for a dt
// other than F16, BF16 and F32 it wraps ErrDType.
func DecodeFloat64(dst []float64, src []byte, dt checkpoint.DType) error {
	e, err := elemOf(dt)
	if err != nil {
		return err
	}
	if err := checkLen("src", len(src), len(dst)*e.size()); err != nil {
		return err
	}
	switch e {
	case elemF16:
		for i := range dst {
			dst[i] = F16ToFloat64(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case elemBF16:
		for i := range dst {
			dst[i] = BF16ToFloat64(binary.LittleEndian.Uint16(src[2*i:]))
		}
	default:
		for i := range dst {
			dst[i] = F32ToFloat64(binary.LittleEndian.Uint32(src[4*i:]))
		}
	}
	return nil
}

// BF16ToFloat64 returns the value of the bfloat16 with bits b, exactly.
func BF16ToFloat64(b uint16) float64 {
	return float64(math.Float32frombits(uint32(b) << 16))
}

// F32ToFloat64 returns the value of the binary32 with bits b, exactly.
func F32ToFloat64(b uint32) float64 {
	return float64(math.Float32frombits(b))
}

// F16ToFloat64 returns the value of the binary16 with bits h, exactly,
// including subnormals, signed zeros, infinities and NaN payloads.
func F16ToFloat64(h uint16) float64 {
	sign := uint64(h&0x8000) << 48
	exp := uint64(h>>10) & 0x1F
	man := uint64(h & 0x3FF)
	switch exp {
	case 0: // zero or subnormal: man · 2^-24, exact in a float64
		v := float64(man) * 0x1p-24
		if sign != 0 {
			v = -v
		}
		return v
	case 0x1F: // infinity or NaN
		return math.Float64frombits(sign | 0x7FF<<52 | man<<42)
	}
	// Rebias the exponent from 15 to 1023 and widen the mantissa.
	return math.Float64frombits(sign | (exp+1023-15)<<52 | man<<42)
}
