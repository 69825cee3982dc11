package prune24

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

func TestCheckDType(t *testing.T) {
	for _, tt := range []struct {
		dt   checkpoint.DType
		elem elem
		size int
	}{
		{checkpoint.F16, elemF16, 2},
		{checkpoint.BF16, elemBF16, 2},
		{checkpoint.F32, elemF32, 4},
	} {
		e, err := elemOf(tt.dt)
		if err != nil || e != tt.elem || e.size() != tt.size || e.String() != string(tt.dt) {
			t.Errorf("elemOf(%s) = %v (size %d), %v; want %v (size %d)", tt.dt, e, e.size(), err, tt.elem, tt.size)
		}
		if err := CheckDType(tt.dt); err != nil {
			t.Errorf("CheckDType(%s) = %v", tt.dt, err)
		}
	}
	for _, dt := range []checkpoint.DType{"", "f16", "Bf16", checkpoint.F64, checkpoint.I8, checkpoint.F8E4M3, checkpoint.I16} {
		if err := CheckDType(dt); !errors.Is(err, ErrDType) {
			t.Errorf("CheckDType(%q) = %v, want ErrDType", dt, err)
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
		if got := elemF16.float64(uint64(h) | 0xABCD<<16); !same(got, want) {
			t.Fatalf("elemF16.float64(%#x) = %v, want %v (high bits must be ignored)", h, got, want)
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
		if got := elemBF16.float64(uint64(b)); !same(got, want) {
			t.Fatalf("elemBF16.float64(%#04x) = %v, want %v", b, got, want)
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
		if got := elemF32.float64(uint64(tt.bits) | 1<<40); !same(got, tt.want) {
			t.Errorf("elemF32.float64(%#x) = %v, want %v", tt.bits, got, tt.want)
		}
	}
}

// TestDecodeFloat64 decodes every F16 and BF16 bit pattern, and F32
// patterns of every exponent, as one row, against the slow decoders of
// the formats' definitions.
func TestDecodeFloat64(t *testing.T) {
	row16 := make([]byte, 2<<16)
	for h := range 1 << 16 {
		binary.LittleEndian.PutUint16(row16[2*h:], uint16(h))
	}
	var row32 []byte
	var want32 []float64
	for e := range uint32(256) {
		for _, m := range []uint32{0, 1, 0x400000, 0x7FFFFF} {
			for _, s := range []uint32{0, 1 << 31} {
				b := s | e<<23 | m
				row32 = binary.LittleEndian.AppendUint32(row32, b)
				want32 = append(want32, float64(math.Float32frombits(b)))
			}
		}
	}
	for _, tt := range []struct {
		dt   checkpoint.DType
		src  []byte
		want func(i int) float64
	}{
		{checkpoint.F16, row16, func(i int) float64 { return slowF16(uint32(i)) }},
		{checkpoint.BF16, row16, func(i int) float64 { return slowBF16(uint32(i)) }},
		{checkpoint.F32, row32, func(i int) float64 { return want32[i] }},
	} {
		dst := make([]float64, len(tt.src)/tt.dt.Size())
		if err := DecodeFloat64(dst, tt.src, tt.dt); err != nil {
			t.Fatalf("%s: %v", tt.dt, err)
		}
		for i, got := range dst {
			if want := tt.want(i); !same(got, want) {
				t.Fatalf("%s: element %d = %v, want %v", tt.dt, i, got, want)
			}
		}
		if err := DecodeFloat64(dst[1:], tt.src, tt.dt); !errors.Is(err, ErrShape) {
			t.Errorf("%s: %d elements from %d bytes: %v, want ErrShape", tt.dt, len(dst)-1, len(tt.src), err)
		}
	}
	if err := DecodeFloat64(nil, nil, checkpoint.I8); !errors.Is(err, ErrDType) {
		t.Errorf("DecodeFloat64 of I8: %v, want ErrDType", err)
	}
}
