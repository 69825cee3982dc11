package format

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// MetadataKey is the __metadata__ key under which every shard written by
// sfsurgery carries its [Manifest] as JSON.
const MetadataKey = "sfsurgery"

// RuleDescription states the selection rule recorded in manifests.
const RuleDescription = "magnitude: keep the 2 of largest |w| in each group of 4 consecutive weights along the input dimension; ties to the lower index; pruned and -0.0 written as +0.0"

// ErrNoManifest is returned by ReadManifest for a checkpoint that
// sfsurgery did not write.
var ErrNoManifest = errors.New("no sfsurgery manifest")

// Manifest records what prune did, in every output shard's __metadata__.
// It holds no time stamps or paths, so identical work gives identical
// bytes.
type Manifest struct {
	Tool    string `json:"tool"`
	Version string `json:"version"`
	Format  Format `json:"format"`
	Rule    string `json:"rule"`
	// Method is the calibrated method whose decisions chose the kept
	// weights (wanda, ria, sparsegpt); empty for the magnitude rule, so
	// that a magnitude prune's manifest is what it always was.
	Method Method `json:"method,omitempty"`
	// Targets maps each pruned weight name (the original P.weight name)
	// whose output lies in this shard to its sparsity pattern, "2:4" or
	// "1:2" (F32 in the ampere format, whose hardware form is 1:2).
	Targets map[string]string `json:"targets"`
}

// Encode returns the manifest as compact JSON with sorted keys, as it is
// stored under MetadataKey.
func (m *Manifest) Encode() string {
	b, err := json.Marshal(m)
	if err != nil {
		// Marshalling strings and maps of strings cannot fail.
		return "{}"
	}
	return string(b)
}

// ReadManifest merges the manifests of all shards of ck. It fails with
// ErrNoManifest when no shard has one, and when shards disagree on the
// format, tool version or method.
func ReadManifest(ck *checkpoint.Checkpoint) (*Manifest, error) {
	var out *Manifest
	for _, s := range ck.Shards {
		raw, ok := s.Metadata[MetadataKey]
		if !ok {
			continue
		}
		var m Manifest
		dec := json.NewDecoder(strings.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("%s: __metadata__[%q]: %w", s.Path(), MetadataKey, err)
		}
		if out == nil {
			out = &m
			if out.Targets == nil {
				out.Targets = map[string]string{}
			}
			continue
		}
		if m.Format != out.Format || m.Version != out.Version || m.Method != out.Method {
			return nil, fmt.Errorf("%s: manifest says format %q version %q method %q, other shards %q %q %q",
				s.Path(), m.Format, m.Version, m.Method.OrMagnitude(), out.Format, out.Version, out.Method.OrMagnitude())
		}
		for k, v := range m.Targets {
			out.Targets[k] = v
		}
	}
	if out == nil {
		return nil, ErrNoManifest
	}
	return out, nil
}

// TargetNames returns the manifest's targets, sorted.
func (m *Manifest) TargetNames() []string {
	names := make([]string, 0, len(m.Targets))
	for k := range m.Targets {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}
