package prune24

import (
	"encoding/binary"
	"math"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/internal/half"
)

// getBits returns the bits of element i of b.
func getBits(b []byte, i int, dt checkpoint.DType) uint32 {
	if dt == checkpoint.F32 {
		return binary.LittleEndian.Uint32(b[4*i:])
	}
	return uint32(binary.LittleEndian.Uint16(b[2*i:]))
}

// putBits sets element i of b to bits.
func putBits(b []byte, i int, dt checkpoint.DType, bits uint32) {
	if dt == checkpoint.F32 {
		binary.LittleEndian.PutUint32(b[4*i:], bits)
		return
	}
	binary.LittleEndian.PutUint16(b[2*i:], uint16(bits))
}

// fromFloat32 returns the bits of f in dt, rounding to nearest even.
func fromFloat32(f float32, dt checkpoint.DType) uint32 {
	switch dt {
	case checkpoint.BF16:
		return uint32(half.BF16(f))
	case checkpoint.F16:
		return uint32(half.F16(float64(f)))
	}
	return math.Float32bits(f)
}

// f16FromFloat64 rounds x to the nearest F16, ties to even, overflowing
// to ±Inf.
func f16FromFloat64(x float64) uint32 { return uint32(half.F16(x)) }

// magOf returns the magnitude bits of one element of dt, one of the
// package's types.
func magOf(dt checkpoint.DType) uint32 {
	e, _ := elemOf(dt)
	return magMask(e)
}
