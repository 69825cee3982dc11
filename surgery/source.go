package surgery

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/decisions"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/prune24"
	"golang.org/x/sync/semaphore"
)

// Memory. A prune's resident memory must not grow with the model, and
// stay well under 256 MiB on a machine of many cores: each worker holds
// one chunk of a weight (and its packed form; with decisions, the same
// rows of their mask, 1/16 of the chunk for 16-bit weights, and
// sparsegpt's updated values in a chunk of half the rows), and each
// ampere target in flight its whole metadata, which the layout
// interleaves across row blocks (1/16 of the weight: 7 MB for a
// Llama-3-8B MLP weight, 29 MB for a 70B one).
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
	// dec is the target's decision when decisions choose what it keeps
	// (Options.Decisions); nil for the magnitude rule.
	dec *decisions.Decision
}

// forEachChunk reads the weight chunk by chunk (whole rows, starting at
// row r0) and hands each raw chunk to fn, which prunes it into its output
// and returns the chunk's magnitude sums; their total becomes the
// target's statistics. Memory stays at a chunk per worker whatever the
// model's size.
func (t *target) forEachChunk(fn func(r0, n int, raw []byte) (prune24.Stats, error)) error {
	rowBytes := t.cols * t.dt.Size()
	held := rowBytes // bytes a row of the chunk holds in memory
	if t.dec != nil && t.dec.Updates() {
		held *= 2
	}
	step := max(t.budget().chunk/max(held, 1)/t.align*t.align, t.align)
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
		if _, ok := errors.AsType[*decisions.Error](err); ok {
			return err // it names the decisions file and its tensor
		}
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
	if s.t.dec != nil {
		err := s.t.forEachDecided(func(_, _ int, pruned []byte) error {
			n, err := w.Write(pruned)
			written += int64(n)
			return err
		})
		return written, err
	}
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
	// sizes makes vals and idx the sizes of n rows' packed form.
	sizes := func(n int) {
		var vb, ib int
		if meta != nil {
			vb, ib = prune24.AmpereSizes(t.dt, n, t.cols)
		} else {
			vb, ib = prune24.BitmaskSizes(t.dt, n, t.cols)
		}
		vals, idx = grow(vals, vb), grow(idx, ib)
	}
	// emit writes the packed form of rows r0..r0+n.
	emit := func(r0, n int) error {
		if _, err := ws[0].Write(vals); err != nil {
			return err
		}
		if meta != nil {
			t.placeMeta(meta, idx, r0, n)
			return nil
		}
		_, err := ws[1].Write(idx)
		return err
	}
	var err error
	if t.dec != nil {
		// The decisions' pruned rows, packed as Prune's are.
		err = t.forEachDecided(func(r0, n int, pruned []byte) error {
			sizes(n)
			var err error
			if meta != nil {
				err = prune24.PackAmpere(vals, idx, pruned, t.dt, n, t.cols)
			} else {
				err = prune24.PackBitmask(vals, idx, pruned, t.dt, n, t.cols)
			}
			if err != nil {
				return prune24.OffsetRows(err, r0)
			}
			return emit(r0, n)
		})
	} else {
		err = t.forEachChunk(func(r0, n int, raw []byte) (prune24.Stats, error) {
			sizes(n)
			var st prune24.Stats
			var err error
			if meta != nil {
				st, err = prune24.PruneAmpere(vals, idx, raw, t.dt, n, t.cols, r0, t.rule)
			} else {
				st, err = prune24.PruneBitmask(vals, idx, raw, t.dt, n, t.cols, r0, t.rule)
			}
			if err != nil {
				return st, err
			}
			return st, emit(r0, n)
		})
	}
	if err != nil || meta == nil {
		return err
	}
	_, err = ws[1].Write(meta)
	return err
}

// forEachDecided reads the weight chunk by chunk as forEachChunk does,
// prunes each chunk as the target's decision says and hands the pruned
// rows to fn: the original's values at the places the mask keeps, or
// sparsegpt's updated ones, +0.0 elsewhere (prune24.PruneMask). The
// decision's mask and values are read and validated with the chunk, a
// refusal being the decision's *decisions.Error. The statistics are the
// original's magnitudes at the kept places; the mask digests go to the
// target's plan.
func (t *target) forEachDecided(fn func(r0, n int, pruned []byte) error) error {
	x := t.dec
	mb := x.MaskRowBytes()
	var mask, shown, update []byte
	maskSum, shownSum := sha256.New(), sha256.New()
	var zeroKept int64
	err := t.forEachChunk(func(r0, n int, raw []byte) (prune24.Stats, error) {
		mask, shown = grow(mask, n*mb), grow(shown, n*mb)
		if err := x.ReadMask(mask, r0, n); err != nil {
			return prune24.Stats{}, err
		}
		st, err := prune24.PruneMask(raw, raw, mask, t.dt, t.cols, r0)
		if err != nil {
			return st, err
		}
		pruned := raw
		if x.Updates() {
			update = grow(update, len(raw))
			if err := x.ReadUpdate(update, mask, r0, n); err != nil {
				return st, err
			}
			if _, err := prune24.PruneMask(update, update, mask, t.dt, t.cols, r0); err != nil {
				return st, err
			}
			pruned = update
		}
		if err := prune24.MaskOf(shown, pruned, t.dt, t.cols); err != nil {
			return st, prune24.OffsetRows(err, r0)
		}
		maskSum.Write(mask)
		shownSum.Write(shown)
		if !bytes.Equal(mask, shown) {
			zeroKept += differingGroups(mask, shown)
		}
		return st, fn(r0, n, pruned)
	})
	if err != nil {
		return err
	}
	t.plan.Mask = MaskDigests{SHA256: hex.EncodeToString(maskSum.Sum(nil))}
	if zeroKept > 0 {
		t.plan.Mask.WrittenSHA256, t.plan.Mask.ZeroKeptGroups = hex.EncodeToString(shownSum.Sum(nil)), zeroKept
	}
	return nil
}

// differingGroups counts the groups (mask nibbles) in which the masks a
// and b, of one length, differ.
func differingGroups(a, b []byte) int64 {
	var n int64
	for i := range a {
		if d := a[i] ^ b[i]; d != 0 {
			n += int64(min(d&0x0F, 1) + min(d&0xF0, 1))
		}
	}
	return n
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
