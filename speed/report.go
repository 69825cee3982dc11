package speed

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// Schema versions of the JSON documents this package writes. A policy of
// version 2 lists, in each range of ours, a plan (and, where the report
// holds the device's limits, its launch record) for every M up to 64;
// version 1 listed only the measured winners.
const (
	ReportSchema = "sfsurgery-bench/1"
	PolicySchema = "sfsurgery-policy/2"
)

// Report is the outcome of a sweep, as `sfsurgery bench --json` prints it.
type Report struct {
	Schema  string    `json:"schema"`
	Tool    string    `json:"tool"`
	Date    time.Time `json:"date"`
	Command string    `json:"command,omitempty"`
	DType   string    `json:"dtype"`
	Env     Env       `json:"env"`
	// Ceilings are measured in the same run as the rows.
	Ceilings Ceilings `json:"ceilings"`
	Method   Method   `json:"method"`
	Shapes   []Shape  `json:"shapes"`
	Ms       []int    `json:"m"`
	// Rows holds one row per shape, M and backend: the dense baseline
	// first, then the sparse backends.
	Rows      []Row      `json:"rows"`
	Estimates []Estimate `json:"estimates,omitempty"`
	// Notes says what could not be measured and why (no cuSPARSELt, a
	// shape our kernel does not take, a failed check).
	Notes []string `json:"notes,omitempty"`
}

// Env describes the GPU and the libraries measured.
type Env struct {
	GPU          string `json:"gpu"`
	Capability   string `json:"capability"` // e.g. "9.0"
	SMs          int    `json:"sms"`
	MemBytes     int64  `json:"mem_bytes"`
	L2Bytes      int64  `json:"l2_bytes"`
	Driver       string `json:"driver"` // CUDA driver API version, e.g. "13.0"
	DenseBackend string `json:"dense_backend"`
	CublasLt     int    `json:"cublaslt,omitempty"` // e.g. 130100
	// SparseBackend is what our sparse product runs (package kernels'
	// Device.SparseBackend); empty in reports from before it was recorded.
	SparseBackend string `json:"sparse_backend,omitempty"`
	// Limits are the device properties our decode kernels were planned
	// with (kernels.Device.Limits), from which the policy builds launch
	// records; nil in reports from before they were recorded.
	Limits *launchplan.Limits `json:"limits,omitempty"`
	// CuSPARSELt is the library's version ("0.8.0"), empty when it was
	// not found; CuSPARSELtPath the file loaded.
	CuSPARSELt     string `json:"cusparselt,omitempty"`
	CuSPARSELtPath string `json:"cusparselt_path,omitempty"`
}

// Method records how the rows were timed.
type Method struct {
	Warmup int `json:"warmup"`
	Runs   int `json:"runs"`
	// Statistic is "median": each row's time is the median of Runs
	// per-iteration CUDA event pairs.
	Statistic string `json:"statistic"`
	// GraphCalls is the most runs a timed CUDA-graph replay holds (rows
	// whose run takes under a millisecond; their Batch says how many):
	// each pair of events then times a replay, and a run's time is the
	// replay's over its runs. 0 (reports from before graphs, or
	// --graph-calls 1): each run timed on its own.
	GraphCalls int `json:"graph_calls,omitempty"`
	// RotateBytes is the least number of bytes the rotated input copies
	// of one row add up to (twice the L2 cache).
	RotateBytes int64 `json:"rotate_bytes"`
	// DenseCandidates is the most cuBLASLt heuristic candidates timed per
	// row; the fastest is the dense baseline.
	DenseCandidates int `json:"dense_candidates"`
	// SparseCandidates is the most launch plans of our kernel timed per
	// row (at decode sizes); the fastest is its row. Absent (0) in
	// reports from before it existed, which timed the planner's choice.
	SparseCandidates int `json:"sparse_candidates,omitempty"`
	// Output is the element type dense and ours write y in: "" (float32,
	// and reports from before it existed) or the report's DType, as a
	// model's projections write it. cuSPARSELt writes DType either way.
	Output string `json:"output,omitempty"`
	// MinSpeedup is the policy's threshold (1.05: sparse must win by 5%).
	MinSpeedup float64 `json:"min_speedup"`
	// GEMMShare is the fraction of step time spent in these products,
	// assumed by the end-to-end estimate.
	GEMMShare float64 `json:"gemm_share"`
}

// Candidate is one launch plan of ours that a row timed.
type Candidate struct {
	Plan string `json:"plan"`
	// MedianUS is its median in µs; 0 when its result was wrong or a
	// call failed (the row's Error says which).
	MedianUS float64 `json:"median_us"`
}

// Row is one measured product: a shape, a token count M and a backend.
type Row struct {
	Model   string   `json:"model,omitempty"`
	Ops     []string `json:"ops,omitempty"`
	N       int      `json:"n"`
	K       int      `json:"k"`
	M       int      `json:"m"`
	Backend string   `json:"backend"`
	// Detail says which variant was timed: the cuBLASLt candidate, the
	// rows cuSPARSELt computed when it pads M, its output type.
	Detail string `json:"detail,omitempty"`
	// Plan is the launch plan of ours that was fastest, as
	// kernels.Device.SparseCandidates names it (an engine runs it with
	// SparseMatmulCandidate); empty for the other backends.
	Plan string `json:"plan,omitempty"`
	// DefaultUS is, for ours when its fastest plan is not the planner's
	// own (the plan SparseMatmul runs, candidate 1), that plan's median in
	// µs: what a caller that does not pick a plan gets. 0 otherwise.
	DefaultUS float64 `json:"default_us,omitempty"`
	// Candidates lists, for ours, every launch plan timed, in the
	// planner's order (the first is SparseMatmul's own), with its median:
	// what the planner's ranking is checked against.
	Candidates []Candidate `json:"candidates,omitempty"`
	// Error is set when the row has no time: the result was wrong, the
	// backend does not take the shape, or a call failed.
	Error    string  `json:"error,omitempty"`
	MedianUS float64 `json:"median_us,omitempty"`
	MinUS    float64 `json:"min_us,omitempty"`
	MaxUS    float64 `json:"max_us,omitempty"`
	Runs     int     `json:"runs,omitempty"`
	// Batch is the runs each timed CUDA-graph replay held (the times are
	// per run); 0 or 1: each run timed on its own between CUDA events.
	Batch int `json:"batch,omitempty"`
	// TFLOPS is the dense-equivalent rate 2·M·N·K / median, for every
	// backend.
	TFLOPS float64 `json:"tflops,omitempty"`
	// Speedup is the dense baseline's median over this row's (1 for the
	// baseline itself).
	Speedup float64 `json:"speedup,omitempty"`
	// Bytes and FloorUS are the row's Cost; OfFloor = floor / median is
	// the fraction of this GPU's ceiling the row reached, Bound the
	// ceiling that sets the floor ("memory" or "math").
	Bytes   int64   `json:"bytes,omitempty"`
	FloorUS float64 `json:"floor_us,omitempty"`
	Bound   string  `json:"bound,omitempty"`
	OfFloor float64 `json:"of_floor,omitempty"`
	// RelErr is the relative Frobenius error of the checked result: a
	// sparse backend against the dense product of the same pruned weight,
	// the dense baseline against float64 on the CPU (sampled).
	RelErr float64 `json:"rel_err"`
	// HostBound is set when the GPU may have waited for the host during
	// the timed runs (the time is then an upper bound).
	HostBound bool `json:"host_bound,omitempty"`
}

// Timed reports whether the row has a time.
func (r Row) Timed() bool { return r.Error == "" && r.MedianUS > 0 }

// shapeKey returns the key of the row's shape.
func (r Row) shapeKey() shapeKey { return shapeKey{r.Model, r.N, r.K} }

// ErrReport is wrapped when a saved report cannot be read back.
var ErrReport = errors.New("speed: not a bench report")

// ReadReport reads a report written by `sfsurgery bench --json`, so its
// Markdown, plot and policy can be made again without a GPU.
func ReadReport(r io.Reader) (*Report, error) {
	var rep Report
	dec := json.NewDecoder(r)
	if err := dec.Decode(&rep); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReport, err)
	}
	// One document: Decode stops after the first value and would take a
	// report with anything after it (a log line appended to the file).
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the report at byte %d", ErrReport, dec.InputOffset())
	}
	if rep.Schema != ReportSchema {
		return nil, fmt.Errorf("%w: schema %q, want %q", ErrReport, rep.Schema, ReportSchema)
	}
	return &rep, nil
}
