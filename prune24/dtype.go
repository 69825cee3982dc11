package prune24

import (
	"fmt"
	"math"
	"strconv"
)

// DType is the element type of a matrix. The zero value is not a valid type.
type DType int

// The supported element types.
const (
	F16  DType = iota + 1 // IEEE 754 binary16
	BF16                  // bfloat16: the upper 16 bits of a binary32
	F32                   // IEEE 754 binary32
)

// String returns the safetensors name of d ("F16", "BF16", "F32"), or
// "DType(n)" for a value that is not one of the constants.
func (d DType) String() string {
	switch d {
	case F16:
		return "F16"
	case BF16:
		return "BF16"
	case F32:
		return "F32"
	}
	return "DType(" + strconv.Itoa(int(d)) + ")"
}

// Size returns the size of one element in bytes, or 0 for an invalid d.
func (d DType) Size() int {
	switch d {
	case F16, BF16:
		return 2
	case F32:
		return 4
	}
	return 0
}

// DTypeOf returns the DType for a safetensors dtype name ("F16", "BF16" or
// "F32"), and whether the name is one of those.
func DTypeOf(name string) (DType, bool) {
	switch name {
	case "F16":
		return F16, true
	case "BF16":
		return BF16, true
	case "F32":
		return F32, true
	}
	return 0, false
}

// checkDType returns an error wrapping ErrDType unless d is valid.
func checkDType(d DType) error {
	if d.Size() == 0 {
		return fmt.Errorf("%w: %v", ErrDType, d)
	}
	return nil
}

// Float64 decodes the low d.Size() bytes' worth of bits (an element as read
// little-endian) as a value of type d. Higher bits are ignored. The result
// is exact for every finite value and infinity; a NaN decodes to a NaN. It
// returns NaN for an invalid d.
func Float64(bits uint64, d DType) float64 {
	switch d {
	case F16:
		return F16ToFloat64(uint16(bits))
	case BF16:
		return BF16ToFloat64(uint16(bits))
	case F32:
		return F32ToFloat64(uint32(bits))
	}
	return math.NaN()
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
