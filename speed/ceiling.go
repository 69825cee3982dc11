package speed

import (
	"fmt"
	"time"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/kernels"
)

// Sizes of the ceiling measurements.
const (
	ceilingCopyBytes = 1 << 30 // device-to-device copy, at most
	ceilingGEMM      = 8192    // M = N = K of the dense GEMM
)

// blocker is the large copy that both measures the bandwidth and keeps
// the GPU busy while the host queues timed runs.
type blocker struct {
	src, dst *kernels.Buffer
	time     time.Duration
}

// measureCopy times a device-to-device copy of up to 1 GiB (1/16 of the
// device's memory at most) and returns the bandwidth ceiling (bytes read
// plus written per second) and the copy, kept as the timer's blocker.
func measureCopy(dev *kernels.Device, a *arena, runs int) (Ceilings, blocker, error) {
	n := min(int64(ceilingCopyBytes), dev.Info().MemBytes/16)
	src, err := a.alloc(n)
	if err != nil {
		return Ceilings{}, blocker{}, fmt.Errorf("speed: bandwidth ceiling: %w", err)
	}
	dst, err := a.alloc(n)
	if err != nil {
		return Ceilings{}, blocker{}, fmt.Errorf("speed: bandwidth ceiling: %w", err)
	}
	if err := src.Fill(0x3c); err != nil {
		return Ceilings{}, blocker{}, fmt.Errorf("speed: bandwidth ceiling: %w", err)
	}
	for range 3 {
		if err := dst.CopyFrom(src); err != nil {
			return Ceilings{}, blocker{}, fmt.Errorf("speed: bandwidth ceiling: %w", err)
		}
	}
	ts, err := dev.ElapsedEach(runs, func(int) error { return dst.CopyFrom(src) })
	if err != nil {
		return Ceilings{}, blocker{}, fmt.Errorf("speed: bandwidth ceiling: %w", err)
	}
	med := Summarize(ts).Median
	c := Ceilings{CopyBytes: n, CopyUS: us(med)}
	if med > 0 {
		c.BandwidthGBs = 2 * float64(n) / med.Seconds() / 1e9
	}
	return c, blocker{src: src, dst: dst, time: med}, nil
}

// measureGEMM times an 8192³ cuBLASLt product of type dt (f32 output, as
// every dense row), the fastest of the heuristic's first candidates, and
// fills the math ceilings of c. Without cuBLASLt it leaves them zero.
func measureGEMM(dev *kernels.Device, a *arena, tm *timer, dt checkpoint.DType, candidates int, seed uint64, c *Ceilings) error {
	const g = ceilingGEMM
	count, err := dev.DenseCandidates(dt, "", g, g, g)
	if err != nil {
		return fmt.Errorf("speed: math ceiling: %w", err)
	}
	if count == 0 {
		return nil
	}
	x, err := a.copies(randomHalves(dt, g*g, seed), 1)
	if err != nil {
		return fmt.Errorf("speed: math ceiling: %w", err)
	}
	w, err := a.copies(randomHalves(dt, g*g, seed+1), 1)
	if err != nil {
		return fmt.Errorf("speed: math ceiling: %w", err)
	}
	y, err := a.alloc(4 * g * g)
	if err != nil {
		return fmt.Errorf("speed: math ceiling: %w", err)
	}
	var best time.Duration
	for cand := range min(count, candidates) {
		s, _, err := tm.measure(1, func(int) error {
			return dev.DenseMatmulCandidate(kernels.DenseOperands{Y: y, X: x[0], W: w[0], DType: dt, M: g, N: g, K: g}, cand)
		})
		if err != nil {
			return fmt.Errorf("speed: math ceiling, candidate %d: %w", cand, err)
		}
		if best == 0 || s.Median < best {
			best = s.Median
		}
	}
	c.GEMM = fmt.Sprintf("%dx%dx%d %v, f32 output, cuBLASLt", g, g, g, dt)
	c.GEMMUS = us(best)
	c.DenseTFLOPS = TFLOPS(g, g, g, best)
	c.SparseTFLOPS = 2 * c.DenseTFLOPS
	return nil
}
