package half

import (
	"math"
	"testing"
)

// widen decodes 16-bit values the slow, obvious way: bfloat16 is the upper
// half of a float32; binary16 is sign, 5 exponent bits (bias 15) and 10
// fraction bits, subnormal below exponent 1.
func widen(bf16 bool, h uint16) float64 {
	if bf16 {
		return float64(math.Float32frombits(uint32(h) << 16))
	}
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e, f := int(h>>10&0x1F), float64(h&0x3FF)
	switch e {
	case 0:
		return s * math.Ldexp(f, -24)
	case 31:
		return s * math.Inf(1)
	}
	return s * math.Ldexp(1024+f, e-25)
}

// TestRoundTrip: every finite value of each format comes back as itself;
// the midpoint of two neighbours goes to the one with the even last bit,
// the float32 values beside it to the nearer; half an ulp past the largest
// finite value is infinite.
func TestRoundTrip(t *testing.T) {
	for _, bf16 := range []bool{true, false} {
		round := func(v float32) uint16 {
			if bf16 {
				return BF16(v)
			}
			return F16(float64(v))
		}
		inf := uint16(0x7C00)
		if bf16 {
			inf = 0x7F80
		}
		for h := uint16(0); h < inf; h++ {
			for _, s := range []uint16{0, 0x8000} {
				v := float32(widen(bf16, h|s))
				if got := round(v); got != h|s {
					t.Fatalf("bf16 %v: round(%v) = %#04x, want %#04x", bf16, v, got, h|s)
				}
				next := h + 1
				hi := widen(bf16, next)
				if next == inf {
					hi = 2*widen(bf16, h) - widen(bf16, h-1)
				}
				mid := float32((widen(bf16, h) + hi) / 2)
				if float64(mid) != (widen(bf16, h)+hi)/2 {
					t.Fatalf("bf16 %v: the midpoint above %#04x is not a float32", bf16, h)
				}
				even := h
				if h&1 == 1 {
					even = next
				}
				below := math.Nextafter32(mid, 0)
				above := math.Nextafter32(mid, float32(math.Inf(1)))
				if s != 0 {
					mid, below, above = -mid, -below, -above
				}
				for _, c := range []struct {
					v    float32
					want uint16
				}{{mid, even | s}, {below, h | s}, {above, next | s}} {
					if got := round(c.v); got != c.want {
						t.Fatalf("bf16 %v: round(%v) = %#04x, want %#04x", bf16, c.v, got, c.want)
					}
				}
			}
		}
	}
	if got := F16(1e6); got != 0x7C00 {
		t.Errorf("F16(1e6) = %#04x, want 0x7c00", got)
	}
	if got := F16(math.Inf(-1)); got != 0xFC00 {
		t.Errorf("F16(-Inf) = %#04x, want 0xfc00", got)
	}
}

// TestF16KnownAnswers checks values whose bits IEEE 754 fixes: the
// largest finite and the subnormal extremes, and ties both ways.
func TestF16KnownAnswers(t *testing.T) {
	tests := []struct {
		in   float64
		want uint16
	}{
		{1, 0x3C00}, {-2, 0xC000}, {0.5, 0x3800}, {0, 0}, {math.Copysign(0, -1), 0x8000}, {65504, 0x7BFF}, {1e6, 0x7C00},
		{0.000060975552, 0x03FF},     // largest subnormal
		{0.0000000596046448, 0x0001}, // smallest subnormal
		{1.0009765625, 0x3C01},       // 1 + 2^-10
		{1.00048828125, 0x3C00},      // halfway, rounds to even
		{1.00146484375, 0x3C02},      // halfway, rounds to even (up)
	}
	for _, tt := range tests {
		if got := F16(tt.in); got != tt.want {
			t.Errorf("F16(%v) = %#04x, want %#04x", tt.in, got, tt.want)
		}
	}
}
