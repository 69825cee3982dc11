package speed

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/prune24"
)

// randomHalves returns count random 16-bit values of type dt as
// little-endian bytes: sign, mantissa and an exponent that keeps |v| in
// [0.25, 2), so no value is zero, subnormal, infinite or NaN. It fills
// chunks in parallel, each from its own generator seeded by seed.
func randomHalves(dt checkpoint.DType, count int, seed uint64) []byte {
	out := make([]byte, 2*count)
	const chunk = 1 << 20 // values per goroutine task
	tasks := (count + chunk - 1) / chunk
	parallel(tasks, func(t int) {
		rng := rand.New(rand.NewPCG(seed, uint64(t)))
		lo, hi := t*chunk, min(count, (t+1)*chunk)
		for i := lo; i < hi; i++ {
			binary.LittleEndian.PutUint16(out[2*i:], randomHalf(dt, rng.Uint32()))
		}
	})
	return out
}

// randomHalf maps 32 random bits to a value of dt with |v| in [0.25, 2).
func randomHalf(dt checkpoint.DType, r uint32) uint16 {
	sign := uint16(r>>31) << 15
	if dt == checkpoint.F16 {
		// Exponent field 13..15 (bias 15): 2^-2 … 2^0, 10 mantissa bits.
		return sign | uint16(13+(r>>10)%3)<<10 | uint16(r&0x3ff)
	}
	// Exponent field 125..127 (bias 127): 2^-2 … 2^0, 7 mantissa bits.
	return sign | uint16(125+(r>>7)%3)<<7 | uint16(r&0x7f)
}

// parallel runs fn(0) … fn(n-1) on up to GOMAXPROCS goroutines.
func parallel(n int, fn func(i int)) {
	workers := min(n, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				fn(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// prunedWeight is one weight of a shape on the host: the random dense
// original, its 2:4 pruned form and that form packed as sfsurgery stores
// it (PyTorch's CUTLASS layout).
type prunedWeight struct {
	dense, pruned, packed, meta []byte
}

// prune24DType returns the element type prune24 takes for the kernels' dt.
func prune24DType(dt checkpoint.DType) checkpoint.DType {
	if dt == checkpoint.F16 {
		return checkpoint.F16
	}
	return checkpoint.BF16
}

// newPrunedWeight draws a random n×k weight and prunes it to 2:4 along k
// (rows in parallel); it packs the result when the shape allows the
// ampere layout (n % 32 == 0, k % 64 == 0), else packed and meta are nil.
func newPrunedWeight(dt checkpoint.DType, n, k int, seed uint64) (*prunedWeight, error) {
	pdt := prune24DType(dt)
	w := &prunedWeight{dense: randomHalves(dt, n*k, seed)}
	w.pruned = make([]byte, len(w.dense))
	if k%4 != 0 {
		return nil, fmt.Errorf("speed: %dx%d: K must be a multiple of 4 for 2:4", n, k)
	}
	const rowsPerTask = 256
	tasks := (n + rowsPerTask - 1) / rowsPerTask
	errs := make([]error, tasks)
	parallel(tasks, func(t int) {
		r0, r1 := t*rowsPerTask, min(n, (t+1)*rowsPerTask)
		_, errs[t] = prune24.Prune(w.pruned[2*r0*k:2*r1*k], w.dense[2*r0*k:2*r1*k], pdt, k, r0, prune24.Rule24)
	})
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("speed: pruning %dx%d: %w", n, k, err)
		}
	}
	if n%32 != 0 || k%64 != 0 {
		return w, nil
	}
	pb, mb := prune24.AmpereSizes(pdt, n, k)
	w.packed, w.meta = make([]byte, pb), make([]byte, mb)
	if err := prune24.PackAmpere(w.packed, w.meta, w.pruned, pdt, n, k); err != nil {
		return nil, fmt.Errorf("speed: packing %dx%d: %w", n, k, err)
	}
	return w, nil
}
