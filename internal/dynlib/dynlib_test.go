package dynlib

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// libc opens the C library, which every Linux machine that runs the
// tests has, or skips.
func libc(t *testing.T) uintptr {
	t.Helper()
	h, err := Open("libc.so.6")
	if err != nil {
		t.Skipf("no libc.so.6 to bind against: %v", err)
	}
	return h
}

// TestBind binds a C function under its second name and calls it, and
// checks the failures: a missing symbol, no name, and a Go value that is
// not a pointer to a function, each an error, never a panic, and only
// the first ErrNoSymbol.
func TestBind(t *testing.T) {
	h := libc(t)
	var strlen func(*byte) uintptr
	if err := Bind(h, "libc", Sym(&strlen, "no_such_symbol_v2", "strlen")); err != nil {
		t.Fatal(err)
	}
	b := []byte("sparse\x00")
	if n := strlen(&b[0]); n != 6 {
		t.Errorf("strlen = %d, want 6", n)
	}
	var f func()
	for _, tc := range []struct {
		name    string
		sym     Symbol
		want    string
		missing bool
	}{
		{"missing", Sym(&f, "no_such_symbol"), "libc lacks no_such_symbol", true},
		{"missing under each name", Sym(&f, "no_such_symbol", "no_such_symbol_v1"), "libc lacks no_such_symbol", true},
		{"no name", Sym(&f), "no name", false},
		{"not a func pointer", Sym(42, "strlen"), "binding strlen", false},
	} {
		err := Bind(h, "libc", tc.sym)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
		if errors.Is(err, ErrNoSymbol) != tc.missing {
			t.Errorf("%s: errors.Is(%v, ErrNoSymbol) = %v", tc.name, err, !tc.missing)
		}
	}
	if err := BindAll(h, "libc", []Symbol{Sym(&strlen, "strlen"), Sym(&f, "no_such_symbol")}); !errors.Is(err, ErrNoSymbol) {
		t.Errorf("BindAll with a missing symbol: %v, want ErrNoSymbol", err)
	}
}

// TestOpenMissing checks that a library that is not there is an error.
func TestOpenMissing(t *testing.T) {
	if h, err := Open("libsfsurgery_no_such_library.so.1"); err == nil || h != 0 {
		t.Errorf("Open = %#x, %v; want an error", h, err)
	}
}

// TestCString checks the copy of NUL-terminated strings, bounded by max.
func TestCString(t *testing.T) {
	b := []byte("cuda\x00rest")
	for _, tc := range []struct {
		max  int
		want string
	}{{64, "cuda"}, {4, "cuda"}, {2, "cu"}, {0, ""}} {
		if got := CString(&b[0], tc.max); got != tc.want {
			t.Errorf("CString(max %d) = %q, want %q", tc.max, got, tc.want)
		}
	}
	if got := CString(nil, 8); got != "" {
		t.Errorf("CString(nil) = %q", got)
	}
}

// TestCandidates checks the search order: the names as given, then a
// virtual environment's wheel before the system's, newer sonames first,
// each file once.
func TestCandidates(t *testing.T) {
	venv := t.TempDir()
	dir := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia", "lib")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"libx.so.12", "libx.so.13"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := Candidates([]string{"libx.so.13", "libx.so"}, []string{"nvidia/lib"}, "libx.so.*", "", venv)
	want := []string{"libx.so.13", "libx.so", filepath.Join(dir, "libx.so.13"), filepath.Join(dir, "libx.so.12")}
	if len(got) < len(want) || !reflect.DeepEqual(got[:len(want)], want) {
		t.Errorf("Candidates = %q, want %q first", got, want)
	}
}

// TestBindOptional: a symbol the library lacks stays unbound and is no
// error; any other failure of the lookup is, naming the symbol.
func TestBindOptional(t *testing.T) {
	broken := errors.New("a bad Go signature")
	for _, c := range []struct {
		name string
		bind func(Symbol) error
		want error // nil: missing, which is fine
	}{
		{"missing", func(s Symbol) error { return fmt.Errorf("fake lacks %s: %w", s.Names[0], ErrNoSymbol) }, nil},
		{"bound", func(Symbol) error { return nil }, nil},
		{"other failure", func(Symbol) error { return broken }, broken},
	} {
		var a, b func() int32
		err := BindOptional(c.bind, Sym(&a, "first"), Sym(&b, "second"))
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v, want no error", c.name, err)
			}
			continue
		}
		if !errors.Is(err, c.want) || errors.Is(err, ErrNoSymbol) || err.Error() != "optional entry point first: a bad Go signature" {
			t.Errorf("%s: %v; want \"optional entry point first: a bad Go signature\" wrapping it", c.name, err)
		}
	}
}
