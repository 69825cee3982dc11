package speed

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// ErrNotPlanned is wrapped by Replan's error for a launch document or
// policy whose records are not the planner's own for the device at hand:
// another schema, element type, device or GPU, or a record that differs
// in any field from every launch the planner offers for its shape and
// token count.
var ErrNotPlanned = errors.New("not the planner's launch records for this device")

// ErrNoRecords is wrapped by Replan's error for a document that has no
// records for a shape asked for.
var ErrNoRecords = errors.New("no launch records")

// MaxRecordsFile bounds the size of a launch document or policy Replan
// reads (a Llama-3-70B document of every shape is about 2 MB).
const MaxRecordsFile = 64 << 20

// Device is what Replan checks records against: the device's limits,
// its description for the output, the GPU's name ("" for named limits,
// where a policy's GPU is not compared: its records are still checked
// against the limits), and the element type.
type Device struct {
	Limits launchplan.Limits
	Name   string
	GPU    string
	DType  checkpoint.DType
}

// Replan returns the planner's launch records for the choices that a
// launch document (LaunchesSchema, from `plan`) or a policy
// (PolicySchema, from `bench --policy`) in data makes for the given
// shapes, so that a file that came from elsewhere decides only which of
// the planner's own launches run, never their geometry. Every decode
// record must be, field for field, a launch of one of the
// launchplan.MaxCandidates plans Candidates offers for its shape and
// token count on dev (a policy's plan without a record is found by its
// name), and every shape's prefill records must equal PrefillRecords';
// the result holds the planner's records at the token counts the file
// has records for, and the prefill records where the file has them.
// A document for other limits, another GPU or element type, or with
// any record the planner would not make there wraps ErrNotPlanned; one
// that is not the JSON of either schema wraps ErrParse; one without
// records for a shape asked for wraps ErrNoRecords. file names data in
// errors. TestReplan holds every refusal.
func Replan(data []byte, file string, shapes []Shape, dev Device) (*Launches, error) {
	var head struct {
		Schema string `json:"schema"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("%s: %w: not a JSON object: %v", file, ErrParse, err)
	}
	var recs map[nk]*shapeRecords
	var err error
	switch head.Schema {
	case LaunchesSchema:
		var doc Launches
		if err := decodeStrict(data, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w: not a launch document: %v", file, ErrParse, err)
		}
		recs, err = launchesRecords(&doc, file, dev)
	case PolicySchema:
		var doc Policy
		if err := decodeStrict(data, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w: not a policy: %v", file, ErrParse, err)
		}
		recs, err = policyRecords(&doc, file, dev)
	default:
		return nil, fmt.Errorf("%s: %w: schema %q, want %s or %s (a file of another sfsurgery version?)",
			file, ErrNotPlanned, head.Schema, LaunchesSchema, PolicySchema)
	}
	if err != nil {
		return nil, err
	}
	out := &Launches{Schema: LaunchesSchema, Device: dev.Name, Limits: dev.Limits, DType: string(dev.DType), Shapes: []ShapeLaunches{}}
	for _, s := range shapes {
		r := recs[nk{s.N, s.K}]
		if r == nil {
			return nil, fmt.Errorf("%s: %w for %dx%d", file, ErrNoRecords, s.N, s.K)
		}
		sl := ShapeLaunches{Shape: s, Launches: []LaunchAt{}, Prefill: r.prefill}
		for _, m := range slices.Sorted(maps.Keys(r.decode)) {
			sl.Launches = append(sl.Launches, r.decode[m])
		}
		out.Shapes = append(out.Shapes, sl)
	}
	return out, nil
}

// nk is a weight shape.
type nk struct{ n, k int }

// shapeRecords are the planner's records that a file chose for one
// shape: decode launches by token count, and the prefill records.
type shapeRecords struct {
	decode  map[int]LaunchAt
	prefill []launchplan.PrefillRecord
}

// decodeStrict decodes one JSON value of v's type from data, refusing
// fields v does not have and anything after the value.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if err := dec.Decode(&struct{}{}); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}

// launchesRecords checks a launch document's records against dev.
func launchesRecords(doc *Launches, file string, dev Device) (map[nk]*shapeRecords, error) {
	if doc.DType != string(dev.DType) {
		return nil, fmt.Errorf("%s: %w: records for %s, the weights are %s", file, ErrNotPlanned, doc.DType, dev.DType)
	}
	if doc.Limits != dev.Limits {
		return nil, fmt.Errorf("%s: %w: planned for %s (%s), this device is %s (%s)", file, ErrNotPlanned,
			doc.Device, describeLimits(doc.Limits), dev.Name, describeLimits(dev.Limits))
	}
	recs := map[nk]*shapeRecords{}
	for i, s := range doc.Shapes {
		where := fmt.Sprintf("%s: shapes[%d] (%dx%d)", file, i, s.N, s.K)
		r := recordsOf(recs, s.N, s.K)
		for _, at := range s.Launches {
			if at.Launch == nil {
				continue // the planner's reason for none is in at.Error
			}
			got, err := replanDecode(at.Launch, at.Plan, at.M, s.N, s.K, dev, fmt.Sprintf("%s m = %d", where, at.M))
			if err != nil {
				return nil, err
			}
			if err := r.add(got, where); err != nil {
				return nil, err
			}
		}
		if err := r.setPrefill(s.Prefill, s.N, s.K, dev, where); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// policyRecords checks a policy's records of ours against dev.
func policyRecords(doc *Policy, file string, dev Device) (map[nk]*shapeRecords, error) {
	if doc.DType != string(dev.DType) {
		return nil, fmt.Errorf("%s: %w: measured for %s, the weights are %s", file, ErrNotPlanned, doc.DType, dev.DType)
	}
	if dev.GPU != "" && doc.GPU != dev.GPU {
		return nil, fmt.Errorf("%s: %w: measured on %s, this GPU is %s", file, ErrNotPlanned, doc.GPU, dev.GPU)
	}
	recs := map[nk]*shapeRecords{}
	for i, e := range doc.Entries {
		where := fmt.Sprintf("%s: entries[%d] (%dx%d)", file, i, e.N, e.K)
		r := recordsOf(recs, e.N, e.K)
		for j, rg := range e.Sparse {
			if rg.Backend != Ours {
				continue // cuSPARSELt's ranges run no record of ours
			}
			for _, pa := range rg.Plans {
				at := fmt.Sprintf("%s sparse[%d] m = %d", where, j, pa.M)
				if pa.M < rg.MinM || pa.M > rg.MaxM {
					return nil, fmt.Errorf("%s: %w: outside its range %d…%d", at, ErrNotPlanned, rg.MinM, rg.MaxM)
				}
				got, err := replanDecode(pa.Launch, pa.Plan, pa.M, e.N, e.K, dev, at)
				if err != nil {
					return nil, err
				}
				if err := r.add(got, where); err != nil {
					return nil, err
				}
			}
		}
		if err := r.setPrefill(e.Prefill, e.N, e.K, dev, where); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// recordsOf returns the records of shape n × k in recs, made empty the
// first time.
func recordsOf(recs map[nk]*shapeRecords, n, k int) *shapeRecords {
	r := recs[nk{n, k}]
	if r == nil {
		r = &shapeRecords{decode: map[int]LaunchAt{}}
		recs[nk{n, k}] = r
	}
	return r
}

// add records the launch at one token count; a second, different one for
// the same count (two entries of one shape) is refused.
func (r *shapeRecords) add(at LaunchAt, where string) error {
	if have, ok := r.decode[at.M]; ok && !reflect.DeepEqual(have, at) {
		return fmt.Errorf("%s m = %d: %w: a second, different record for this shape and m", where, at.M, ErrNotPlanned)
	}
	r.decode[at.M] = at
	return nil
}

// setPrefill checks a shape's prefill records against PrefillRecords and
// keeps the planner's; none leaves the shape without them.
func (r *shapeRecords) setPrefill(got []launchplan.PrefillRecord, n, k int, dev Device, where string) error {
	if len(got) == 0 {
		return nil
	}
	if !dev.Limits.Warpgroup {
		return fmt.Errorf("%s: %w: prefill records, and this device has no sm_90a module", where, ErrNotPlanned)
	}
	want, err := launchplan.PrefillRecords(dev.DType, n, k, dev.Limits)
	if err != nil {
		return fmt.Errorf("%s: %w: prefill records the planner has none of: %v", where, ErrNotPlanned, err)
	}
	if d := diffPrefill(got, want); d != "" {
		return fmt.Errorf("%s: %w: %s", where, ErrNotPlanned, d)
	}
	if r.prefill != nil && !reflect.DeepEqual(r.prefill, want) {
		return fmt.Errorf("%s: %w: second, different prefill records", where, ErrNotPlanned)
	}
	r.prefill = want
	return nil
}

// replanDecode returns the planner's launch at m for an n × k weight that
// equals rec field for field (rec nil: the candidate named plan), with
// its plan name, or an error naming where and the first field that
// differs from the closest candidate.
func replanDecode(rec *launchplan.Launch, plan string, m, n, k int, dev Device, where string) (LaunchAt, error) {
	if m < 1 || m > launchplan.MaxTokens {
		return LaunchAt{}, fmt.Errorf("%s: %w: m is not 1…%d", where, ErrNotPlanned, launchplan.MaxTokens)
	}
	ps, err := launchplan.Candidates(m, n, k, dev.Limits, launchplan.Options{}, launchplan.MaxCandidates)
	if err != nil {
		return LaunchAt{}, fmt.Errorf("%s: %w: the planner has no launch here: %v", where, ErrNotPlanned, err)
	}
	cands := make([]launchplan.Launch, len(ps))
	for i, p := range ps {
		if cands[i], err = p.Launch(dev.DType, m, n, k); err != nil {
			return LaunchAt{}, fmt.Errorf("%s: %w: %v", where, ErrNotPlanned, err)
		}
	}
	for i, c := range cands {
		if rec == nil && plan == ps[i].String() || rec != nil && reflect.DeepEqual(*rec, c) {
			if plan != "" && plan != ps[i].String() {
				return LaunchAt{}, fmt.Errorf("%s: %w: plan %q names another launch than its record, the planner's %q",
					where, ErrNotPlanned, plan, ps[i].String())
			}
			l := c
			return LaunchAt{M: m, Plan: ps[i].String(), Launch: &l}, nil
		}
	}
	if rec == nil {
		return LaunchAt{}, fmt.Errorf("%s: %w: plan %q is not one of the planner's %d candidates", where, ErrNotPlanned, plan, len(ps))
	}
	closest := cands[0]
	for _, c := range cands {
		if c.Entry == rec.Entry {
			closest = c
			break
		}
	}
	return LaunchAt{}, fmt.Errorf("%s: %w: %s", where, ErrNotPlanned, diffLaunch(*rec, closest, "launch"))
}

// diffLaunch names the first field in which got differs from the
// planner's want, under the path at; "" when they are equal.
func diffLaunch(got, want launchplan.Launch, at string) string {
	field := func(name string, g, w any) string {
		return fmt.Sprintf("%s.%s is %v, the planner's %v", at, name, g, w)
	}
	switch {
	case got.Module != want.Module:
		return field("module", got.Module, want.Module)
	case got.Entry != want.Entry:
		return fmt.Sprintf("%s.entry %s is not among the planner's launches (its first is %s)", at, got.Entry, want.Entry)
	case got.Grid != want.Grid:
		return field("grid", got.Grid, want.Grid)
	case got.Block != want.Block:
		return field("block", got.Block, want.Block)
	case got.Cluster != want.Cluster:
		return field("cluster", got.Cluster, want.Cluster)
	case got.SharedBytes != want.SharedBytes:
		return field("shared_bytes", got.SharedBytes, want.SharedBytes)
	case got.Cooperative != want.Cooperative:
		return field("cooperative", got.Cooperative, want.Cooperative)
	case got.Workspace.Counters != want.Workspace.Counters:
		return field("workspace.counters", got.Workspace.Counters, want.Workspace.Counters)
	case got.Workspace.Partials != want.Workspace.Partials:
		return field("workspace.partials", got.Workspace.Partials, want.Workspace.Partials)
	case len(got.Params) != len(want.Params):
		return fmt.Sprintf("%s.params has %d parameters, the planner's %d", at, len(got.Params), len(want.Params))
	}
	for i, g := range got.Params {
		if w := want.Params[i]; g != w {
			return fmt.Sprintf("%s.params[%d] is %s, the planner's %s", at, i, describeParam(g), describeParam(w))
		}
	}
	switch {
	case (got.Fallback == nil) != (want.Fallback == nil):
		return field("fallback", describeFallback(got.Fallback), describeFallback(want.Fallback))
	case got.Fallback != nil:
		return diffLaunch(*got.Fallback, *want.Fallback, at+".fallback")
	}
	return ""
}

// diffPrefill names the first field in which a shape's prefill records
// differ from the planner's; "" when they are equal.
func diffPrefill(got, want []launchplan.PrefillRecord) string {
	for i := range min(len(got), len(want)) {
		g, w := got[i], want[i]
		for _, f := range []struct {
			name string
			g, w any
		}{
			{"from", g.From, w.From}, {"to", g.To, w.To}, {"module", g.Module, w.Module}, {"entry", g.Entry, w.Entry},
			{"rows", g.Rows, w.Rows}, {"tokens", g.Tokens, w.Tokens}, {"block", g.Block, w.Block},
			{"shared_bytes", g.SharedBytes, w.SharedBytes},
		} {
			if f.g != f.w {
				return fmt.Sprintf("prefill[%d].%s is %v, the planner's %v", i, f.name, f.g, f.w)
			}
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("prefill has %d records, the planner's %d", len(got), len(want))
	}
	return ""
}

// describeParam formats a kernel parameter for an error.
func describeParam(p launchplan.Param) string {
	if p.Source == launchplan.SourceValue {
		return fmt.Sprintf("%s %s = %d", p.CType, p.Name, p.Value)
	}
	return fmt.Sprintf("%s %s from %s", p.CType, p.Name, p.Source)
}

// describeFallback formats a fallback's presence for an error.
func describeFallback(l *launchplan.Launch) string {
	if l == nil {
		return "none"
	}
	return l.Entry
}

// describeLimits formats device limits for an error.
func describeLimits(l launchplan.Limits) string {
	return fmt.Sprintf("%d SMs, %d B shared per block, %d per SM, warpgroup %v", l.SMs, l.SharedPerBlock, l.SharedPerSM, l.Warpgroup)
}
