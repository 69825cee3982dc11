package prune24

import (
	"encoding/binary"
	"math"

	"github.com/sfsurgery/sfsurgery/checkpoint"
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

// fromFloat32 returns the bits of f in dt, rounding to nearest even (NaN
// and overflow are not needed by the tests that call it).
func fromFloat32(f float32, dt checkpoint.DType) uint32 {
	u := math.Float32bits(f)
	switch dt {
	case checkpoint.BF16:
		return (u + 0x7FFF + (u>>16)&1) >> 16
	case checkpoint.F16:
		return f16FromFloat64(float64(f))
	}
	return u
}

// f16FromFloat64 rounds x to the nearest F16, ties to even, overflowing
// to ±Inf (NaN is not needed by the tests).
func f16FromFloat64(x float64) uint32 {
	sign := uint32(0)
	if math.Signbit(x) {
		sign, x = 0x8000, -x
	}
	if x == 0 {
		return sign
	}
	if math.IsInf(x, 0) {
		return sign | 0x7C00
	}
	e := max(math.Ilogb(x), -14)
	q := math.RoundToEven(math.Ldexp(x, 10-e)) // 11 significant bits
	if q >= 2048 {
		e, q = e+1, q/2
	}
	switch {
	case e > 15:
		return sign | 0x7C00
	case q < 1024: // subnormal
		return sign | uint32(q)
	}
	return sign | uint32(e+15)<<10 | uint32(q-1024)
}

// magOf returns the magnitude bits of one element of dt, one of the
// package's types.
func magOf(dt checkpoint.DType) uint32 {
	e, _ := elemOf(dt)
	return magMask(e)
}
