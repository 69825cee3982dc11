package cusparselt

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unsafe"
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
