package kernels

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"

	"github.com/sfsurgery/sfsurgery/cuda"
)

// ptxSource is the PTX of cuda/sfsurgery.cu, built by the command in
// generate.go.
//
//go:embed ptx/sfsurgery.ptx
var ptxSource string

// ptxSM90aSource is the PTX of cuda/sfsurgery_sm90a.cu (the decode
// kernel's warpgroup form), for devices of compute capability 9.0 only.
//
//go:embed ptx/sfsurgery_sm90a.ptx
var ptxSM90aSource string

// ptxImage returns PTX text as the driver wants it: NUL-terminated.
func ptxImage(src string) []byte {
	img := make([]byte, len(src)+1)
	copy(img, src)
	return img
}

// defaultConfig is what Open uses.
func defaultConfig() openConfig {
	return openConfig{
		driverLib: cuda.Library,
		ptx:       ptxImage(ptxSource),
		ptx90a:    ptxImage(ptxSM90aSource),
		cublasLt:  os.Getenv("SFSURGERY_CUBLASLT"),
	}
}

// Kernel entry points of the module.
type functions struct {
	spmmBF16, spmmF16   cuda.Function
	denseBF16, denseF16 cuda.Function
	decode16            cuda.Function
}

var ptxVersionRE = regexp.MustCompile(`(?m)^\s*\.version\s+(\d+)\.(\d+)\s*$`)

// ptxVersion returns the ISA version a PTX text declares (".version 9.0").
func ptxVersion(ptx []byte) (major, minor int, ok bool) {
	m := ptxVersionRE.FindSubmatch(ptx)
	if m == nil {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(string(m[1]))
	minor, err2 := strconv.Atoi(string(m[2]))
	return major, minor, err1 == nil && err2 == nil
}

// ptxDriverNeeds maps PTX ISA versions to the CUDA release (driver API
// version) that introduced them, for error messages.
func ptxDriverNeeds(major, minor int) (int, bool) {
	v, ok := map[int]int{
		78: 11080, 80: 12000, 81: 12010, 82: 12020, 83: 12030, 84: 12040,
		85: 12050, 86: 12070, 87: 12080, 88: 12090, 90: 13000, 91: 13010, 92: 13020,
	}[major*10+minor]
	return v, ok
}

// loadModule JIT-compiles the PTX (and, on a device of compute capability
// 9.0, the sm_90a PTX when not empty) and looks up the kernels. It runs with
// the context current and the mutex held.
func (d *Device) loadModule(ptx, ptx90a []byte) error {
	if err := d.jit(&d.mod, ptx); err != nil {
		return err
	}
	names := []struct {
		dst  *cuda.Function
		name string
	}{
		{&d.fn.spmmBF16, "spmm_bf16"},
		{&d.fn.spmmF16, "spmm_f16"},
		{&d.fn.denseBF16, "dense_bf16"},
		{&d.fn.denseF16, "dense_f16"},
		{&d.fn.decode16, "decode_ampere16"},
	}
	for _, n := range names {
		var err error
		if *n.dst, err = d.drv.ModuleGetFunction(d.mod, n.name); err != nil {
			return err
		}
	}
	// A hint: prefer shared memory over L1 for the pipelined kernels.
	for _, f := range []cuda.Function{d.fn.spmmBF16, d.fn.spmmF16} {
		if err := d.drv.FuncSetAttribute(f, cuda.FuncAttrPreferredSharedCarveout, 100); err != nil {
			return err
		}
	}
	d.loadWarpgroup(ptx90a)
	return d.loadDecode()
}

// loadWarpgroup loads the sm_90a module of the decode kernel's warpgroup
// form where the device can run it. Its absence is not an error (the
// mma.sp kernel serves every device); d.dec.note says why.
func (d *Device) loadWarpgroup(ptx []byte) {
	switch {
	case d.info.Major != 9 || d.info.Minor != 0:
		d.dec.note = fmt.Sprintf("built for sm_90a, and this GPU is sm_%d%d", d.info.Major, d.info.Minor)
	case len(ptx) <= 1:
		d.dec.note = "not in this build (empty sm_90a PTX)"
	default:
		if err := d.jit(&d.mod90a, ptx); err != nil {
			d.mod90a = 0
			d.dec.note = "the sm_90a PTX did not load: " + err.Error()
		}
	}
}

// jit JIT-compiles a NUL-terminated PTX image into *mod.
func (d *Device) jit(mod *cuda.Module, ptx []byte) error {
	if len(ptx) == 0 || ptx[len(ptx)-1] != 0 {
		return argError("PTX image must be NUL-terminated")
	}
	m, err := d.drv.ModuleLoadData(ptx)
	if err != nil {
		return d.moduleError(ptx, err)
	}
	*mod = m
	return nil
}

// moduleError explains a failed module load. A driver too old for the PTX
// ISA wraps ErrUnavailable.
func (d *Device) moduleError(ptx []byte, err error) error {
	var ce *cuda.Error
	if !errors.As(err, &ce) {
		return fmt.Errorf("loading the embedded PTX: %w", err)
	}
	switch ce.Code {
	case cuda.ErrorUnsupportedPTXVersion:
		need := "a newer driver"
		if maj, min, ok := ptxVersion(ptx); ok {
			need = fmt.Sprintf("PTX ISA %d.%d", maj, min)
			if v, ok := ptxDriverNeeds(maj, min); ok {
				need += fmt.Sprintf(", which needs a CUDA %s driver", cuda.VersionString(v))
			}
		}
		return unavailable(fmt.Sprintf("CUDA driver %s is too old for the embedded kernels (%s)",
			cuda.VersionString(d.info.Driver), need), err)
	case cuda.ErrorNoBinaryForGPU, cuda.ErrorJITCompilerNotFound:
		return unavailable("the driver cannot compile the embedded PTX for this GPU", err)
	case cuda.ErrorInvalidPTX:
		return fmt.Errorf("the driver rejected the embedded PTX: %w", err)
	}
	return fmt.Errorf("loading the embedded PTX: %w", err)
}
