package verify

import (
	"encoding/binary"
	"math"

	"github.com/sfsurgery/sfsurgery/prune24"
)

// elem decodes the little-endian element at the start of b.
func elem(b []byte, dt prune24.DType) float64 {
	switch dt {
	case prune24.F32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case prune24.BF16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	default:
		return f16(binary.LittleEndian.Uint16(b))
	}
}

// decodeRow decodes a row of elements into w.
func decodeRow(w []float64, b []byte, dt prune24.DType) {
	n := dt.Size()
	for i := range w {
		w[i] = elem(b[i*n:], dt)
	}
}

// f16 decodes an IEEE half.
func f16(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10&0x1F), float64(h&0x3FF)
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 0x1F:
		if frac != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * math.Ldexp(1024+frac, exp-25)
}
