package kernels

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// symbol pairs a Go function pointer with the C symbol names that may
// implement it, tried in order (e.g. a _v2 name, then the plain one).
type symbol struct {
	fn    any
	names []string
}

// sym builds a symbol.
func sym(fn any, names ...string) symbol { return symbol{fn: fn, names: names} }

// bindAll resolves every symbol in lib with purego.Dlsym and registers it
// with purego.RegisterFunc. It never panics: a missing symbol is an error
// naming it, and a RegisterFunc panic (a bad Go signature) becomes an error.
func bindAll(lib uintptr, libName string, syms []symbol) error {
	for _, s := range syms {
		if err := bind(lib, libName, s); err != nil {
			return err
		}
	}
	return nil
}

func bind(lib uintptr, libName string, s symbol) (err error) {
	var addr uintptr
	for _, name := range s.names {
		a, derr := purego.Dlsym(lib, name)
		if derr == nil && a != 0 {
			addr = a
			break
		}
	}
	if addr == 0 {
		return fmt.Errorf("%s lacks %s", libName, s.names[0])
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("binding %s: %v", s.names[0], r)
		}
	}()
	purego.RegisterFunc(s.fn, addr)
	return nil
}

// dlopen opens a shared library with RTLD_NOW|RTLD_GLOBAL.
func dlopen(path string) (uintptr, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return 0, err
	}
	if h == 0 {
		return 0, errors.New("dlopen returned a nil handle")
	}
	return h, nil
}

// cString copies a NUL-terminated C string of at most max bytes.
func cString(p *byte, max int) string {
	if p == nil {
		return ""
	}
	b := make([]byte, 0, 64)
	for i := 0; i < max; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}
