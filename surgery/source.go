package surgery

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/prune24"
	"golang.org/x/sync/semaphore"
)

// Memory. A prune's resident memory must not grow with the model, and
// stay well under 256 MiB on a machine of many cores: each worker holds
// one chunk of a weight (and its packed form), and each ampere target in
// flight its whole metadata, which the layout interleaves across row
// blocks (1/16 of the weight: 7 MB for a Llama-3-8B MLP weight, 29 MB for
// a 70B one).
const (
	// chunkBytes is the most of a weight one worker reads at a time:
	// large enough to amortise the system calls.
	chunkBytes = 4 << 20
	// chunkBudget is shared by the workers' chunks; with many workers
	// each chunk shrinks, to no less than minChunkBytes.
	chunkBudget   = 48 << 20
	minChunkBytes = 512 << 10
	// metaBudget bounds the metadata buffers held at once; a target
	// whose metadata is larger holds the whole budget.
	metaBudget = 64 << 20
)

// budget is the memory of one write shared by its targets.
type budget struct {
	chunk int                 // bytes of a weight per read
	meta  *semaphore.Weighted // metadata buffers in flight
}

// budget returns the target's share of the run's memory; a target
// written outside Plan.Write gets a budget of its own.
func (t *target) budget() *budget {
	if t.mem == nil {
		t.mem = newBudget(1)
	}
	return t.mem
}

// newBudget sizes the chunks for workers and makes the metadata budget.
func newBudget(workers int) *budget {
	return &budget{
		chunk: max(minChunkBytes, min(chunkBytes, chunkBudget/max(workers, 1))),
		meta:  semaphore.NewWeighted(metaBudget),
	}
}

// target is one weight being pruned: where its bytes are and how to cut
// them. Its source (one tensor, or a group of values and index) makes one
// pass over the input and records the magnitude statistics.
type target struct {
	plan *TensorPlan
	file *checkpoint.File
	info checkpoint.TensorInfo
	dt   checkpoint.DType
	rows int
	cols int
	rule prune24.Rule
	// align is the row granularity of a chunk (32 for the ampere
	// layout's row blocks, 1 otherwise).
	align  int
	format format.Format
	mem    *budget // set by Plan.Write
}

// forEachChunk reads the weight chunk by chunk (whole rows, starting at
// row r0) and hands each raw chunk to fn, which prunes it into its output
// and returns the chunk's magnitude sums; their total becomes the
// target's statistics. Memory stays at a chunk per worker whatever the
// model's size.
func (t *target) forEachChunk(fn func(r0, n int, raw []byte) (prune24.Stats, error)) error {
	rowBytes := t.cols * t.dt.Size()
	step := max(t.budget().chunk/max(rowBytes, 1)/t.align*t.align, t.align)
	buf := make([]byte, min(step, t.rows)*rowBytes)
	base := t.file.DataOffset + t.info.Begin
	var total prune24.Stats
	for r0 := 0; r0 < t.rows; r0 += step {
		n := min(step, t.rows-r0)
		raw := buf[:n*rowBytes]
		// pread rather than the mapping: one system call a chunk instead
		// of a page fault every few pages, and the pages never count
		// in this process's RSS.
		if _, err := t.file.ReadAt(raw, base+int64(r0*rowBytes)); err != nil {
			return fmt.Errorf("%s: tensor %q: reading rows %d+: %w", t.file.Path(), t.info.Name, r0, err)
		}
		st, err := fn(r0, n, raw)
		if err != nil {
			return fmt.Errorf("%s: tensor %q: %w", t.file.Path(), t.info.Name, err)
		}
		total.Add(st)
	}
	t.plan.Stats = total
	return nil
}

// denseSource writes the pruned weight under its own name.
type denseSource struct{ t *target }

func (s denseSource) WriteTo(w io.Writer) (int64, error) {
	var written int64
	err := s.t.forEachChunk(func(r0, _ int, raw []byte) (prune24.Stats, error) {
		st, err := prune24.Prune(raw, raw, s.t.dt, s.t.cols, r0, s.t.rule)
		if err != nil {
			return st, err
		}
		n, err := w.Write(raw)
		written += int64(n)
		return st, err
	})
	return written, err
}

// WriteGroup writes a compressed target in one pass over its weight,
// pruning and packing each chunk in one go (prune24.PruneAmpere,
// PruneBitmask): ws[0] takes the values (P.packed or P.compressed), ws[1]
// the index (P.meta or P.bitmask), ws[2] the dense shape (P.shape), so
// that the three always share a shard (verify and every loader look for
// them together). A bitmask chunk is row-contiguous and
// goes straight out; the ampere metadata layout interleaves 32-row blocks
// across column pairs, so the whole tensor's metadata (1/16 of the
// weight's bytes) is assembled in memory and written at the end.
func (t *target) WriteGroup(ws []io.Writer) error {
	if len(ws) != 3 {
		return fmt.Errorf("tensor %q: want 3 outputs, have %d", t.info.Name, len(ws))
	}
	if _, err := shapeTensor(t.rows, t.cols).WriteTo(ws[2]); err != nil {
		return err
	}
	var meta []byte
	if t.format == format.Ampere {
		_, mb := prune24.AmpereSizes(t.dt, t.rows, t.cols)
		hold := min(int64(mb), metaBudget)
		// The holders of the budget finish without waiting on anything,
		// so this wait ends.
		mem := t.budget()
		if err := mem.meta.Acquire(context.Background(), hold); err != nil {
			return err
		}
		defer mem.meta.Release(hold)
		meta = make([]byte, mb)
	}
	var vals, idx []byte
	err := t.forEachChunk(func(r0, n int, raw []byte) (prune24.Stats, error) {
		var st prune24.Stats
		var err error
		if meta != nil {
			vb, ib := prune24.AmpereSizes(t.dt, n, t.cols)
			vals, idx = grow(vals, vb), grow(idx, ib)
			st, err = prune24.PruneAmpere(vals, idx, raw, t.dt, n, t.cols, r0, t.rule)
		} else {
			vb, ib := prune24.BitmaskSizes(t.dt, n, t.cols)
			vals, idx = grow(vals, vb), grow(idx, ib)
			st, err = prune24.PruneBitmask(vals, idx, raw, t.dt, n, t.cols, r0, t.rule)
		}
		if err != nil {
			return st, err
		}
		if _, err := ws[0].Write(vals); err != nil {
			return st, err
		}
		if meta != nil {
			t.placeMeta(meta, idx, r0, n)
			return st, nil
		}
		_, err = ws[1].Write(idx)
		return st, err
	})
	if err != nil || meta == nil {
		return err
	}
	_, err = ws[1].Write(meta)
	return err
}

// placeMeta copies the metadata of a chunk of whole row blocks (rows
// r0..r0+n) into the whole tensor's. The layout of such a chunk is the
// full layout restricted to its rows: for column pair p, the chunk's
// 32-bit words [p·n, (p+1)·n) land at [p·rows + r0, p·rows + r0 + n).
func (t *target) placeMeta(all, chunk []byte, r0, n int) {
	for p := 0; p < len(chunk)/(4*n); p++ {
		copy(all[4*(p*t.rows+r0):], chunk[4*p*n:4*(p+1)*n])
	}
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
