package speed

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// LaunchesSchema identifies the JSON of a [Launches] document.
const LaunchesSchema = "sfsurgery-launches/1"

// Launches is the launch contract of a model's shapes on one device: for
// every shape and token count M, the launch record of the decode kernel
// that SparseMatmul runs there (launchplan.Choose's plan, as a
// launchplan.Launch), and on sm_90a the prefill kernel's records for every
// M above the decode kernels', for an engine that loads the same PTX to
// execute without a planner of its own. docs/launch.md describes the
// records.
type Launches struct {
	// Schema is LaunchesSchema; Tool the sfsurgery that planned.
	Schema string `json:"schema"`
	Tool   string `json:"tool"`
	// Device names what the plans were made for: the GPU at hand, or a
	// named set of limits (launchplan.KnownLimits).
	Device string `json:"device"`
	// Limits are the device properties planned with; DType the element
	// type of the activations.
	Limits launchplan.Limits `json:"limits"`
	DType  string            `json:"dtype"`
	// Shapes are the launches of each shape, in the order given.
	Shapes []ShapeLaunches `json:"shapes"`
}

// ShapeLaunches are the launches of one shape.
type ShapeLaunches struct {
	Shape
	// Launches are one per token count, in the order given.
	Launches []LaunchAt `json:"launches"`
	// Prefill are the prefill kernel's records
	// (launchplan.PrefillRecords) where the device runs it: ranges of M
	// from launchplan.MaxTokens+1 up, the last serving every M above it.
	Prefill []launchplan.PrefillRecord `json:"prefill,omitempty"`
}

// LaunchAt is the launch at one token count M: a record, or why there is
// none (the shape fails the decode kernels' guards).
type LaunchAt struct {
	// M is the token count; Plan the plan's name and Launch its record,
	// or Error why there is none.
	M      int                `json:"m"`
	Plan   string             `json:"plan,omitempty"`
	Launch *launchplan.Launch `json:"launch,omitempty"`
	Error  string             `json:"error,omitempty"`
}

// ErrTokensOver is returned by PlanLaunches for a token count above
// launchplan.MaxTokens, which the prefill (or tiled) kernel serves
// without a record.
var ErrTokensOver = errors.New("no launch record above the decode kernels' tokens")

// PlanLaunches plans every shape at every M in ms (each at most
// launchplan.MaxTokens) for element type dt on a device with limits lim,
// described as device.
func PlanLaunches(shapes []Shape, ms []int, dt checkpoint.DType, lim launchplan.Limits, device string) (*Launches, error) {
	for _, m := range ms {
		if m > launchplan.MaxTokens {
			return nil, fmt.Errorf("%w: M = %d is above %d, where SparseMatmul runs the prefill or tiled kernel", ErrTokensOver, m, launchplan.MaxTokens)
		}
	}
	out := &Launches{Schema: LaunchesSchema, Device: device, Limits: lim, DType: string(dt), Shapes: []ShapeLaunches{}}
	for _, s := range shapes {
		sl := ShapeLaunches{Shape: s, Launches: []LaunchAt{}}
		for _, m := range ms {
			at := LaunchAt{M: m}
			p, err := launchplan.Choose(m, s.N, s.K, lim, launchplan.Options{})
			var l launchplan.Launch
			if err == nil {
				l, err = p.Launch(dt, m, s.N, s.K)
			}
			if err != nil {
				at.Error = err.Error()
			} else {
				at.Plan, at.Launch = p.String(), &l
			}
			sl.Launches = append(sl.Launches, at)
		}
		sl.Prefill = prefillRecords(dt, s.N, s.K, lim)
		out.Shapes = append(out.Shapes, sl)
	}
	return out, nil
}

// WriteText writes l as a table, one launch a line.
func (l *Launches) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "device: %s (%d SMs, %d bytes of shared memory per block, warpgroup form %v), %s\n\n",
		l.Device, l.Limits.SMs, l.Limits.SharedPerBlock, l.Limits.Warpgroup, l.DType)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHAPE\tM\tENTRY\tGRID\tBLOCK\tCLUSTER\tSHARED\tCOOP\tWORKSPACE")
	for _, s := range l.Shapes {
		name := fmt.Sprintf("%s %s %dx%d", s.Model, strings.Join(s.Ops, ","), s.N, s.K)
		for _, at := range s.Launches {
			if at.Launch == nil {
				fmt.Fprintf(tw, "%s\t%d\t-\t%s\n", name, at.M, at.Error)
				continue
			}
			r := at.Launch
			fmt.Fprintf(tw, "%s\t%d\t%s\t%v\t%v\t%v\t%d\t%v\t%d\n", name, at.M, r.Entry, r.Grid, r.Block, r.Cluster,
				r.SharedBytes, r.Cooperative, r.Workspace.Bytes())
		}
		for i, r := range s.Prefill {
			to := fmt.Sprint(r.To)
			if i == len(s.Prefill)-1 {
				to = "" // the last range serves every M above
			}
			fmt.Fprintf(tw, "%s\t%d-%s\t%s\tmin(tiles, SMs)\t[%d 1 1]\t-\t%d\tfalse\t0\n", name, r.From, to, r.Entry,
				r.Block, r.SharedBytes)
		}
	}
	return tw.Flush()
}

// prefillRecords returns the prefill kernel's records of an n × k weight,
// none where the device has no sm_90a module or the kernel cannot take
// the shape (every refusal of launchplan.PrefillRecords is one of the
// two; the decode records of the shape say why).
func prefillRecords(dt checkpoint.DType, n, k int, lim launchplan.Limits) []launchplan.PrefillRecord {
	if !lim.Warpgroup {
		return nil
	}
	recs, err := launchplan.PrefillRecords(dt, n, k, lim)
	if err != nil {
		return nil
	}
	return recs
}
