package verify

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// class is the IEEE class of a product element, for the comparison of
// non-finite elements.
type class uint8

const (
	finite class = iota
	posInf
	negInf
	notANumber
)

func classOf(v float64) class {
	switch {
	case math.IsNaN(v):
		return notANumber
	case math.IsInf(v, 1):
		return posInf
	case math.IsInf(v, -1):
		return negInf
	}
	return finite
}

func (c class) String() string {
	return [...]string{"finite", "+Inf", "-Inf", "NaN"}[c]
}

// productDiff accumulates the difference between two products Y_sparse
// and Y_dense element by element. Finite pairs enter the error sums; a
// pair where either element is non-finite must be non-finite in both the
// same way (both +Inf, both -Inf or both NaN), is counted in nonFinite
// and left out of the sums; the first pair whose classes differ is kept
// in mismatch.
type productDiff struct {
	num, den, maxAbs float64
	// nonFinite counts the pairs left out of the sums.
	nonFinite int
	// mismatch describes the first pair of different non-finite class.
	mismatch error
}

// add records the pair (s, d) of weight row `row` and token `token`.
func (p *productDiff) add(s, d float64, row, token int) {
	cs, cd := classOf(s), classOf(d)
	if cs == finite && cd == finite {
		p.num += (s - d) * (s - d)
		p.den += d * d
		p.maxAbs = max(p.maxAbs, math.Abs(s-d))
		return
	}
	if cs == cd {
		p.nonFinite++
		return
	}
	if p.mismatch == nil {
		p.mismatch = fmt.Errorf("row %d, token %d: the sparse product is %v, the dense product %v", row, token, fmtElem(s), fmtElem(d))
	}
}

// fmtElem prints a product element, naming its class when non-finite.
func fmtElem(v float64) string {
	if c := classOf(v); c != finite {
		return c.String()
	}
	return fmt.Sprintf("%.6g", v)
}

// rel returns ‖Y_sparse − Y_dense‖_F / ‖Y_dense‖_F over the finite pairs
// (0 when there are none).
func (p *productDiff) rel() float64 {
	return math.Sqrt(p.num) / math.Sqrt(max(p.den, math.SmallestNonzeroFloat64))
}

// comparison returns the sums' outcome.
func (p *productDiff) comparison() comparison {
	return comparison{relErr: p.rel(), maxAbs: p.maxAbs, nonFinite: p.nonFinite}
}

// maxWeightPositions is how many non-finite weights a note lists by
// position; the rest are counted.
const maxWeightPositions = 8

// weightScan records where a weight holds ±Inf or NaN.
type weightScan struct {
	count     int
	positions []string // "+Inf at row R, column C", the first maxWeightPositions
}

// scan looks at whole rows of cols elements of type dt starting at
// weight row r0.
func (w *weightScan) scan(data []byte, dt checkpoint.DType, cols, r0 int) {
	bits := classBitsOf(dt)
	for i := 0; i+bits.size <= len(data); i += bits.size {
		c := bits.class(data[i:])
		if c == finite {
			continue
		}
		w.count++
		if len(w.positions) < maxWeightPositions {
			e := i / bits.size
			w.positions = append(w.positions, fmt.Sprintf("%v at row %d, column %d", c, r0+e/cols, e%cols))
		}
	}
}

// note describes the non-finite weights for a Result, or returns "".
func (w *weightScan) note() string {
	if w.count == 0 {
		return ""
	}
	s := fmt.Sprintf("%d non-finite weight(s) (±Inf has the largest magnitude, so the rule keeps it): %s", w.count, strings.Join(w.positions, "; "))
	if w.count > len(w.positions) {
		s += fmt.Sprintf("; and %d more", w.count-len(w.positions))
	}
	return s
}

// classBits are the bit masks that classify the elements of one type:
// all exponent bits set is ±Inf (zero mantissa) or NaN.
type classBits struct {
	size            int // element size in bytes
	exp, mant, sign uint32
}

// classBitsOf returns the masks of dt: F32, BF16, or else F16.
func classBitsOf(dt checkpoint.DType) classBits {
	switch dt {
	case checkpoint.F32:
		return classBits{4, 0x7F800000, 0x007FFFFF, 0x80000000}
	case checkpoint.BF16:
		return classBits{2, 0x7F80, 0x007F, 0x8000}
	}
	return classBits{2, 0x7C00, 0x03FF, 0x8000}
}

// class classifies the little-endian element at the start of b from its
// bits.
func (m classBits) class(b []byte) class {
	var u uint32
	if m.size == 4 {
		u = binary.LittleEndian.Uint32(b)
	} else {
		u = uint32(binary.LittleEndian.Uint16(b))
	}
	switch {
	case u&m.exp != m.exp:
		return finite
	case u&m.mant != 0:
		return notANumber
	case u&m.sign != 0:
		return negInf
	}
	return posInf
}
