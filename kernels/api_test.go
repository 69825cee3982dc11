package kernels

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/cuda"
)

func TestOpenWithoutDriver(t *testing.T) {
	cfg := defaultConfig()
	cfg.driverLib = "libsfsurgery-no-such-driver.so.1"
	d, err := open(0, cfg)
	if d != nil || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("open with a missing driver = %v, %v; want ErrUnavailable", d, err)
	}
	want := "kernels: GPU unavailable: no CUDA driver (libsfsurgery-no-such-driver.so.1 not found)"
	if err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
}

// TestOpenHere checks Open on the machine running the tests: without a GPU
// it must fail with ErrUnavailable, with one it must succeed.
func TestOpenHere(t *testing.T) {
	d, err := Open(0)
	if err != nil {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Open(0) = %v; a failure must wrap ErrUnavailable", err)
		}
		if strings.Count(err.Error(), "\n") != 0 {
			t.Errorf("error is not one line: %q", err)
		}
		t.Logf("no GPU here: %v", err)
		return
	}
	defer d.Close()
	if info := d.Info(); info.Major < 8 || info.Name == "" {
		t.Errorf("Open succeeded on %v", info)
	}
}

func TestOpenNegativeOrdinal(t *testing.T) {
	if _, err := Open(-1); !errors.Is(err, ErrArgument) {
		t.Fatalf("Open(-1) = %v, want ErrArgument", err)
	}
}

// TestPTXEmbedded checks both embedded PTX images: NUL-terminated once,
// the target, every entry point the package looks up, the instructions the
// kernels are built on, and an ISA version with a known minimum driver.
func TestPTXEmbedded(t *testing.T) {
	var gemv, wg []string
	for _, ty := range []string{"bf16", "f16"} {
		for _, tiles := range []int{1, 2, 4, 8} {
			for _, sc := range []int{2, 4} {
				gemv = append(gemv, fmt.Sprintf(".entry gemv_%s_t%d_s%d(", ty, tiles, sc))
				wg = append(wg, fmt.Sprintf(".entry gemv_wg_%s_t%d_s%d(", ty, tiles, sc))
				for _, f := range []string{"gemv_wg64", "gemv_wg_pair", "gemv_wg64_pair", "gemv_hy", "gemv_hy_pair"} {
					wg = append(wg, fmt.Sprintf(".entry %s_%s_t%d_s%d(", f, ty, tiles, sc))
				}
			}
		}
	}
	for _, c := range []struct {
		name string
		src  string
		want []string
	}{
		{"sfsurgery.ptx", ptxSource, append([]string{".target sm_80", ".entry spmm_bf16(", ".entry spmm_f16(",
			".entry dense_bf16(", ".entry dense_f16(", ".entry decode_ampere16(",
			"mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32",
			"mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32", "cp.async.cg.shared.global"}, gemv...)},
		{"sfsurgery_sm90a.ptx", ptxSM90aSource, append([]string{".target sm_90a",
			"wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.bf16.bf16", "wgmma.mma_async.sp.sync.aligned.m64n64k32.f32.f16.f16",
			"cp.async.mbarrier.arrive.noinc.shared::cta.b64", "fence.proxy.async.shared::cta"}, wg...)},
	} {
		img := ptxImage(c.src)
		if len(img) < 2 || img[len(img)-1] != 0 {
			t.Errorf("%s: image is not NUL-terminated", c.name)
			continue
		}
		if i := strings.IndexByte(string(img), 0); i != len(img)-1 {
			t.Errorf("%s: a NUL at %d of %d", c.name, i, len(img))
		}
		for _, want := range c.want {
			if !strings.Contains(c.src, want) {
				t.Errorf("%s lacks %q", c.name, want)
			}
		}
		maj, min, ok := ptxVersion(img)
		if !ok {
			t.Errorf("%s has no .version line", c.name)
			continue
		}
		if _, ok := ptxDriverNeeds(maj, min); !ok {
			t.Errorf("%s: PTX ISA %d.%d has no known minimum driver; update ptxDriverNeeds", c.name, maj, min)
		}
	}
}

func TestPTXVersion(t *testing.T) {
	for _, c := range []struct {
		src        string
		maj, min   int
		ok         bool
		driverNeed int
	}{
		{"//\n.version 9.0\n.target sm_80\n", 9, 0, true, 13000},
		{".version 8.7\n", 8, 7, true, 12080},
		{"  .version 8.5  \n", 8, 5, true, 12050},
		{"// .version 9.0\n", 0, 0, false, 0},
		{"", 0, 0, false, 0},
	} {
		maj, min, ok := ptxVersion([]byte(c.src))
		if maj != c.maj || min != c.min || ok != c.ok {
			t.Errorf("ptxVersion(%q) = %d, %d, %v", c.src, maj, min, ok)
		}
		if need, _ := ptxDriverNeeds(maj, min); ok && need != c.driverNeed {
			t.Errorf("ptxDriverNeeds(%d, %d) = %d, want %d", maj, min, need, c.driverNeed)
		}
	}
}

func TestCheckShapes(t *testing.T) {
	for _, c := range []struct {
		name    string
		dt      checkpoint.DType
		m, n, k int
		sparse  bool
		ok      bool
	}{
		{"tinyllama q", checkpoint.BF16, 1, 2048, 2048, true, true},
		{"llama down", checkpoint.F16, 4096, 4096, 14336, true, true},
		{"n not /32", checkpoint.BF16, 1, 48, 64, true, false},
		{"k not /64", checkpoint.BF16, 1, 32, 96, true, false},
		{"dense any k", checkpoint.BF16, 3, 5, 7, false, true},
		{"m zero", checkpoint.BF16, 0, 32, 64, true, false},
		{"n negative", checkpoint.BF16, 1, -32, 64, true, false},
		{"k huge", checkpoint.BF16, 1, 32, 1 << 31, true, false},
		{"n past grid", checkpoint.BF16, 1, 65536 * 64, 64, true, false},
		{"bad dtype", checkpoint.F32, 1, 32, 64, true, false},
		{"zero dtype", "", 1, 32, 64, false, false},
	} {
		err := checkDims("op", c.dt, c.m, c.n, c.k)
		if err == nil && c.sparse {
			err = checkSparse("op", c.n, c.k)
		}
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrArgument) {
			t.Errorf("%s: %v does not wrap ErrArgument", c.name, err)
		}
	}
	if _, err := size(1<<31, 1<<31, 4); !errors.Is(err, ErrArgument) {
		t.Errorf("size overflow: %v", err)
	}
	if s, err := size(4096, 14336, 4); err != nil || s != 4096*14336*4 {
		t.Errorf("size = %d, %v", s, err)
	}
}

// TestNilAndClosed checks that misuse returns errors instead of panicking.
func TestNilAndClosed(t *testing.T) {
	var d *Device
	if err := d.SparseMatmul(SparseOperands{Y: nil, X: nil, Packed: nil, Meta: nil, DType: checkpoint.BF16, M: 1, N: 32, K: 64}); !errors.Is(err, ErrClosed) {
		t.Errorf("nil Device SparseMatmul: %v", err)
	}
	if err := d.DenseMatmul(DenseOperands{Y: nil, X: nil, W: nil, DType: checkpoint.F16, M: 1, N: 1, K: 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("nil Device DenseMatmul: %v", err)
	}
	if err := d.DecodeAmpere(DecodeOperands{DType: checkpoint.BF16, N: 32, K: 64}); !errors.Is(err, ErrClosed) {
		t.Errorf("nil Device DecodeAmpere: %v", err)
	}
	if _, err := d.Alloc(16); !errors.Is(err, ErrClosed) {
		t.Errorf("nil Device Alloc: %v", err)
	}
	if _, err := d.Upload([]byte{1}); !errors.Is(err, ErrClosed) {
		t.Errorf("nil Device Upload: %v", err)
	}
	if err := d.Synchronize(); !errors.Is(err, ErrClosed) {
		t.Errorf("nil Device Synchronize: %v", err)
	}
	if _, err := d.Elapsed(func() error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("nil Device Elapsed: %v", err)
	}
	for name, dev := range map[string]*Device{"nil": d, "closed": new(Device)} {
		for _, m := range []int{1, 65} {
			if names, err := dev.SparseCandidates(checkpoint.BF16, m, 1024, 4096); !errors.Is(err, ErrClosed) {
				t.Errorf("%s Device SparseCandidates at m = %d: %q, %v; want ErrClosed", name, m, names, err)
			}
		}
	}
	if err := d.Close(); err != nil {
		t.Errorf("nil Device Close: %v", err)
	}
	if d.Info() != (Info{}) || d.DenseBackend() != "" {
		t.Error("nil Device Info/DenseBackend not empty")
	}
	var zero Device
	if err := zero.Synchronize(); !errors.Is(err, ErrClosed) {
		t.Errorf("zero Device Synchronize: %v", err)
	}
	var b *Buffer
	if b.Len() != 0 {
		t.Error("nil Buffer Len != 0")
	}
	if err := b.Download(make([]byte, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("nil Buffer Download: %v", err)
	}
	if err := b.Free(); !errors.Is(err, ErrClosed) {
		t.Errorf("nil Buffer Free: %v", err)
	}
	var zb Buffer
	if err := zb.Free(); !errors.Is(err, ErrClosed) {
		t.Errorf("zero Buffer Free: %v", err)
	}
	if err := zb.Download(nil); !errors.Is(err, ErrArgument) {
		t.Errorf("zero Buffer Download(nil): %v", err)
	}
	if _, err := d.Alloc(0); !errors.Is(err, ErrArgument) {
		t.Errorf("Alloc(0): %v", err)
	}
	if _, err := d.Upload(nil); !errors.Is(err, ErrArgument) {
		t.Errorf("Upload(nil): %v", err)
	}
	if _, err := d.Elapsed(nil); !errors.Is(err, ErrArgument) {
		t.Errorf("Elapsed(nil): %v", err)
	}
	if err := d.SparseMatmul(SparseOperands{Y: nil, X: nil, Packed: nil, Meta: nil, DType: checkpoint.BF16, M: 1, N: 33, K: 64}); !errors.Is(err, ErrArgument) {
		t.Errorf("SparseMatmul n=33: %v", err)
	}
}

func TestInfoString(t *testing.T) {
	i := Info{Name: "NVIDIA H100 80GB HBM3", Major: 9, Minor: 0, SMs: 132, MemBytes: 85 << 30, Driver: 13000}
	if got, want := i.String(), "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 85.0 GiB, driver 13.0)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestErrors(t *testing.T) {
	ce := &cuda.Error{Op: "cuMemAlloc_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"}
	err := wrap(ce)
	var got *cuda.Error
	if !errors.As(err, &got) || got.Code != 2 {
		t.Fatalf("errors.As(%v) failed", err)
	}
	if want := "kernels: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)"; err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
	u := unavailable("cuInit failed", &cuda.Error{Op: "cuInit", Code: 100, Name: "CUDA_ERROR_NO_DEVICE"})
	if !errors.Is(u, ErrUnavailable) || !errors.As(u, &got) || got.Code != 100 {
		t.Errorf("unavailable does not wrap both: %v", u)
	}
	if wrap(u) != u {
		t.Error("wrap re-wrapped a sentinel error")
	}
	if !validType(checkpoint.BF16) || !validType(checkpoint.F16) || validType(checkpoint.F32) || validType("") ||
		dataType(checkpoint.BF16) != cuda.R16BF || dataType(checkpoint.F16) != cuda.R16F {
		t.Error("the kernels' element types")
	}
}
