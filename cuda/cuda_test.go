package cuda

import (
	"errors"
	"fmt"
	"testing"
	"unsafe"
)

// TestLayouts checks the sizes of the structures the driver reads (the
// values tools/abi/cuabi.c prints from cuda.h).
func TestLayouts(t *testing.T) {
	if s := unsafe.Sizeof(kernelParams{}); s != 2*8*MaxKernelParams+128*(MaxTensorArgs+1) {
		t.Errorf("kernelParams is %d bytes", s)
	}
	if s := unsafe.Sizeof(TensorMap{}); s != 128 {
		t.Errorf("sizeof(CUtensorMap) = %d, want 128", s)
	}
	if s := unsafe.Sizeof(launchConfig{}); s != 56 {
		t.Errorf("sizeof(CUlaunchConfig) = %d, want 56", s)
	}
	if s := unsafe.Sizeof(launchAttr{}); s != 72 {
		t.Errorf("sizeof(CUlaunchAttribute) = %d, want 72", s)
	}
}

func TestVersionString(t *testing.T) {
	for v, want := range map[int]string{13000: "13.0", 12080: "12.8", 11080: "11.8"} {
		if got := VersionString(v); got != want {
			t.Errorf("VersionString(%d) = %q, want %q", v, got, want)
		}
	}
}

func TestError(t *testing.T) {
	e := &Error{Op: "cuLaunchKernelEx(gemv_wg)", Code: ErrorInvalidClusterSize, Name: "CUDA_ERROR_INVALID_CLUSTER_SIZE"}
	if want := "cuLaunchKernelEx(gemv_wg): CUDA_ERROR_INVALID_CLUSTER_SIZE (912)"; e.Error() != want {
		t.Errorf("got %q, want %q", e, want)
	}
	wrapped := fmt.Errorf("launch: %w", e)
	if !IsResult(wrapped, ErrorInvalidClusterSize) || IsResult(wrapped, ErrorNotSupported) || IsResult(errors.New("x"), Success) {
		t.Error("IsResult")
	}
}

func TestLoadMissing(t *testing.T) {
	d, err := Load("libsfsurgery-no-such-driver.so.1")
	if d != nil || !errors.Is(err, ErrNoLibrary) {
		t.Errorf("Load of a missing library = %v, %v; want ErrNoLibrary", d, err)
	}
}

func TestDataTypeString(t *testing.T) {
	if R16BF.String() != "BF16" || R16F.String() != "F16" || R32F.String() != "F32" || DataType(7).String() != "DataType(7)" {
		t.Error("DataType.String")
	}
}
