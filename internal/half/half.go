// Package half rounds floating-point values to the 16-bit formats of the
// checkpoints, bfloat16 and IEEE binary16, to nearest with ties to even.
// TestRoundTrip holds both against a widening decoder: every finite value,
// every midpoint between neighbours and the values beside it, overflow.
package half

import "math"

// BF16 returns the bfloat16 bits nearest to f, ties to even; values past
// the largest finite bfloat16 by half an ulp or more become ±Inf. NaN is
// not preserved (callers hold finite values).
func BF16(f float32) uint16 {
	u := math.Float32bits(f)
	return uint16((u + 0x7FFF + (u>>16)&1) >> 16)
}

// F16 returns the IEEE binary16 bits nearest to x, ties to even,
// subnormals included; values past the largest finite half by half an ulp
// or more become ±Inf. NaN is not preserved.
func F16(x float64) uint16 {
	sign := uint16(0)
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
		return sign | uint16(q)
	}
	return sign | uint16(e+15)<<10 | uint16(q-1024)
}
