package cusparselt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/sfsurgery/sfsurgery/internal/dynlib"
)

func TestPlanRows(t *testing.T) {
	for _, c := range []struct {
		m    int
		want []int
	}{
		{1, []int{1, 8, 16}},
		{8, []int{8, 16}},
		{16, []int{16}},
		{100, []int{100, 104, 112}},
		{4096, []int{4096}},
	} {
		if got := planRows(c.m); !slices.Equal(got, c.want) {
			t.Errorf("planRows(%d) = %v, want %v", c.m, got, c.want)
		}
	}
}

func TestSparseLtHelpers(t *testing.T) {
	if got := VersionString(800); got != "0.8.0" {
		t.Errorf("version 800 = %q", got)
	}
	if got := VersionString(1203); got != "1.2.3" {
		t.Errorf("version 1203 = %q", got)
	}
	if !retryable(&Error{Status: statusNotSupported}) || !retryable(errors.Join(errors.New("x"), &Error{Status: statusInvalidValue})) {
		t.Error("NOT_SUPPORTED and INVALID_VALUE must be retried")
	}
	if retryable(errors.New("mapping host memory")) {
		t.Error("failures outside the library must not be retried")
	}
	if got := Candidates("/x/libcusparseLt.so.0", "", ""); len(got) != 1 || got[0] != "/x/libcusparseLt.so.0" {
		t.Errorf("with SFSURGERY_CUSPARSELT: %v", got)
	}
	venv := t.TempDir()
	lib := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia", "cusparselt", "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib, "libcusparseLt.so.0"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := Candidates("", "", venv)
	if len(got) < 3 || got[0] != "libcusparseLt.so.0" || got[2] != filepath.Join(lib, "libcusparseLt.so.0") {
		t.Errorf("candidates = %v", got)
	}
}

func TestMapHost(t *testing.T) {
	b, err := mapHost(hostBytes)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != hostBytes || addr(b, 0)%16 != 0 {
		t.Errorf("mapHost: %d bytes at %#x", len(b), addr(b, 0))
	}
	*(*float32)(unsafe.Pointer(&b[hostAlpha])) = 1
	if b[hostAlpha+3] != 0x3f {
		t.Error("alpha not written in place")
	}
}

// TestBindOptional: a symbol the library lacks stays nil and is no error;
// any other failure of the lookup is, naming the symbol.
func TestBindOptional(t *testing.T) {
	broken := errors.New("a bad Go signature")
	for _, c := range []struct {
		name string
		bind func(dynlib.Symbol) error
		want error // nil: the entry point is missing, and that is fine
	}{
		{"missing", func(s dynlib.Symbol) error { return fmt.Errorf("fake lacks %s: %w", s.Names[0], dynlib.ErrNoSymbol) }, nil},
		{"other failure", func(dynlib.Symbol) error { return broken }, broken},
	} {
		var f funcs
		err := bindOptional(c.bind, dynlib.Sym(&f.errorName, "cusparseLtGetErrorName"),
			dynlib.Sym(&f.algDestroy, "cusparseLtMatmulAlgSelectionDestroy"))
		if c.want == nil {
			if err != nil || f.errorName != nil || f.algDestroy != nil {
				t.Errorf("%s: %v; want no error and nothing bound", c.name, err)
			}
			continue
		}
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), "cusparseLtGetErrorName") {
			t.Errorf("%s: %v; want an error naming cusparseLtGetErrorName, wrapping %q", c.name, err, c.want)
		}
	}
}
