package cublaslt

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/sfsurgery/sfsurgery/cuda"
)

func TestCublasLtCandidates(t *testing.T) {
	if got := Candidates("/x/libcublasLt.so.13", "", ""); len(got) != 1 || got[0] != "/x/libcublasLt.so.13" {
		t.Errorf("with SFSURGERY_CUBLASLT: %v", got)
	}
	venv := t.TempDir()
	lib := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia", "cu13", "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"libcublasLt.so.12", "libcublasLt.so.13"} {
		if err := os.WriteFile(filepath.Join(lib, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := Candidates("", "", venv)
	if len(got) < 5 || got[0] != "libcublasLt.so.13" {
		t.Fatalf("candidates = %v", got)
	}
	if got[3] != filepath.Join(lib, "libcublasLt.so.13") || got[4] != filepath.Join(lib, "libcublasLt.so.12") {
		t.Errorf("wheel candidates = %v", got[3:5])
	}
}

func TestHeuristicResultSize(t *testing.T) {
	if s := unsafe.Sizeof(heuristicResult{}); s != 96 {
		t.Fatalf("sizeof(cublasLtMatmulHeuristicResult_t) = %d, want 96", s)
	}
}

// TestShapeOutput checks the output types a product takes: float32 (the
// zero value) or the inputs' own type, never the other 16-bit type.
func TestShapeOutput(t *testing.T) {
	for _, c := range []struct {
		s  Shape
		ok bool
	}{
		{Shape{Type: cuda.R16BF, M: 1, N: 32, K: 64}, true},
		{Shape{Type: cuda.R16BF, Out: cuda.R32F, M: 1, N: 32, K: 64}, true},
		{Shape{Type: cuda.R16BF, Out: cuda.R16BF, M: 1, N: 32, K: 64}, true},
		{Shape{Type: cuda.R16F, Out: cuda.R16F, M: 1, N: 32, K: 64}, true},
		{Shape{Type: cuda.R16BF, Out: cuda.R16F, M: 1, N: 32, K: 64}, false},
		{Shape{Type: cuda.R16F, Out: cuda.R16BF, M: 1, N: 32, K: 64}, false},
	} {
		if err := c.s.check(); (err == nil) != c.ok {
			t.Errorf("%+v: %v, want ok %v", c.s, err, c.ok)
		}
	}
}
