// Package dynlib opens shared libraries and binds their C functions to Go
// function variables at run time through github.com/ebitengine/purego, so
// the packages built on it (cuda, cublaslt, cusparselt) need no cgo.
package dynlib

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrNoSymbol is wrapped by the error of [Bind] and [BindAll] when the
// library has a symbol under none of its names.
var ErrNoSymbol = errors.New("dynlib: no such symbol")

// missingError is the error "LIB lacks NAME" of a symbol the library
// does not have.
type missingError struct{ lib, name string }

// Error returns "LIB lacks NAME".
func (e *missingError) Error() string { return e.lib + " lacks " + e.name }

// Unwrap returns [ErrNoSymbol].
func (e *missingError) Unwrap() error { return ErrNoSymbol }

// Symbol pairs a pointer to a Go function variable with the C symbol names
// that may implement it, tried in order (e.g. a _v2 name, then the plain
// one).
type Symbol struct {
	Fn    any      // a pointer to a func variable
	Names []string // C symbols, the preferred first
}

// Sym builds a Symbol.
func Sym(fn any, names ...string) Symbol { return Symbol{Fn: fn, Names: names} }

// BindAll resolves every symbol in lib (named libName in errors) and
// registers it with purego.RegisterFunc. It never panics: a missing symbol
// is an error "LIB lacks NAME" wrapping [ErrNoSymbol], and a RegisterFunc
// panic (a bad Go signature) becomes an error that does not.
func BindAll(lib uintptr, libName string, syms []Symbol) error {
	for _, s := range syms {
		if err := Bind(lib, libName, s); err != nil {
			return err
		}
	}
	return nil
}

// BindOptional binds each symbol with bind (Bind on a library, or a
// stand-in in tests). A symbol the library lacks (an error wrapping
// [ErrNoSymbol]) is left unbound, for its callers to do without; any
// other failure is returned as "optional entry point NAME: ERR".
func BindOptional(bind func(Symbol) error, syms ...Symbol) error {
	for _, s := range syms {
		if err := bind(s); err != nil && !errors.Is(err, ErrNoSymbol) {
			name := "(no name)"
			if len(s.Names) > 0 {
				name = s.Names[0]
			}
			return fmt.Errorf("optional entry point %s: %w", name, err)
		}
	}
	return nil
}

// Bind is BindAll for one symbol; callers use it alone for optional
// symbols, whose absence (errors.Is(err, ErrNoSymbol)) they may ignore.
// purego.Dlsym reports a failed lookup only as the text of dlerror, so a
// symbol is missing when the lookup of each of its names fails or gives
// a nil address.
func Bind(lib uintptr, libName string, s Symbol) (err error) {
	if len(s.Names) == 0 {
		return fmt.Errorf("%s: a symbol with no name to look up", libName)
	}
	var addr uintptr
	for _, name := range s.Names {
		a, derr := purego.Dlsym(lib, name)
		if derr == nil && a != 0 {
			addr = a
			break
		}
	}
	if addr == 0 {
		return &missingError{lib: libName, name: s.Names[0]}
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("binding %s: %v", s.Names[0], r)
		}
	}()
	purego.RegisterFunc(s.Fn, addr)
	return nil
}

// Open opens a shared library with RTLD_NOW|RTLD_GLOBAL.
func Open(path string) (uintptr, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return 0, err
	}
	if h == 0 {
		return 0, errors.New("dlopen returned a nil handle")
	}
	return h, nil
}

// CString copies a NUL-terminated C string of at most max bytes.
func CString(p *byte, max int) string {
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
