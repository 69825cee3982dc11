package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/sfsurgery/sfsurgery/internal/dynlib"
)

// TestTensorMap2DCheck holds the driver's rules for a tiled 2-D map: each
// bad view is refused with its reason, before any driver call.
func TestTensorMap2DCheck(t *testing.T) {
	good := TensorMap2D{Addr: 1 << 20, ElemBytes: 2, Cols: 4096, Rows: 300, BoxCols: 64, BoxRows: 128, Swizzle: Swizzle128B}
	if _, err := good.check(); err != nil {
		t.Fatalf("good view: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(*TensorMap2D)
		want string
	}{
		{"element size", func(v *TensorMap2D) { v.ElemBytes = 8 }, "8-byte elements"},
		{"alignment", func(v *TensorMap2D) { v.Addr += 8 }, "not 16-byte aligned"},
		{"empty", func(v *TensorMap2D) { v.Rows = 0 }, "0 × 4096"},
		{"pitch", func(v *TensorMap2D) { v.Cols = 4100 }, "row pitch 8200"},
		{"box too tall", func(v *TensorMap2D) { v.BoxRows = 257 }, "each side 1 … 256"},
		{"box row", func(v *TensorMap2D) { v.BoxCols = 4 }, "box row of 8 bytes"},
		{"swizzle width", func(v *TensorMap2D) { v.Swizzle = Swizzle64B }, "wider than its 64-byte swizzle"},
		{"swizzle kind", func(v *TensorMap2D) { v.Swizzle = 1 }, "swizzle 1, want"},
	} {
		v := good
		c.edit(&v)
		_, err := v.check()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}

// TestTensorMap2DDims holds the driver's bounds on a map's size at their
// edges: each side at most 2^32 elements, and rows under 2^40 bytes,
// which the widest rows of the widest elements (2^34 bytes) are.
func TestTensorMap2DDims(t *testing.T) {
	if strconv.IntSize < 64 {
		t.Skip("int has 32 bits: no side can exceed 2^32")
	}
	most := uint64(maxTensorDim) // not a constant: int(most) builds where int has 32 bits
	good := TensorMap2D{Addr: 1 << 20, ElemBytes: 2, Cols: 4096, Rows: 300, BoxCols: 64, BoxRows: 128, Swizzle: Swizzle128B}
	for _, c := range []struct {
		name string
		edit func(*TensorMap2D)
		want string // "" for a view that passes
	}{
		{"most rows", func(v *TensorMap2D) { v.Rows = int(most) }, ""},
		{"too many rows", func(v *TensorMap2D) { v.Rows = int(most + 1) }, "4294967297 × 4096 elements, each side 1 … 2^32"},
		{"most columns", func(v *TensorMap2D) { v.Cols = int(most) }, ""},
		// 2^32+8: the next width whose rows are a multiple of 16 bytes.
		{"too many columns", func(v *TensorMap2D) { v.Cols = int(most + 8) }, "300 × 4294967304 elements, each side 1 … 2^32"},
		{"widest rows", func(v *TensorMap2D) { v.Cols, v.ElemBytes, v.BoxCols = int(most), 4, 32 }, ""},
	} {
		v := good
		c.edit(&v)
		_, err := v.check()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want no error", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}

// TestEncodeWithoutSymbol: a driver without cuTensorMapEncodeTiled gives
// ErrNoSymbol, not a crash.
func TestEncodeWithoutSymbol(t *testing.T) {
	var d Driver
	_, err := d.EncodeTensorMap2D(TensorMap2D{Addr: 256, ElemBytes: 4, Cols: 64, Rows: 2, BoxCols: 64, BoxRows: 2})
	if !errors.Is(err, ErrNoSymbol) {
		t.Fatalf("got %v, want ErrNoSymbol", err)
	}
}

// TestBindOptional: an optional entry point the library lacks stays nil
// and its call fails with ErrNoSymbol; any other failure to bind is
// returned, wrapped with the entry point's name, and is not ErrNoSymbol.
// The lookups are fakes, and the real one against libc, which has no
// CUDA entry points.
func TestBindOptional(t *testing.T) {
	view := TensorMap2D{Addr: 256, ElemBytes: 4, Cols: 64, Rows: 2, BoxCols: 64, BoxRows: 2}
	broken := errors.New("a bad Go signature")
	type lookup struct {
		name string
		bind func(dynlib.Symbol) error
		want error // nil: the entry point is missing
	}
	lookups := []lookup{
		{"missing", func(s dynlib.Symbol) error { return fmt.Errorf("fake lacks %s: %w", s.Names[0], dynlib.ErrNoSymbol) }, nil},
		{"other failure", func(dynlib.Symbol) error { return broken }, broken},
	}
	if h, err := dynlib.Open("libc.so.6"); err == nil {
		lookups = append(lookups, lookup{"missing from libc", func(s dynlib.Symbol) error { return dynlib.Bind(h, "libc.so.6", s) }, nil})
	} else {
		t.Logf("no libc.so.6, only the fake lookups: %v", err)
	}
	for _, c := range lookups {
		var d Driver
		err := d.bindOptional(c.bind)
		if c.want != nil {
			if !errors.Is(err, c.want) || errors.Is(err, ErrNoSymbol) || !strings.Contains(err.Error(), "cuTensorMapEncodeTiled") {
				t.Errorf("%s: %v; want an error naming cuTensorMapEncodeTiled, wrapping %q, not ErrNoSymbol", c.name, err, c.want)
			}
			continue
		}
		if err != nil || d.cuTensorMapEncodeTiled != nil {
			t.Errorf("%s: %v, bound %v; want no error and no entry point", c.name, err, d.cuTensorMapEncodeTiled != nil)
			continue
		}
		if _, err := d.EncodeTensorMap2D(view); !errors.Is(err, ErrNoSymbol) {
			t.Errorf("%s: the call gave %v, want ErrNoSymbol", c.name, err)
		}
	}
}

// TestKernelParamsFill: words keep their slots, tensor maps land in
// 64-byte aligned slots in order, and the limits are errors.
func TestKernelParamsFill(t *testing.T) {
	var a, b TensorMap
	for i := range a.words {
		a.words[i], b.words[i] = uint64(100+i), uint64(200+i)
	}
	p := new(kernelParams)
	var pin runtime.Pinner
	pin.Pin(p)
	defer pin.Unpin()
	args := []Arg{Word(7), TensorArg(&a), Word(Int32(-1)), TensorArg(&b)}
	if err := p.fill("k", args); err != nil {
		t.Fatal(err)
	}
	if *(*uint64)(p.ptrs[0]) != 7 || *(*uint64)(p.ptrs[2]) != 0xFFFFFFFF {
		t.Error("word slots")
	}
	for i, want := range []*TensorMap{&a, &b} {
		ptr := p.ptrs[2*i+1]
		if uintptr(ptr)%64 != 0 {
			t.Errorf("map %d at %p: not 64-byte aligned", i, ptr)
		}
		if got := *(*TensorMap)(ptr); got != *want {
			t.Errorf("map %d: wrong bytes", i)
		}
	}
	if unsafe.Pointer(p.ptrs[1]) == unsafe.Pointer(p.ptrs[3]) {
		t.Error("two maps share a slot")
	}
	many := make([]Arg, MaxTensorArgs+1)
	for i := range many {
		many[i] = TensorArg(&a)
	}
	if err := new(kernelParams).fill("k", many); err == nil || !strings.Contains(err.Error(), "tensor maps") {
		t.Errorf("too many maps: %v", err)
	}
	if err := new(kernelParams).fill("k", []Arg{Word(1), TensorArg(nil)}); err == nil || !strings.Contains(err.Error(), "parameter 1: a nil tensor map") {
		t.Errorf("nil map: %v", err)
	}
	if err := new(kernelParams).fill("k", make([]Arg, MaxKernelParams+1)); err == nil {
		t.Error("too many parameters: no error")
	}
}
