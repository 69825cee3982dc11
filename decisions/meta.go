package decisions

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sfsurgery/sfsurgery/format"
)

// Schema is the schema this package reads, the "schema" of [Meta].
const Schema = "sfsurgery-decisions/1"

// MetadataKey is the __metadata__ key of a decisions file whose value is
// its [Meta] as JSON.
const MetadataKey = "sfsurgery_decisions"

// Meta is what a decisions file says of itself, under MetadataKey: the
// method, and the calibration that decided (informational: prune records
// it in its report).
type Meta struct {
	Schema string        `json:"schema"`
	Method format.Method `json:"method"`
	// Model is the model as the calibration was given it.
	Model string `json:"model"`
	// Text is the calibration text (sfsurgery.text.describe()).
	Text format.CalibrationText `json:"text"`
	// Samples windows of Seqlen tokens, drawn with Seed.
	Samples int   `json:"samples"`
	Seqlen  int   `json:"seqlen"`
	Seed    int64 `json:"seed"`
	// Params are the method's parameters ({"alpha": 0.5} for RIA,
	// {"dampening": 0.01, "block": 128} for SparseGPT, {} for Wanda).
	Params map[string]float64 `json:"params"`
	// Tool is the calibration's tool and version.
	Tool string `json:"tool"`
}

// metaKeys are the keys of the JSON object, all required.
var metaKeys = [...]string{"schema", "method", "model", "text", "samples", "seqlen", "seed", "params", "tool"}

// textKeys are the keys of its "text" object, all required.
var textKeys = [...]string{"file", "sha256", "kind"}

// ParseMeta parses and validates the JSON value of MetadataKey: one
// object with exactly the keys of [Meta] (no key twice, none unknown,
// none missing, nothing after it), schema Schema, a known method, a text
// with a file name, a lower-case hex SHA-256 and kind "plain" or "jsonl",
// samples and seqlen of at least 1, an integer seed and numeric params.
// The error says what is wrong, without naming the file.
func ParseMeta(s string) (*Meta, error) {
	if err := checkKeys([]byte(s)); err != nil {
		return nil, err
	}
	var raw struct {
		Schema  string                     `json:"schema"`
		Method  string                     `json:"method"`
		Model   string                     `json:"model"`
		Text    json.RawMessage            `json:"text"`
		Samples int                        `json:"samples"`
		Seqlen  int                        `json:"seqlen"`
		Seed    int64                      `json:"seed"`
		Params  map[string]json.RawMessage `json:"params"`
		Tool    string                     `json:"tool"`
	}
	if err := strictDecode([]byte(s), &raw); err != nil {
		return nil, err
	}
	if raw.Schema != Schema {
		return nil, fmt.Errorf("schema %q: this sfsurgery reads %s", raw.Schema, Schema)
	}
	method, err := format.ParseMethod(raw.Method)
	if err != nil {
		return nil, err
	}
	m := &Meta{Schema: raw.Schema, Method: method, Model: raw.Model, Samples: raw.Samples, Seqlen: raw.Seqlen,
		Seed: raw.Seed, Tool: raw.Tool, Params: map[string]float64{}}
	if err := strictDecode(raw.Text, &m.Text); err != nil {
		return nil, fmt.Errorf("text: %w", err)
	}
	switch {
	case m.Text.File == "":
		return nil, errors.New("text: empty file name")
	case !isHexDigest(m.Text.SHA256):
		return nil, fmt.Errorf("text: sha256 %q is not 64 lower-case hex digits", m.Text.SHA256)
	case m.Text.Kind != "plain" && m.Text.Kind != "jsonl":
		return nil, fmt.Errorf("text: kind %q is not plain or jsonl", m.Text.Kind)
	case m.Samples < 1 || m.Seqlen < 1:
		return nil, fmt.Errorf("samples %d × seqlen %d: both must be at least 1", m.Samples, m.Seqlen)
	}
	for k, v := range raw.Params {
		var x float64
		if bytes.Equal(v, []byte("null")) || json.Unmarshal(v, &x) != nil {
			return nil, fmt.Errorf("params: %q is %s, not a number", k, v)
		}
		m.Params[k] = x
	}
	return m, nil
}

// strictDecode decodes the JSON object b into v, refusing unknown fields
// and anything after the object.
func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON object")
	}
	return nil
}

// checkKeys checks the key sets of the object b and of its "text" and
// "params" objects: no key twice, and the object and "text" hold every
// key they must (unknown keys are strictDecode's to refuse).
func checkKeys(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	keys, err := objectKeys(dec)
	if err != nil {
		return err
	}
	for _, want := range [...]struct {
		path string
		keys []string
	}{{"", metaKeys[:]}, {"text", textKeys[:]}} {
		have, ok := keys[want.path]
		if !ok {
			continue // not an object: strictDecode says so
		}
		var missing []string
		for _, k := range want.keys {
			if !have[k] {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			where := ""
			if want.path != "" {
				where = want.path + ": "
			}
			return fmt.Errorf("%smissing %s", where, strings.Join(missing, ", "))
		}
	}
	return nil
}

// objectKeys reads one JSON value from dec and returns, for it and every
// object inside it, by dotted path, the set of its keys; a key twice in
// one object is an error.
func objectKeys(dec *json.Decoder) (map[string]map[string]bool, error) {
	out := map[string]map[string]bool{}
	var walk func(path string, depth int) error
	walk = func(path string, depth int) error {
		if depth > 64 {
			return errors.New("JSON nested too deep")
		}
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			out[path] = seen
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				k, _ := kt.(string)
				if seen[k] {
					return fmt.Errorf("key %q twice", strings.TrimPrefix(path+"."+k, "."))
				}
				seen[k] = true
				if err := walk(strings.TrimPrefix(path+"."+k, "."), depth+1); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(path+"[]", depth+1); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	if err := walk("", 0); err != nil {
		return nil, err
	}
	return out, nil
}

// isHexDigest reports whether s is 64 lower-case hex digits.
func isHexDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Encode returns m as the JSON a decisions file holds under MetadataKey
// (keys in the order of Meta, params sorted).
func (m *Meta) Encode() string {
	b, err := json.Marshal(m)
	if err != nil {
		// Strings, integers and the finite floats ParseMeta gives always
		// marshal.
		return "{}"
	}
	return string(b)
}
