package verify

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"

	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/prune24"
)

// numeric computes check 4 for a compressed weight: Y from the compressed
// form against Y from the decoded dense weight.
type numeric interface {
	// Compare compares the two products. It returns an error when they
	// differ in non-finite class at some element, when the compressed
	// form cannot be read, or when ctx is done (checked between rows).
	Compare(ctx context.Context, c *format.Compressed) (comparison, error)
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

	// X depends only on the tokens, the seed and K: the tensors of one K
	// share it, so its memory does not grow with the workers.
	mu sync.Mutex
	xs map[int]*sharedTokens
}

// sharedTokens is X for one K, drawn once.
type sharedTokens struct {
	once sync.Once
	x    []float64
}

func newCPUNumeric(tokens int, seed uint64, why string) *cpuNumeric {
	return &cpuNumeric{tokens: tokens, seed: seed, why: why, xs: map[int]*sharedTokens{}}
}

// tokensFor returns X for k columns.
func (n *cpuNumeric) tokensFor(k int) []float64 {
	n.mu.Lock()
	st, ok := n.xs[k]
	if !ok {
		st = &sharedTokens{}
		n.xs[k] = st
	}
	n.mu.Unlock()
	st.once.Do(func() { st.x = randomTokens(n.tokens, k, n.seed) })
	return st.x
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

// comparison is the outcome of a numerical check.
type comparison struct {
	// relErr is ‖Y_sparse − Y_dense‖_F / ‖Y_dense‖_F and maxAbs the
	// largest |Y_sparse − Y_dense|, both over the finite elements.
	relErr, maxAbs float64
	// nonFinite counts the elements non-finite in both products alike,
	// which the sums leave out.
	nonFinite int
}

// Compare computes Y[r][m] = Σ_k W[r][k]·X[m][k] twice: straight from
// the compressed form, reading each group's kept positions from its
// metadata nibble or bitmask bits, and from the decoded dense rows. The
// two add the same nonzero terms in the same order, so an element is
// non-finite in one exactly when it is in the other.
func (n *cpuNumeric) Compare(ctx context.Context, c *format.Compressed) (comparison, error) {
	x := n.tokensFor(c.Cols)
	sp := newSparseReader(c)
	rowBytes := c.Cols * c.DType.Size()
	a := c.RowAlign()
	step := max(chunkBytes/rowBytes/a*a, a)
	dense := make([]byte, min(step, c.Rows)*rowBytes)
	w := make([]float64, c.Cols)
	ys := make([]float64, n.tokens)
	var scratch []byte
	var diff productDiff
	for r0 := 0; r0 < c.Rows; r0 += step {
		cnt := min(step, c.Rows-r0)
		var err error
		if scratch, err = c.DecodeRows(dense[:cnt*rowBytes], r0, cnt, scratch); err != nil {
			return comparison{}, err
		}
		for r := r0; r < r0+cnt; r++ {
			// A row costs tokens·cols multiply-adds twice: with many
			// tokens a chunk of rows takes seconds, so ctx is checked
			// per row.
			if err := ctx.Err(); err != nil {
				return comparison{}, err
			}
			if err := sp.row(r, x, ys); err != nil {
				return comparison{}, err
			}
			if err := prune24.DecodeFloat64(w, dense[(r-r0)*rowBytes:(r-r0+1)*rowBytes], c.DType); err != nil {
				return comparison{}, err
			}
			for m := range n.tokens {
				xm := x[m*c.Cols : (m+1)*c.Cols]
				var yd float64
				for k, wk := range w {
					yd += wk * xm[k]
				}
				diff.add(ys[m], yd, r, m)
			}
		}
	}
	return diff.comparison(), diff.mismatch
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
