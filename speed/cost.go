package speed

import "time"

// Backend names, as rows and the policy spell them.
const (
	Dense      = "cublaslt"   // dense cuBLASLt, fastest of its heuristic's candidates
	DenseOwn   = "dense-own"  // the package kernels' own dense kernel (no cuBLASLt found)
	Ours       = "ours"       // sfsurgery's kernels (package kernels) on the stored packed + meta
	CuSPARSELt = "cusparselt" // NVIDIA cuSPARSELt on its own compressed layout
)

// IsSparse reports whether backend multiplies a 2:4 weight.
func IsSparse(backend string) bool { return backend == Ours || backend == CuSPARSELt }

// Ceilings are this GPU's measured limits.
type Ceilings struct {
	// CopyBytes is the size of the device-to-device copy timed, CopyUS its
	// median time; BandwidthGBs counts bytes read plus bytes written.
	CopyBytes    int64   `json:"copy_bytes"`
	CopyUS       float64 `json:"copy_us"`
	BandwidthGBs float64 `json:"bandwidth_gbs"`
	// GEMM names the large dense product timed (M×N×K and type), GEMMUS
	// its median time and DenseTFLOPS its rate; SparseTFLOPS is twice
	// that, the sparse tensor cores' ceiling.
	GEMM         string  `json:"gemm"`
	GEMMUS       float64 `json:"gemm_us"`
	DenseTFLOPS  float64 `json:"dense_tflops"`
	SparseTFLOPS float64 `json:"sparse_tflops"`
}

// Cost is what one product must do at least.
type Cost struct {
	// Bytes read and written once each: the weight in the backend's form,
	// x and y.
	Bytes int64
	// FLOPs counts the dense-equivalent 2·M·N·K, for every backend.
	FLOPs float64
	// Floor is max(Bytes / bandwidth, FLOPs / peak), with the sparse peak
	// for sparse backends (whose tensor cores skip the zeros); Bound says
	// which term is larger: "memory" or "math".
	Floor time.Duration
	Bound string
}

// WeightBytes returns the bytes of an N×K 16-bit weight in backend's
// form: dense N·K·2; ours N·K/2 values of 2 bytes and N·K/8 bytes of meta;
// cuSPARSELt its compressed size (passed in, as the library reports it).
func WeightBytes(backend string, n, k int, compressed int64) int64 {
	nk := int64(n) * int64(k)
	switch backend {
	case Ours:
		return nk + nk/8
	case CuSPARSELt:
		return compressed
	}
	return 2 * nk
}

// RowCost returns the cost of y[M][N] = x[M][K]·Wᵀ through backend, with
// 16-bit x, an outBytes-wide y and weight bytes w, against the ceilings.
func RowCost(backend string, m, n, k int, w int64, outBytes int, c Ceilings) Cost {
	bytes := w + 2*int64(m)*int64(k) + int64(outBytes)*int64(m)*int64(n)
	flops := 2 * float64(m) * float64(n) * float64(k)
	peak := c.DenseTFLOPS
	if IsSparse(backend) {
		peak = c.SparseTFLOPS
	}
	var mem, math float64
	if c.BandwidthGBs > 0 {
		mem = float64(bytes) / (c.BandwidthGBs * 1e9)
	}
	if peak > 0 {
		math = flops / (peak * 1e12)
	}
	cost := Cost{Bytes: bytes, FLOPs: flops, Bound: "memory"}
	floor := mem
	if math > mem {
		floor, cost.Bound = math, "math"
	}
	cost.Floor = time.Duration(floor * float64(time.Second))
	return cost
}

// TFLOPS returns the dense-equivalent rate of 2·M·N·K in t.
func TFLOPS(m, n, k int, t time.Duration) float64 {
	if t <= 0 {
		return 0
	}
	return 2 * float64(m) * float64(n) * float64(k) / t.Seconds() / 1e12
}
