package verify

import (
	"encoding/binary"
	"fmt"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/prune24"
)

// sparseReader computes rows of W·X straight from a compressed form,
// independently of package prune24's decoder: it locates each group's
// metadata nibble in the stored CUTLASS layout with the closed form of
// docs/formats.md §1.5, as a tensor-core kernel does, or walks the
// bitmask bits.
type sparseReader struct {
	c      *format.Compressed
	values []byte
	index  []byte
	size   int       // element size in bytes
	vals   []float64 // the values of the row being read, Cols/2 of them
}

func newSparseReader(c *format.Compressed) *sparseReader {
	return &sparseReader{c: c, values: c.File.Data(c.Values), index: c.File.Data(c.Index), size: c.DType.Size(),
		vals: make([]float64, c.Cols/2)}
}

// rowValues returns the values of row r, Cols/2 of them in every form,
// as float64.
func (s *sparseReader) rowValues(r int) ([]float64, error) {
	n := len(s.vals) * s.size
	if err := prune24.DecodeFloat64(s.vals, s.values[r*n:(r+1)*n], s.c.DType); err != nil {
		return nil, fmt.Errorf("%s: row %d: %w", s.c.Values.Name, r, err)
	}
	return s.vals, nil
}

// metaNibble returns the nibble of group g (4 halves: 4 f16/bf16
// elements, or one f32 pair) of row r: logical word j = g/4, nibble g%4,
// stored at int16 index 2·(p·m + 32b + 4·(rr%8) + 2·(rr/16) + j%2) +
// (rr/8)%2, with p = j/2, b = r/32, rr = r%32.
func (s *sparseReader) metaNibble(r, g int) byte {
	j := g / 4
	p, h := j/2, j%2
	b, rr := r/32, r%32
	u := p*s.c.Rows + 32*b + 4*(rr%8) + 2*(rr/16) + h
	i := 2*u + (rr/8)%2
	word := binary.LittleEndian.Uint16(s.index[2*i:])
	return byte(word>>(4*(g%4))) & 0xF
}

// row computes ys[m] = Σ_k W[r][k]·X[m][k] for every token m.
func (s *sparseReader) row(r int, x, ys []float64) error {
	c := s.c
	clear(ys)
	vals, err := s.rowValues(r)
	if err != nil {
		return err
	}
	switch {
	case c.Format == format.Ampere && c.DType == checkpoint.F32:
		for g := 0; g < c.Cols/2; g++ {
			nib := s.metaNibble(r, g)
			if nib != 0x4 && nib != 0xE {
				return fmt.Errorf("%s: row %d, pair %d: meta nibble %#x is not 0x4 or 0xE", c.Name, r, g, nib)
			}
			col := 2*g + int(nib&3)/2
			v := vals[g]
			for m := range ys {
				ys[m] += v * x[m*c.Cols+col]
			}
		}
	case c.Format == format.Ampere:
		for g := 0; g < c.Cols/4; g++ {
			nib := s.metaNibble(r, g)
			i0, i1 := int(nib&3), int(nib>>2)
			if i0 >= i1 {
				return fmt.Errorf("%s: row %d, group %d: meta nibble %#x is not a valid 2:4 index pair", c.Name, r, g, nib)
			}
			v0, v1 := vals[2*g], vals[2*g+1]
			for m := range ys {
				xm := x[m*c.Cols+4*g:]
				ys[m] += v0 * xm[i0]
				ys[m] += v1 * xm[i1]
			}
		}
	default:
		rowMask := (c.Cols + 7) / 8
		k := 0
		for col := 0; col < c.Cols; col++ {
			if s.index[r*rowMask+col/8]>>(col%8)&1 == 0 {
				continue
			}
			if k == len(vals) {
				return fmt.Errorf("%s: row %d: more than %d mask bits set", c.Name, r, len(vals))
			}
			v := vals[k]
			k++
			for m := range ys {
				ys[m] += v * x[m*c.Cols+col]
			}
		}
	}
	return nil
}
