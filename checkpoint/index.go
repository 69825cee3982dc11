package checkpoint

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Index is the parsed index of a sharded checkpoint,
// model.safetensors.index.json.
type Index struct {
	// Metadata is the index's "metadata" object (total_size and the
	// like), nil when absent. Numbers are json.Number, so integers such
	// as total_size keep every digit; objects are map[string]any and
	// arrays []any.
	Metadata map[string]any
	// WeightMap maps each tensor name to the file name of the shard that
	// holds it, relative to the index's directory.
	WeightMap map[string]string
}

// Keys of the index object.
const (
	indexMetadataKey  = "metadata"
	indexWeightMapKey = "weight_map"
)

// maxIndexDepth bounds the nesting of the index's metadata values.
const maxIndexDepth = 64

// ParseIndex parses the JSON of a sharded checkpoint's index. It must be
// valid UTF-8 holding one object, without a key repeated at any depth,
// with a "weight_map" object mapping tensor names to shard file names
// and, optionally, a "metadata" object; other top-level keys are ignored.
// A shard file name must be a plain name ending in ".safetensors": no path
// separator, no leading dot (which also rules out ".."), no NUL.
//
// Errors are *[Error] values with an empty File, naming the tensor and the
// byte offset in b where known, and wrapping [ErrDuplicateKey] for a
// repeated key or [ErrIndex] otherwise.
func ParseIndex(b []byte) (*Index, error) {
	w, err := newJSONWalker(b, 0, ErrIndex)
	if err != nil {
		return nil, err
	}
	idx := &Index{}
	top := objectRules{what: "the index", class: ErrIndex, endClass: ErrIndex,
		duplicate: func(k string, off int64) error {
			return newError("", off, ErrDuplicateKey, fmt.Sprintf("key %s appears twice at the top level", clip(k)))
		}}
	err = w.document(top, func(k string, _ int64) error {
		var err error
		switch k {
		case indexWeightMapKey:
			idx.WeightMap, err = w.weightMap()
		case indexMetadataKey:
			off := w.off()
			var v any
			if v, err = w.value(0); err == nil {
				var ok bool
				if idx.Metadata, ok = v.(map[string]any); !ok {
					err = newError("", off, ErrIndex, fmt.Sprintf("metadata is %s, not an object", kindOfValue(v)))
				}
			}
		default:
			_, err = w.value(0)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if idx.WeightMap == nil {
		return nil, newError("", -1, ErrIndex, "no weight_map")
	}
	return idx, nil
}

// weightMap reads the weight_map object.
func (w *jsonWalker) weightMap() (map[string]string, error) {
	m := make(map[string]string)
	rules := objectRules{what: "weight_map", class: ErrIndex, endClass: ErrIndex,
		duplicate: func(name string, off int64) error {
			return newError(name, off, ErrDuplicateKey, "the tensor appears twice in weight_map")
		}}
	err := w.object(rules, func(name string, _ int64) error {
		off := w.off()
		tok, err := w.token(name, ErrIndex)
		if err != nil {
			return err
		}
		shard, ok := tok.(string)
		if !ok {
			return newError(name, off, ErrIndex, fmt.Sprintf("the shard is %s, not a file name", kindOf(tok)))
		}
		if why := badShardName(shard); why != "" {
			return newError(name, off, ErrIndex, fmt.Sprintf("shard %s %s", clip(shard), why))
		}
		m[name] = shard
		return nil
	})
	return m, err
}

// badShardName says what is wrong with a shard file name, or "".
func badShardName(s string) string {
	switch {
	case strings.ContainsAny(s, "/\\"):
		return "is not a plain file name"
	case strings.HasPrefix(s, "."):
		return "starts with a dot"
	case strings.ContainsRune(s, 0):
		return "contains NUL"
	case !strings.HasSuffix(s, ".safetensors"):
		return "does not end in .safetensors"
	}
	return ""
}

// value reads any JSON value, rejecting repeated keys at every depth.
func (w *jsonWalker) value(depth int) (any, error) {
	off := w.off()
	tok, err := w.token("", w.class)
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	if depth >= maxIndexDepth {
		return nil, newError("", off, w.class, fmt.Sprintf("values nested deeper than %d", maxIndexDepth))
	}
	if d == '[' {
		a := []any{}
		for w.more() {
			v, err := w.value(depth + 1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		return a, w.delim(json.Delim(']'), "", w.class, "the array's end")
	}
	m := make(map[string]any)
	rules := objectRules{endClass: w.class, duplicate: func(k string, off int64) error {
		return newError("", off, ErrDuplicateKey, fmt.Sprintf("key %s appears twice", clip(k)))
	}}
	return m, w.members(rules, func(k string, _ int64) error {
		var err error
		m[k], err = w.value(depth + 1)
		return err
	})
}

// kindOfValue describes a decoded JSON value for an error message.
func kindOfValue(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return kindOf(v)
}
