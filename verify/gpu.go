package verify

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/internal/half"
	"github.com/sfsurgery/sfsurgery/kernels"
	"github.com/sfsurgery/sfsurgery/prune24"
)

// gpuTolerance bounds ‖Y_sparse − Y_dense‖/‖Y_dense‖ on the GPU: both
// products take the same bf16/f16 operands and accumulate in f32, in
// different orders, so they differ by f32 rounding (about 1e-7 per term,
// well under 1e-6 relative for K ≤ 28672).
const gpuTolerance = 1e-5

// spotTolerance bounds the float64 CPU spot check of sampled rows
// against the GPU's f32 result.
const spotTolerance = 1e-5

// spotRows is the number of weight rows the CPU spot check recomputes.
const spotRows = 8

// defaultGPUTokens are the token counts M of a GPU check: one token, a
// partial tile, a multiple of the tile, and a size that is neither.
func defaultGPUTokens() []int { return []int{1, 13, 64, 257} }

// gpuNumeric runs check 4 on the GPU: Y_sparse from our kernels
// (SparseMatmul) reading packed+meta as stored, Y_dense from cuBLASLt on the pruned dense
// weight (pruned from the original on the CPU when it is given, else
// decoded from packed+meta on the GPU).
type gpuNumeric struct {
	dev    *kernels.Device
	tokens []int
	seed   uint64
	orig   func(name string) ([]byte, error)
	cpu    *cpuNumeric // for forms the GPU kernels do not read
}

func newGPUNumeric(opt Options) (numeric, error) {
	dev, err := kernels.OpenNotify(opt.GPU, func(msg string) {
		if opt.Notef != nil {
			opt.Notef("%s", msg)
		}
	})
	if err != nil {
		return nil, err
	}
	g := &gpuNumeric{dev: dev, seed: opt.Seed, tokens: defaultGPUTokens(),
		cpu: newCPUNumeric(max(opt.Tokens, 1), opt.Seed, "")}
	if opt.Tokens > 0 && opt.TokensSet {
		g.tokens = []int{opt.Tokens}
	}
	if opt.Original != nil {
		g.orig = func(name string) ([]byte, error) {
			f, info, ok := opt.Original.Lookup(name)
			if !ok {
				return nil, fmt.Errorf("the original checkpoint has no %s", name)
			}
			return f.Data(info), nil
		}
	}
	return g, nil
}

func (g *gpuNumeric) Tolerance() float64 { return gpuTolerance }
func (g *gpuNumeric) Close()             { g.dev.Close() }

// Workers allows up to 16 tensors at once, so that their CPU checks
// overlap while the device serialises its own work (each holds its
// compressed and dense weight on the GPU meanwhile: under 1 GB for a
// Llama-3-70B MLP weight); up to 4 when the original is given, since each
// then also holds a dense copy of its weight in host memory. On the H200
// machine's 16 cores, a Llama-3-8B-shaped checkpoint (9.3 GB of ampere
// output, cold page cache) verified in 17.6 s with 4 workers, 8.1 s with
// 8 and 6.1 s with 16, against 5.3 s to read its files.
func (g *gpuNumeric) Workers(requested int) int {
	if g.orig != nil {
		return defaultWorkers(requested, 4)
	}
	return defaultWorkers(requested, 16)
}
func (g *gpuNumeric) Describe() string {
	ref := "pruned dense decoded on the GPU"
	if g.orig != nil {
		ref = "the original pruned on the CPU"
	}
	return fmt.Sprintf("cuda: %s; %s vs %s (%s), f32 accumulation, M = %v, float64 spot check of %d rows",
		g.dev.Info(), g.dev.SparseBackend(), g.dev.DenseBackend(), ref, g.tokens, spotRows)
}

// Compare runs every token count and returns the worst errors; ctx is
// checked between token counts.
func (g *gpuNumeric) Compare(ctx context.Context, c *format.Compressed) (comparison, error) {
	dt, ok := kernelType(c)
	if !ok {
		// Bitmask and F32 forms have no tensor-core kernel here; their
		// check runs on the CPU.
		return g.cpu.Compare(ctx, c)
	}
	if err := ctx.Err(); err != nil {
		return comparison{}, err
	}
	rows, cols := c.Rows, c.Cols
	packed, err := g.dev.Upload(c.File.Data(c.Values))
	if err != nil {
		return comparison{}, err
	}
	defer packed.Free()
	meta, err := g.dev.Upload(c.File.Data(c.Index))
	if err != nil {
		return comparison{}, err
	}
	defer meta.Free()
	var w *kernels.Buffer
	if g.orig != nil {
		o, err := g.orig(c.Name)
		if err != nil {
			return comparison{}, err
		}
		dense := make([]byte, len(o))
		if _, err := prune24.Prune(dense, o, c.DType, cols, 0, prune24.Rule24); err != nil {
			return comparison{}, err
		}
		w, err = g.dev.Upload(dense)
		if err != nil {
			return comparison{}, err
		}
	} else {
		if w, err = g.dev.Alloc(int64(rows * cols * c.DType.Size())); err != nil {
			return comparison{}, err
		}
		if err := g.dev.DecodeAmpere(kernels.DecodeOperands{W: w, Packed: packed, Meta: meta, DType: dt, N: rows, K: cols}); err != nil {
			w.Free()
			return comparison{}, err
		}
	}
	defer w.Free()
	var worst comparison
	for i, m := range g.tokens {
		if err := ctx.Err(); err != nil {
			return comparison{}, err
		}
		cmp, err := g.compareM(c, dt, packed, meta, w, m, g.seed+uint64(i))
		worst.relErr, worst.maxAbs = max(worst.relErr, cmp.relErr), max(worst.maxAbs, cmp.maxAbs)
		worst.nonFinite = max(worst.nonFinite, cmp.nonFinite)
		if err != nil {
			return worst, fmt.Errorf("M=%d: %w", m, err)
		}
	}
	return worst, nil
}

// compareM runs one token count: sparse and dense products on the GPU,
// then the float64 spot check of sampled rows on the CPU.
func (g *gpuNumeric) compareM(c *format.Compressed, dt checkpoint.DType, packed, meta, w *kernels.Buffer, m int, seed uint64) (comparison, error) {
	n, k := c.Rows, c.Cols
	xh, xf, err := randomActivations(m, k, c.DType, seed)
	if err != nil {
		return comparison{}, err
	}
	x, err := g.dev.Upload(xh)
	if err != nil {
		return comparison{}, err
	}
	defer x.Free()
	ys, err := g.dev.Alloc(int64(m * n * 4))
	if err != nil {
		return comparison{}, err
	}
	defer ys.Free()
	yd, err := g.dev.Alloc(int64(m * n * 4))
	if err != nil {
		return comparison{}, err
	}
	defer yd.Free()
	if err := g.dev.SparseMatmul(kernels.SparseOperands{Y: ys, X: x, Packed: packed, Meta: meta, DType: dt, M: m, N: n, K: k}); err != nil {
		return comparison{}, err
	}
	if err := g.dev.DenseMatmul(kernels.DenseOperands{Y: yd, X: x, W: w, DType: dt, M: m, N: n, K: k}); err != nil {
		return comparison{}, err
	}
	sb, db := make([]byte, m*n*4), make([]byte, m*n*4)
	if err := ys.Download(sb); err != nil {
		return comparison{}, err
	}
	if err := yd.Download(db); err != nil {
		return comparison{}, err
	}
	// Y is M×N, token-major. A weight holding ±Inf gives ±Inf or NaN
	// in the rows it reaches, in both products alike whatever the order
	// of accumulation (an Inf stays an Inf, +Inf + -Inf and Inf·0 are
	// NaN either way); those elements are compared by class.
	var diff productDiff
	for i := 0; i < m*n; i++ {
		s := float64(math.Float32frombits(binary.LittleEndian.Uint32(sb[4*i:])))
		d := float64(math.Float32frombits(binary.LittleEndian.Uint32(db[4*i:])))
		diff.add(s, d, i%n, i/n)
	}
	if diff.mismatch != nil {
		return diff.comparison(), diff.mismatch
	}
	return diff.comparison(), spotCheck(c, sb, xf, m, seed)
}

// spotCheck recomputes spotRows sampled rows of Y in float64 from the CPU
// decode of the compressed form and compares them with the GPU's sparse
// result.
func spotCheck(c *format.Compressed, ys []byte, x []float64, m int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 77))
	a := c.RowAlign()
	rowBytes := c.Cols * c.DType.Size()
	dense := make([]byte, a*rowBytes)
	w := make([]float64, c.Cols)
	var scratch []byte
	var diff productDiff
	for range spotRows {
		r := rng.IntN(c.Rows)
		r0 := r / a * a
		var err error
		if scratch, err = c.DecodeRows(dense, r0, a, scratch); err != nil {
			return err
		}
		if err := prune24.DecodeFloat64(w, dense[(r-r0)*rowBytes:(r-r0+1)*rowBytes], c.DType); err != nil {
			return err
		}
		for t := range m {
			var ref float64
			for kk, wk := range w {
				ref += wk * x[t*c.Cols+kk]
			}
			got := float64(math.Float32frombits(binary.LittleEndian.Uint32(ys[4*(t*c.Rows+r):])))
			diff.add(got, f32Range(ref), r, t)
		}
	}
	if diff.mismatch != nil {
		return fmt.Errorf("float64 spot check of %d rows: %w", spotRows, diff.mismatch)
	}
	if rel := diff.rel(); !(rel <= spotTolerance) {
		return fmt.Errorf("float64 spot check of %d rows: relative error %.3g over %.3g", spotRows, rel, spotTolerance)
	}
	return nil
}

// f32Range returns v, or ±Inf where v lies beyond the float32 range, as
// an f32 accumulation of the same terms overflows.
func f32Range(v float64) float64 {
	if math.Abs(v) > math.MaxFloat32 {
		return math.Copysign(math.Inf(1), v)
	}
	return v
}

// kernelType maps a compressed weight to the GPU kernels' type, if they
// read its form.
func kernelType(c *format.Compressed) (checkpoint.DType, bool) {
	if c.Format != format.Ampere {
		return "", false
	}
	switch c.DType {
	case checkpoint.BF16:
		return checkpoint.BF16, true
	case checkpoint.F16:
		return checkpoint.F16, true
	}
	return "", false
}

// randomActivations draws X[m][k] uniform in [-1, 1) in the weight's
// type, returning the raw bytes and their exact float64 values.
func randomActivations(m, k int, dt checkpoint.DType, seed uint64) ([]byte, []float64, error) {
	rng := rand.New(rand.NewPCG(seed, 0x5f5f2a4))
	raw := make([]byte, m*k*2)
	vals := make([]float64, m*k)
	for i := range vals {
		v := 2*rng.Float64() - 1
		h := half.F16(v)
		if dt == checkpoint.BF16 {
			h = half.BF16(float32(v))
		}
		binary.LittleEndian.PutUint16(raw[2*i:], h)
	}
	return raw, vals, prune24.DecodeFloat64(vals, raw, dt)
}
