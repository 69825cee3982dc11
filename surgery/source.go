package surgery

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/prune24"
)

// chunkBytes is about how much of a weight one source prunes at a time:
// large enough to amortise the write calls, small enough that buffers
// stay far under the RSS budget with every worker busy.
const chunkBytes = 4 << 20

// target is one weight being pruned: where its bytes are and how to cut
// them. Its sources each make a pass over the mapped input; the primary
// source records the magnitude statistics.
type target struct {
	plan *TensorPlan
	file *checkpoint.File
	info checkpoint.TensorInfo
	dt   prune24.DType
	rows int
	cols int
	rule prune24.Rule
	// align is the row granularity of a chunk (32 for the ampere
	// layout's row blocks, 1 otherwise).
	align int
}

// forEachChunk prunes the weight chunk by chunk and hands each pruned
// chunk (whole rows, starting at row r0) to fn. Input pages are released
// once pruned, so a pass over a 16 GB model keeps a flat RSS.
func (t *target) forEachChunk(primary bool, fn func(r0, n int, pruned []byte) error) error {
	src := t.file.Data(t.info)
	rowBytes := t.cols * t.dt.Size()
	step := max(chunkBytes/max(rowBytes, 1)/t.align*t.align, t.align)
	buf := make([]byte, min(step, t.rows)*rowBytes)
	var total prune24.Stats
	for r0 := 0; r0 < t.rows; r0 += step {
		n := min(step, t.rows-r0)
		in := src[r0*rowBytes : (r0+n)*rowBytes]
		out := buf[:n*rowBytes]
		st, err := prune24.Prune(out, in, t.dt, t.cols, r0, t.rule)
		t.file.Release(in)
		if err != nil {
			return fmt.Errorf("%s: tensor %q: %w", t.file.Path(), t.info.Name, err)
		}
		total.Add(st)
		if err := fn(r0, n, out); err != nil {
			return err
		}
	}
	if primary {
		t.plan.Stats = total
	}
	return nil
}

// denseSource writes the pruned weight under its own name.
type denseSource struct{ t *target }

func (s denseSource) WriteTo(w io.Writer) (int64, error) {
	var written int64
	err := s.t.forEachChunk(true, func(_, _ int, pruned []byte) error {
		n, err := w.Write(pruned)
		written += int64(n)
		return err
	})
	return written, err
}

// packedSource writes P.packed: the kept values of each row, in order.
type packedSource struct{ t *target }

func (s packedSource) WriteTo(w io.Writer) (int64, error) {
	var written int64
	var packed, meta []byte
	err := s.t.forEachChunk(true, func(_, n int, pruned []byte) error {
		pb, mb := prune24.AmpereSizes(s.t.dt, n, s.t.cols)
		packed, meta = grow(packed, pb), grow(meta, mb)
		if err := prune24.PackAmpere(packed, meta, pruned, s.t.dt, n, s.t.cols); err != nil {
			return fmt.Errorf("tensor %q: %w", s.t.info.Name, err)
		}
		k, err := w.Write(packed)
		written += int64(k)
		return err
	})
	return written, err
}

// metaSource writes P.meta in the CUTLASS reordered layout. That layout
// interleaves 32-row blocks across column pairs, so the whole tensor's
// metadata (1/16 of the weight's bytes) is assembled in memory first.
// The layout of a chunk of whole row blocks is the full layout restricted
// to those rows: for column pair p, the chunk's words [p·n, (p+1)·n) land
// at [p·rows + r0, p·rows + r0 + n) of the full tensor (in 32-bit words).
type metaSource struct{ t *target }

func (s metaSource) WriteTo(w io.Writer) (int64, error) {
	_, full := prune24.AmpereSizes(s.t.dt, s.t.rows, s.t.cols)
	all := make([]byte, full)
	var packed, meta []byte
	err := s.t.forEachChunk(false, func(r0, n int, pruned []byte) error {
		pb, mb := prune24.AmpereSizes(s.t.dt, n, s.t.cols)
		packed, meta = grow(packed, pb), grow(meta, mb)
		if err := prune24.PackAmpere(packed, meta, pruned, s.t.dt, n, s.t.cols); err != nil {
			return fmt.Errorf("tensor %q: %w", s.t.info.Name, err)
		}
		pairs := mb / (4 * n)
		for p := 0; p < pairs; p++ {
			copy(all[4*(p*s.t.rows+r0):], meta[4*p*n:4*(p+1)*n])
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	k, err := w.Write(all)
	return int64(k), err
}

// compressedSource writes P.compressed of the sparse-24-bitmask format.
type compressedSource struct{ t *target }

func (s compressedSource) WriteTo(w io.Writer) (int64, error) {
	return s.t.writeBitmask(w, true)
}

// bitmaskSource writes P.bitmask of the sparse-24-bitmask format.
type bitmaskSource struct{ t *target }

func (s bitmaskSource) WriteTo(w io.Writer) (int64, error) {
	return s.t.writeBitmask(w, false)
}

func (t *target) writeBitmask(w io.Writer, values bool) (int64, error) {
	var written int64
	var comp, mask []byte
	err := t.forEachChunk(values, func(_, n int, pruned []byte) error {
		cb, mb := prune24.BitmaskSizes(t.dt, n, t.cols)
		comp, mask = grow(comp, cb), grow(mask, mb)
		if err := prune24.PackBitmask(comp, mask, pruned, t.dt, n, t.cols); err != nil {
			return fmt.Errorf("tensor %q: %w", t.info.Name, err)
		}
		out := mask
		if values {
			out = comp
		}
		k, err := w.Write(out)
		written += int64(k)
		return err
	})
	return written, err
}

// bytesSource writes a small tensor held in memory.
type bytesSource []byte

func (b bytesSource) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b)
	return int64(n), err
}

// shapeTensor encodes the int64 [2,1] P.shape tensor: [[out],[in]].
func shapeTensor(rows, cols int) bytesSource {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint64(b, uint64(rows))
	binary.LittleEndian.PutUint64(b[8:], uint64(cols))
	return b
}

// grow returns b resliced (or reallocated) to length n.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
