package surgery

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"

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
	align  int
	format Format
	side   side
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
// Its pass also fills in the metadata, so that P.meta costs no second
// pass over the weight (see side).
type packedSource struct{ t *target }

func (s packedSource) WriteTo(w io.Writer) (int64, error) {
	return s.t.writePrimary(w)
}

// metaSource writes P.meta in the CUTLASS reordered layout. That layout
// interleaves 32-row blocks across column pairs, so the whole tensor's
// metadata (1/16 of the weight's bytes) is assembled in memory.
type metaSource struct{ t *target }

func (s metaSource) WriteTo(w io.Writer) (int64, error) {
	return s.t.writeSide(w)
}

// compressedSource writes P.compressed of the sparse-24-bitmask format;
// its pass also fills in P.bitmask.
type compressedSource struct{ t *target }

func (s compressedSource) WriteTo(w io.Writer) (int64, error) {
	return s.t.writePrimary(w)
}

// bitmaskSource writes P.bitmask of the sparse-24-bitmask format.
type bitmaskSource struct{ t *target }

func (s bitmaskSource) WriteTo(w io.Writer) (int64, error) {
	return s.t.writeSide(w)
}

// side is the small companion tensor of a compressed target (P.meta or
// P.bitmask) and who computes it. The primary source (P.packed or
// P.compressed) fills it in during its own pass when it runs first, which
// is the writer's order; if the side source happens to start first, it
// makes its own pass instead. Either way nothing waits on a source that
// has not started, so no worker limit can deadlock.
type side struct {
	mu    sync.Mutex
	state sideState
	done  chan struct{} // closed when a primary pass that fills buf ends
	buf   []byte
}

type sideState int

const (
	sideIdle      sideState = iota // nobody has started
	sideByPrimary                  // the primary pass is filling buf
	sideReady                      // buf is complete
	sideFailed                     // the primary pass failed
	sideBySelf                     // the side source computes buf itself
)

// encode compresses one chunk of pruned rows, returning the values to
// write and the chunk's side bytes.
func (t *target) encode(n int, pruned []byte, vals, idx *[]byte) error {
	var vb, ib int
	var err error
	if t.format == FormatAmpere {
		vb, ib = prune24.AmpereSizes(t.dt, n, t.cols)
		*vals, *idx = grow(*vals, vb), grow(*idx, ib)
		err = prune24.PackAmpere(*vals, *idx, pruned, t.dt, n, t.cols)
	} else {
		vb, ib = prune24.BitmaskSizes(t.dt, n, t.cols)
		*vals, *idx = grow(*vals, vb), grow(*idx, ib)
		err = prune24.PackBitmask(*vals, *idx, pruned, t.dt, n, t.cols)
	}
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.info.Name, err)
	}
	return nil
}

// place copies a chunk's side bytes (rows r0..r0+n) into the whole
// tensor's. A bitmask chunk is contiguous. The ampere layout of a chunk
// of whole row blocks is the full layout restricted to those rows: for
// column pair p, the chunk's 32-bit words [p·n, (p+1)·n) land at
// [p·rows + r0, p·rows + r0 + n).
func (t *target) place(all, chunk []byte, r0, n int) {
	if t.format != FormatAmpere {
		copy(all[len(chunk)/n*r0:], chunk)
		return
	}
	for p := 0; p < len(chunk)/(4*n); p++ {
		copy(all[4*(p*t.rows+r0):], chunk[4*p*n:4*(p+1)*n])
	}
}

// sideSize is the byte size of the whole side tensor.
func (t *target) sideSize() int {
	if t.format == FormatAmpere {
		_, mb := prune24.AmpereSizes(t.dt, t.rows, t.cols)
		return mb
	}
	_, mb := prune24.BitmaskSizes(t.dt, t.rows, t.cols)
	return mb
}

// writePrimary writes the compressed values, filling in the side tensor
// when the side source has not started its own pass.
func (t *target) writePrimary(w io.Writer) (written int64, err error) {
	t.side.mu.Lock()
	fill := t.side.state == sideIdle
	if fill {
		t.side.state = sideByPrimary
		t.side.buf = make([]byte, t.sideSize())
	}
	t.side.mu.Unlock()
	if fill {
		defer func() {
			t.side.mu.Lock()
			t.side.state = sideReady
			if err != nil {
				t.side.state, t.side.buf = sideFailed, nil
			}
			close(t.side.done)
			t.side.mu.Unlock()
		}()
	}
	var vals, idx []byte
	err = t.forEachChunk(true, func(r0, n int, pruned []byte) error {
		if err := t.encode(n, pruned, &vals, &idx); err != nil {
			return err
		}
		if fill {
			t.place(t.side.buf, idx, r0, n)
		}
		k, err := w.Write(vals)
		written += int64(k)
		return err
	})
	return written, err
}

// writeSide writes the side tensor: the primary pass's result, or its
// own pass's when it started first.
func (t *target) writeSide(w io.Writer) (int64, error) {
	t.side.mu.Lock()
	state := t.side.state
	if state == sideIdle {
		t.side.state = sideBySelf
	}
	t.side.mu.Unlock()
	var all []byte
	switch state {
	case sideIdle:
		all = make([]byte, t.sideSize())
		var vals, idx []byte
		err := t.forEachChunk(false, func(r0, n int, pruned []byte) error {
			if err := t.encode(n, pruned, &vals, &idx); err != nil {
				return err
			}
			t.place(all, idx, r0, n)
			return nil
		})
		if err != nil {
			return 0, err
		}
	default:
		<-t.side.done
		t.side.mu.Lock()
		all, state = t.side.buf, t.side.state
		t.side.buf = nil
		t.side.mu.Unlock()
		if state != sideReady {
			return 0, fmt.Errorf("tensor %q: the pass over its values failed", t.info.Name)
		}
	}
	k, err := w.Write(all)
	return int64(k), err
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
