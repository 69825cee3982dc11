package prune24

import (
	"math"
	"testing"
)

func TestDType(t *testing.T) {
	tests := []struct {
		d    DType
		name string
		size int
		ok   bool
	}{
		{F16, "F16", 2, true},
		{BF16, "BF16", 2, true},
		{F32, "F32", 4, true},
		{0, "DType(0)", 0, false},
		{DType(9), "DType(9)", 0, false},
	}
	for _, tt := range tests {
		if got := tt.d.String(); got != tt.name {
			t.Errorf("DType(%d).String() = %q, want %q", int(tt.d), got, tt.name)
		}
		if got := tt.d.Size(); got != tt.size {
			t.Errorf("%v.Size() = %d, want %d", tt.d, got, tt.size)
		}
		d, ok := DTypeOf(tt.name)
		if ok != tt.ok || (ok && d != tt.d) {
			t.Errorf("DTypeOf(%q) = %v, %v; want %v, %v", tt.name, d, ok, tt.d, tt.ok)
		}
	}
	for _, name := range []string{"", "f16", "Bf16", "F64", "I8", "F8_E4M3"} {
		if d, ok := DTypeOf(name); ok {
			t.Errorf("DTypeOf(%q) = %v, true; want false", name, d)
		}
	}
}

func TestRuleString(t *testing.T) {
	for r, want := range map[Rule]string{Rule24: "2:4", Rule12: "1:2", Rule(5): "Rule(5)"} {
		if got := r.String(); got != want {
			t.Errorf("Rule(%d).String() = %q, want %q", int(r), got, want)
		}
	}
}

// same reports whether a and b are the same float64, NaN equal to NaN and
// -0 different from +0.
func same(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return a == b && math.Signbit(a) == math.Signbit(b)
}

func TestF16ToFloat64Exhaustive(t *testing.T) {
	for h := uint32(0); h <= 0xFFFF; h++ {
		want := slowF16(h)
		if got := F16ToFloat64(uint16(h)); !same(got, want) {
			t.Fatalf("F16ToFloat64(%#04x) = %v, want %v", h, got, want)
		}
		if got := Float64(uint64(h)|0xABCD<<16, F16); !same(got, want) {
			t.Fatalf("Float64(%#x, F16) = %v, want %v (high bits must be ignored)", h, got, want)
		}
	}
}

// slowBF16 decodes bfloat16 bits by the definition of the format (8
// exponent bits with bias 127, 7 mantissa bits).
func slowBF16(b uint32) float64 {
	s := 1.0
	if b&0x8000 != 0 {
		s = -1
	}
	e := int(b>>7) & 0xFF
	m := float64(b & 0x7F)
	switch e {
	case 0:
		return s * math.Ldexp(m/128, -126)
	case 255:
		if m != 0 {
			return math.NaN()
		}
		return s * math.Inf(1)
	}
	return s * math.Ldexp(1+m/128, e-127)
}

func TestBF16ToFloat64Exhaustive(t *testing.T) {
	for b := uint32(0); b <= 0xFFFF; b++ {
		want := slowBF16(b)
		if got := BF16ToFloat64(uint16(b)); !same(got, want) {
			t.Fatalf("BF16ToFloat64(%#04x) = %v, want %v", b, got, want)
		}
		if got := Float64(uint64(b), BF16); !same(got, want) {
			t.Fatalf("Float64(%#04x, BF16) = %v, want %v", b, got, want)
		}
	}
}

func TestF32ToFloat64(t *testing.T) {
	tests := []struct {
		bits uint32
		want float64
	}{
		{0, 0},
		{0x8000_0000, math.Copysign(0, -1)},
		{0x3F80_0000, 1},
		{0xC020_0000, -2.5},
		{0x0000_0001, math.Ldexp(1, -149)},
		{0x7F7F_FFFF, math.MaxFloat32},
		{0x7F80_0000, math.Inf(1)},
		{0xFF80_0000, math.Inf(-1)},
		{0x7FC0_0000, math.NaN()},
	}
	for _, tt := range tests {
		if got := F32ToFloat64(tt.bits); !same(got, tt.want) {
			t.Errorf("F32ToFloat64(%#x) = %v, want %v", tt.bits, got, tt.want)
		}
		if got := Float64(uint64(tt.bits)|1<<40, F32); !same(got, tt.want) {
			t.Errorf("Float64(%#x, F32) = %v, want %v", tt.bits, got, tt.want)
		}
	}
	if got := Float64(0, DType(0)); !math.IsNaN(got) {
		t.Errorf("Float64(0, DType(0)) = %v, want NaN", got)
	}
}

// TestF16FromFloat64 checks the tests' own rounding helper: every finite
// F16 round-trips, and midpoints between neighbours round to even.
func TestF16FromFloat64(t *testing.T) {
	for h := uint32(0); h < 0x7C00; h++ {
		for _, s := range []uint32{0, 0x8000} {
			if got := f16FromFloat64(slowF16(h | s)); got != h|s {
				t.Fatalf("f16FromFloat64(%v) = %#04x, want %#04x", slowF16(h|s), got, h|s)
			}
		}
		mid := (slowF16(h) + slowF16(h+1)) / 2
		want := h
		if h&1 != 0 {
			want = h + 1
		}
		if got := f16FromFloat64(mid); got != want {
			t.Fatalf("f16FromFloat64(%v) = %#04x, want %#04x", mid, got, want)
		}
	}
	if got := f16FromFloat64(1e6); got != 0x7C00 {
		t.Errorf("f16FromFloat64(1e6) = %#04x, want 0x7c00", got)
	}
}
