package speed

import (
	"errors"
	"fmt"

	"github.com/sfsurgery/sfsurgery/kernels"
)

// shapeBufs are one shape's weights on the device, in rotation copies.
type shapeBufs struct {
	dense        []*kernels.Buffer // the unpruned random weight, timed by dense
	pruned       *kernels.Buffer   // its 2:4 form: the reference and cuSPARSELt's source
	packed, meta []*kernels.Buffer // ours; nil when the shape does not fit our kernel
	lt           []*kernels.Buffer // cuSPARSELt's compressed form; nil without the library
	ltBytes      int64
	copies       int
	host         *prunedWeight
	x            []byte // host activations for the largest M
}

// shape measures one shape at every M. Its buffers are freed before it
// returns.
func (s *sweeper) shape(index int, sh Shape) (err error) {
	left := len(s.opt.Ms)
	defer func() {
		for ; left > 0; left-- {
			s.progress(sh.Label() + " (skipped)")
		}
	}()
	a := &arena{dev: s.dev}
	defer func() { err = errors.Join(err, a.free()) }()
	b, err := s.prepare(a, index, sh)
	if err != nil {
		return err
	}
	if b.packed == nil {
		s.notef("%s: our kernel needs N %% 32 == 0 and K %% 64 == 0; not measured", sh.Label())
	}
	for _, m := range s.opt.Ms {
		if err := s.ctx.Err(); err != nil {
			return err
		}
		if err := s.row(sh, b, m); err != nil {
			return fmt.Errorf("M=%d: %w", m, err)
		}
		left--
		s.progress(fmt.Sprintf("%s M=%d", sh.Label(), m))
	}
	return nil
}

// prepare draws, prunes and uploads a shape's weight in every form,
// with enough rotation copies that the smallest form's set exceeds the
// rotation size.
func (s *sweeper) prepare(a *arena, index int, sh Shape) (*shapeBufs, error) {
	dt, n, k := s.opt.DType, sh.N, sh.K
	seed := s.opt.Seed + uint64(index)<<20
	host, err := newPrunedWeight(dt, n, k, seed)
	if err != nil {
		return nil, err
	}
	b := &shapeBufs{host: host}
	smallest := WeightBytes(Dense, n, k, 0)
	if host.packed != nil {
		smallest = min(smallest, WeightBytes(Ours, n, k, 0))
	}
	if s.lt != nil {
		if b.ltBytes, err = s.lt.CompressedSize(dt, n, k); err != nil {
			s.notef("%s: cuSPARSELt CompressedSize: %v; cuSPARSELt not measured", sh.Label(), err)
		} else {
			smallest = min(smallest, b.ltBytes)
		}
	}
	b.copies = s.copiesFor(smallest)
	if b.dense, err = a.copies(host.dense, b.copies); err != nil {
		return nil, fmt.Errorf("dense weight: %w", err)
	}
	pr, err := a.copies(host.pruned, 1)
	if err != nil {
		return nil, fmt.Errorf("pruned weight: %w", err)
	}
	b.pruned = pr[0]
	if host.packed != nil {
		if b.packed, err = a.copies(host.packed, b.copies); err != nil {
			return nil, fmt.Errorf("packed weight: %w", err)
		}
		if b.meta, err = a.copies(host.meta, b.copies); err != nil {
			return nil, fmt.Errorf("meta: %w", err)
		}
	}
	if s.lt != nil && b.ltBytes > 0 {
		if err := s.compressLt(a, b, sh); err != nil {
			s.notef("%s: cuSPARSELt compression failed: %v; cuSPARSELt not measured", sh.Label(), err)
			b.lt = nil
		}
	}
	rows := roundUp(s.opt.Ms[len(s.opt.Ms)-1], 16)
	b.x = randomHalves(dt, rows*k, seed+1<<19)
	return b, nil
}

// compressLt compresses the pruned weight with cuSPARSELt into every
// rotation copy.
func (s *sweeper) compressLt(a *arena, b *shapeBufs, sh Shape) error {
	first, err := a.alloc(b.ltBytes)
	if err != nil {
		return err
	}
	if err := s.lt.Compress(first, b.pruned, s.opt.DType, sh.N, sh.K); err != nil {
		return err
	}
	b.lt = []*kernels.Buffer{first}
	for len(b.lt) < b.copies {
		c, err := a.alloc(b.ltBytes)
		if err != nil {
			return err
		}
		if err := c.CopyFrom(first); err != nil {
			return err
		}
		b.lt = append(b.lt, c)
	}
	return nil
}
