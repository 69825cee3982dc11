package verify

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"

	"github.com/sfsurgery/sfsurgery/surgery"
)

// numeric computes check 4 for a compressed weight: Y from the compressed
// form against Y from the decoded dense weight.
type numeric interface {
	// Compare returns the relative Frobenius error and the largest
	// absolute error between the two products.
	Compare(c *surgery.Compressed) (relErr, maxAbs float64, err error)
	// Tolerance is the largest relative error that passes.
	Tolerance() float64
	// Describe says where the check runs, for the report.
	Describe() string
	// Workers returns how many tensors may be checked at once, given the
	// caller's request (0 for the default).
	Workers(requested int) int
	Close()
}

// defaultWorkers returns requested, or GOMAXPROCS capped at most.
func defaultWorkers(requested, most int) int {
	if requested > 0 {
		return requested
	}
	return max(1, min(runtime.GOMAXPROCS(0), most))
}

// cpuTolerance: both CPU products add the same nonzero float64 terms in
// the same order (zeros add nothing), so they agree exactly; the bound
// only leaves room for a -0/+0 difference.
const cpuTolerance = 1e-12

// cpuNumeric is the float64 reference on the CPU.
type cpuNumeric struct {
	tokens int
	seed   uint64
	why    string // why the CPU was chosen, for auto
}

func (n *cpuNumeric) Tolerance() float64 { return cpuTolerance }
func (n *cpuNumeric) Close()             {}

// Workers allows one tensor per core.
func (n *cpuNumeric) Workers(requested int) int { return defaultWorkers(requested, 1<<10) }
func (n *cpuNumeric) Describe() string {
	s := fmt.Sprintf("cpu (float64, %d random tokens)", n.tokens)
	if n.why != "" {
		s += "; " + n.why
	}
	return s
}

// Compare computes Y[r][m] = Σ_k W[r][k]·X[m][k] twice: straight from
// the compressed form, reading each group's kept positions from its
// metadata nibble or bitmask bits, and from the decoded dense rows.
func (n *cpuNumeric) Compare(c *surgery.Compressed) (float64, float64, error) {
	x := randomTokens(n.tokens, c.Cols, n.seed)
	sp := newSparseReader(c)
	rowBytes := c.Cols * c.DType.Size()
	a := c.RowAlign()
	step := max(chunkBytes/rowBytes/a*a, a)
	dense := make([]byte, min(step, c.Rows)*rowBytes)
	w := make([]float64, c.Cols)
	ys := make([]float64, n.tokens)
	var scratch []byte
	var num, den, maxAbs float64
	for r0 := 0; r0 < c.Rows; r0 += step {
		cnt := min(step, c.Rows-r0)
		var err error
		if scratch, err = c.DecodeRows(dense[:cnt*rowBytes], r0, cnt, scratch); err != nil {
			return 0, 0, err
		}
		for r := r0; r < r0+cnt; r++ {
			if err := sp.row(r, x, ys); err != nil {
				return 0, 0, err
			}
			decodeRow(w, dense[(r-r0)*rowBytes:(r-r0+1)*rowBytes], c.DType)
			for m := range n.tokens {
				xm := x[m*c.Cols : (m+1)*c.Cols]
				var yd float64
				for k, wk := range w {
					yd += wk * xm[k]
				}
				d := ys[m] - yd
				num += d * d
				den += yd * yd
				maxAbs = max(maxAbs, math.Abs(d))
			}
		}
	}
	return math.Sqrt(num) / math.Sqrt(max(den, math.SmallestNonzeroFloat64)), maxAbs, nil
}

// randomTokens draws X[m][k] uniform in [-1, 1).
func randomTokens(m, k int, seed uint64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 0x5f5f2a4))
	x := make([]float64, m*k)
	for i := range x {
		x[i] = 2*rng.Float64() - 1
	}
	return x
}
