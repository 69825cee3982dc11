package speed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/kernels"
)

// DefaultMs are the token counts of a sweep: decode (1, 16, 64), between
// (256) and prefill (1024, 4096, 16384).
func DefaultMs() []int { return []int{1, 16, 64, 256, 1024, 4096, 16384} }

// Options control [Run].
type Options struct {
	Ms              []int            // token counts; DefaultMs when empty
	DType           checkpoint.DType // BF16 or F16
	Warmup, Runs    int              // per row; DefaultWarmup, DefaultRuns when 0 (Runs at least 20)
	DenseCandidates int              // cuBLASLt candidates timed per row; 4 when 0
	// SparseCandidates is how many of our kernel's launch plans are
	// timed per row (kernels.Device.SparseCandidates); 8 when 0.
	SparseCandidates int
	// GraphCalls is the most runs of a row captured into one CUDA graph
	// and timed as one replay (rows whose run takes under a millisecond):
	// DefaultGraphCalls when 0; 1 times every run on its own.
	GraphCalls int
	MinSpeedup float64 // the policy's threshold; DefaultMinSpeedup when 0
	GEMMShare  float64 // the estimate's share of step time; DefaultGEMMShare when 0
	Seed       uint64  // of the random weights and activations
	NoSparseLt bool    // leave cuSPARSELt out even when it is found
	// Output is the element type dense and ours write y in: float32 (the
	// zero value, or checkpoint.F32) or DType (as a model's projections
	// write it); cuSPARSELt writes DType either way.
	Output        checkpoint.DType
	Tool, Command string // recorded in the report
	// Progress, when set, is called after each shape and M.
	Progress func(done, total int, what string)
	// Notef, when set, receives each note as it is made.
	Notef func(format string, args ...any)
}

// withDefaults fills the zero fields of opt.
func (opt Options) withDefaults() Options {
	if len(opt.Ms) == 0 {
		opt.Ms = DefaultMs()
	}
	opt.Ms = slices.Clone(opt.Ms)
	slices.Sort(opt.Ms)
	opt.Ms = slices.Compact(opt.Ms)
	if opt.DType == "" {
		opt.DType = checkpoint.BF16
	}
	if opt.Output == "" {
		opt.Output = checkpoint.F32
	}
	if opt.Warmup <= 0 {
		opt.Warmup = DefaultWarmup
	}
	if opt.Runs <= 0 {
		opt.Runs = DefaultRuns
	}
	opt.Runs = max(opt.Runs, minRuns)
	if opt.DenseCandidates <= 0 {
		opt.DenseCandidates = 4
	}
	if opt.SparseCandidates <= 0 {
		opt.SparseCandidates = 8
	}
	if opt.GraphCalls <= 0 {
		opt.GraphCalls = DefaultGraphCalls
	}
	if opt.MinSpeedup <= 0 {
		opt.MinSpeedup = DefaultMinSpeedup
	}
	if opt.GEMMShare <= 0 {
		opt.GEMMShare = DefaultGEMMShare
	}
	return opt
}

// maxCopies bounds the rotation copies of one operand.
const maxCopies = 256

// sweeper holds the state of one Run.
type sweeper struct {
	ctx   context.Context
	dev   *kernels.Device
	lt    *kernels.SparseLt // nil without cuSPARSELt
	opt   Options
	rep   *Report
	tm    *timer
	rot   int64 // bytes a row's rotation set must exceed
	hasLt bool  // DenseMatmul runs cuBLASLt
	done  int
}

// Run measures every shape at every M on dev and returns the report with
// the end-to-end estimates. It measures the ceilings first. Without
// cuSPARSELt it says so in the notes and measures the rest; a shape or
// row that fails is recorded as such and the sweep goes on. It returns an
// error only when nothing can be measured (the ceilings fail) or ctx is
// cancelled.
func Run(ctx context.Context, dev *kernels.Device, shapes []Shape, opt Options) (*Report, error) {
	opt = opt.withDefaults()
	if len(shapes) == 0 {
		return nil, fmt.Errorf("%w: no shapes to measure", ErrShape)
	}
	if opt.Output != checkpoint.F32 && opt.Output != opt.DType {
		return nil, fmt.Errorf("%w: output %v: f32 or the data type %v", ErrParse, opt.Output, opt.DType)
	}
	s := &sweeper{ctx: ctx, dev: dev, opt: opt}
	s.rep = &Report{Schema: ReportSchema, Tool: opt.Tool, Date: time.Now().UTC(), Command: opt.Command,
		DType: string(opt.DType), Shapes: shapes, Ms: opt.Ms,
		Method: Method{Warmup: opt.Warmup, Runs: opt.Runs, Statistic: "median", DenseCandidates: opt.DenseCandidates,
			SparseCandidates: opt.SparseCandidates, GraphCalls: opt.GraphCalls,
			MinSpeedup: opt.MinSpeedup, GEMMShare: opt.GEMMShare}}
	if opt.Output == opt.DType {
		s.rep.Method.Output = string(opt.DType)
	}
	if err := s.describe(); err != nil {
		return nil, err
	}
	switch {
	case opt.NoSparseLt:
		s.notef("cuSPARSELt left out (--no-cusparselt)")
	case opt.DType == checkpoint.F16:
		// On an H200 with cuSPARSELt 0.8.0 the F16 algorithm search failed
		// with an illegal instruction, which poisons the CUDA context and
		// would end the sweep.
		s.notef("cuSPARSELt not measured for F16: its algorithm search failed with an illegal instruction " +
			"on the H200 (0.8.0) and would poison the context")
	default:
		lt, err := dev.OpenSparseLt()
		switch {
		case errors.Is(err, kernels.ErrNoSparseLt):
			s.notef("cuSPARSELt not measured: %v", err)
		case err != nil:
			return nil, err
		default:
			s.lt = lt
			defer lt.Close()
			s.rep.Env.CuSPARSELt = versionString(lt.Version())
			s.rep.Env.CuSPARSELtPath = lt.Path()
		}
	}
	base := &arena{dev: dev}
	defer base.free()
	if err := s.ceilings(base); err != nil {
		return nil, err
	}
	for i, sh := range shapes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := s.shape(i, sh); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			s.notef("%s: %v", sh.Label(), err)
		}
	}
	s.rep.Estimates = Estimates(shapes, s.rep.Rows, s.rep.Policy().Entries, opt.GEMMShare)
	return s.rep, nil
}

// versionString formats a cuSPARSELt version number: 800 → "0.8.0".
func versionString(v int) string { return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100) }

// notef records a note.
func (s *sweeper) notef(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.rep.Notes = append(s.rep.Notes, msg)
	if s.opt.Notef != nil {
		s.opt.Notef("%s", msg)
	}
}

// describe fills the report's Env and the rotation size.
func (s *sweeper) describe() error {
	info := s.dev.Info()
	l2, err := s.dev.L2CacheBytes()
	if err != nil {
		return err
	}
	ver, _ := s.dev.CublasLtVersion()
	s.hasLt = ver != 0
	s.rep.Env = Env{GPU: info.Name, Capability: fmt.Sprintf("%d.%d", info.Major, info.Minor), SMs: info.SMs,
		MemBytes: info.MemBytes, L2Bytes: l2, Driver: fmt.Sprintf("%d.%d", info.Driver/1000, info.Driver%1000/10),
		DenseBackend: s.dev.DenseBackend(), CublasLt: ver, SparseBackend: s.dev.SparseBackend()}
	lim := s.dev.Limits()
	s.rep.Env.Limits = &lim
	if !s.hasLt {
		s.notef("dense baseline is the package's own kernel, not cuBLASLt (%s): speedups overstate what an engine gains",
			s.dev.DenseBackend())
		if s.opt.Output == s.opt.DType {
			s.notef("no dense rows with y of %v: the package's own dense kernel writes float32 (--out-dtype f32 measures it)", s.opt.DType)
		}
	}
	s.rot = 2 * max(l2, 1<<20)
	s.rep.Method.RotateBytes = s.rot
	return nil
}

// ceilings measures the copy bandwidth and the dense GEMM rate, and sets
// up the timer.
func (s *sweeper) ceilings(a *arena) error {
	c, blk, err := measureCopy(s.dev, a, s.opt.Runs)
	if err != nil {
		return err
	}
	s.tm = newTimer(s.dev, blk.src, blk.dst, blk.time, s.opt.Warmup, s.opt.Runs, s.opt.GraphCalls)
	if err := measureGEMM(s.dev, a, s.tm, s.opt.DType, s.opt.DenseCandidates, s.opt.Seed+1<<40, &c); err != nil {
		return err
	}
	s.rep.Ceilings = c
	return nil
}

// progress reports one more step.
func (s *sweeper) progress(what string) {
	s.done++
	if s.opt.Progress != nil {
		s.opt.Progress(s.done, len(s.rep.Shapes)*len(s.opt.Ms), what)
	}
}

// copiesFor returns how many rotation copies of an operand set of
// perCopy bytes exceed the rotation size.
func (s *sweeper) copiesFor(perCopy int64) int {
	if perCopy <= 0 {
		return 1
	}
	return int(min(max((s.rot+perCopy-1)/perCopy, 1), maxCopies))
}

// roundUp rounds m up to a multiple of a.
func roundUp(m, a int) int { return (m + a - 1) / a * a }
