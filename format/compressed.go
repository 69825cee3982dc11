package format

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/prune24"
)

// ErrCompressed is wrapped by errors about a malformed compressed weight
// (missing or mismatched companion tensors).
var ErrCompressed = errors.New("malformed compressed weight")

// Compressed is one weight stored in a compressed 2:4 form inside a
// checkpoint: ampere (P.packed, P.meta, P.shape) or sparse-24-bitmask
// (P.compressed, P.bitmask, P.shape).
type Compressed struct {
	// Name is the dense weight's name, P.weight.
	Name   string
	Format Format
	DType  checkpoint.DType
	// Rows and Cols are the dense shape, from P.shape.
	Rows, Cols int
	File       *checkpoint.File
	// Values is P.packed or P.compressed; Index is P.meta or P.bitmask.
	Values, Index, Shape checkpoint.TensorInfo
}

// FindCompressed returns every compressed weight of ck, by name. Tensors
// whose names look compressed but lack a companion are an error.
func FindCompressed(ck *checkpoint.Checkpoint) ([]*Compressed, error) {
	var out []*Compressed
	for _, f := range ck.Shards {
		for _, t := range f.Tensors {
			var format Format
			var base, index string
			switch {
			case strings.HasSuffix(t.Name, ".packed"):
				format, base = Ampere, strings.TrimSuffix(t.Name, ".packed")
				index = base + ".meta"
			case strings.HasSuffix(t.Name, ".compressed"):
				format, base = Bitmask, strings.TrimSuffix(t.Name, ".compressed")
				index = base + ".bitmask"
			default:
				continue
			}
			c, err := newCompressed(f, format, base, t, index)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// newCompressed checks the companions of the values tensor of a
// compressed weight and returns it.
func newCompressed(f *checkpoint.File, format Format, base string, values checkpoint.TensorInfo, index string) (*Compressed, error) {
	where := fmt.Sprintf("%s: tensor %q", f.Path(), values.Name)
	idx, ok := f.Tensor(index)
	if !ok {
		return nil, fmt.Errorf("%s: %w: no %s in the same shard", where, ErrCompressed, index)
	}
	shp, ok := f.Tensor(base + ".shape")
	if !ok {
		return nil, fmt.Errorf("%s: %w: no %s.shape in the same shard", where, ErrCompressed, base)
	}
	if shp.DType != checkpoint.I64 || shp.NumElements() != 2 {
		return nil, fmt.Errorf("%s.shape: %w: want int64 [2,1], have %s %v", base, ErrCompressed, shp.DType, shp.Shape)
	}
	sb := f.Data(shp)
	rows, cols := int64(binary.LittleEndian.Uint64(sb)), int64(binary.LittleEndian.Uint64(sb[8:]))
	dt := values.DType
	if prune24.CheckDType(dt) != nil {
		return nil, fmt.Errorf("%s: %w: dtype %s is not BF16, F16 or F32", where, ErrCompressed, values.DType)
	}
	if rows <= 0 || cols <= 0 || rows > 1<<31 || cols > 1<<31 || cols%4 != 0 {
		return nil, fmt.Errorf("%s.shape: %w: dense shape [%d %d] is not a valid weight", base, ErrCompressed, rows, cols)
	}
	c := &Compressed{Name: base + ".weight", Format: format, DType: dt, Rows: int(rows), Cols: int(cols),
		File: f, Values: values, Index: idx, Shape: shp}
	var vb, ib int
	var wantIdx checkpoint.DType
	switch format {
	case Ampere:
		if err := prune24.AmpereShapeError(dt, c.Rows, c.Cols); err != nil {
			return nil, fmt.Errorf("%s: %w: %v", where, ErrCompressed, err)
		}
		vb, ib = prune24.AmpereSizes(dt, c.Rows, c.Cols)
		wantIdx = checkpoint.I16
	default:
		if err := prune24.BitmaskShapeError(c.Rows, c.Cols); err != nil {
			return nil, fmt.Errorf("%s: %w: %v", where, ErrCompressed, err)
		}
		vb, ib = prune24.BitmaskSizes(dt, c.Rows, c.Cols)
		wantIdx = checkpoint.U8
	}
	if values.Size() != int64(vb) || idx.Size() != int64(ib) || idx.DType != wantIdx {
		return nil, fmt.Errorf("%s: %w: sizes %d and %d bytes (%s) do not fit dense shape [%d %d]: want %d and %d (%s)",
			where, ErrCompressed, values.Size(), idx.Size(), idx.DType, rows, cols, vb, ib, wantIdx)
	}
	return c, nil
}

// RowAlign is the granularity of DecodeRows: 32 rows for the ampere
// layout's row blocks, 1 otherwise.
func (c *Compressed) RowAlign() int {
	if c.Format == Ampere {
		return 32
	}
	return 1
}

// DecodeRows decodes dense rows [r0, r0+n) into dst (n·Cols elements).
// r0 and n must be multiples of RowAlign. It validates every metadata
// nibble or bitmask group it reads, the way the tensor core would read
// them.
func (c *Compressed) DecodeRows(dst []byte, r0, n int, scratch []byte) ([]byte, error) {
	a := c.RowAlign()
	if r0 < 0 || n < 0 || r0%a != 0 || n%a != 0 || r0+n > c.Rows {
		return scratch, fmt.Errorf("%s: rows [%d,%d) do not fit %d rows in steps of %d", c.Name, r0, r0+n, c.Rows, a)
	}
	values, index := c.File.Data(c.Values), c.File.Data(c.Index)
	vRow, iRow := len(values)/c.Rows, len(index)/c.Rows
	vals := values[r0*vRow : (r0+n)*vRow]
	var err error
	if c.Format == Ampere {
		// Gather the chunk's metadata: for column pair p, words
		// [p·Rows + r0, +n) of the stored layout.
		scratch = grow(scratch, n*iRow)
		pairs := iRow / 4
		for p := 0; p < pairs; p++ {
			copy(scratch[4*p*n:4*(p+1)*n], index[4*(p*c.Rows+r0):4*(p*c.Rows+r0+n)])
		}
		err = prune24.UnpackAmpere(dst, vals, scratch, c.DType, n, c.Cols)
	} else {
		err = prune24.UnpackBitmask(dst, vals, index[r0*iRow:(r0+n)*iRow], c.DType, n, c.Cols)
	}
	c.File.Release(vals)
	if err != nil {
		return scratch, fmt.Errorf("%s: %s: %w", filepath.Base(c.File.Path()), c.Name, prune24.OffsetRows(err, r0))
	}
	return scratch, nil
}

// grow returns b resliced (or reallocated) to length n.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
