package checkpoint

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// indexCase is an index text and what ParseIndex must give.
type indexCase struct {
	name string
	json string
	err  error             // nil when valid
	want map[string]string // the weight map of a valid index
}

func indexCases() []indexCase {
	a := `"a.weight":"model-00001-of-00002.safetensors"`
	b := `"b.weight":"model-00002-of-00002.safetensors"`
	two := map[string]string{"a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors"}
	return []indexCase{
		{"valid", `{"metadata":{"total_size":8},"weight_map":{` + a + `,` + b + `}}`, nil, two},
		{"valid-no-metadata", ` {"weight_map":{` + a + `,` + b + `}} `, nil, two},
		{"valid-empty-weight-map", `{"weight_map":{}}`, nil, map[string]string{}},
		{"valid-extra-key", `{"weight_map":{` + a + `},"format":["x",{"y":null}]}`, nil, map[string]string{"a.weight": "model-00001-of-00002.safetensors"}},
		{"valid-nested-metadata", `{"metadata":{"total_size":8,"quant":{"bits":4,"groups":[1,2.5,"x",true,null]}},"weight_map":{` + a + `}}`, nil,
			map[string]string{"a.weight": "model-00001-of-00002.safetensors"}},
		{"no-weight-map", `{"metadata":{}}`, ErrIndex, nil},
		{"weight-map-null", `{"weight_map":null}`, ErrIndex, nil},
		{"weight-map-array", `{"weight_map":["a"]}`, ErrIndex, nil},
		{"shard-number", `{"weight_map":{"a":1}}`, ErrIndex, nil},
		{"shard-path", `{"weight_map":{"a":"sub/model.safetensors"}}`, ErrIndex, nil},
		{"shard-backslash", `{"weight_map":{"a":"sub\\model.safetensors"}}`, ErrIndex, nil},
		{"shard-absolute", `{"weight_map":{"a":"/etc/model.safetensors"}}`, ErrIndex, nil},
		{"shard-dotdot", `{"weight_map":{"a":".."}}`, ErrIndex, nil},
		{"shard-traversal", `{"weight_map":{"a":"../model.safetensors"}}`, ErrIndex, nil},
		{"shard-hidden", `{"weight_map":{"a":".model.safetensors"}}`, ErrIndex, nil},
		{"shard-empty", `{"weight_map":{"a":""}}`, ErrIndex, nil},
		{"shard-nul", `{"weight_map":{"a":"m\u0000.safetensors"}}`, ErrIndex, nil},
		{"shard-not-safetensors", `{"weight_map":{"a":"pytorch_model.bin"}}`, ErrIndex, nil},
		{"metadata-array", `{"metadata":[],"weight_map":{}}`, ErrIndex, nil},
		{"metadata-string", `{"metadata":"x","weight_map":{}}`, ErrIndex, nil},
		{"duplicate-tensor", `{"weight_map":{` + a + `,` + a + `}}`, ErrDuplicateKey, nil},
		{"duplicate-weight-map", `{"weight_map":{` + a + `},"weight_map":{` + b + `}}`, ErrDuplicateKey, nil},
		{"duplicate-metadata-key", `{"metadata":{"total_size":1,"total_size":2},"weight_map":{}}`, ErrDuplicateKey, nil},
		{"duplicate-nested", `{"metadata":{"q":{"x":1,"x":1}},"weight_map":{}}`, ErrDuplicateKey, nil},
		{"duplicate-in-extra-key", `{"other":{"x":1,"x":1},"weight_map":{}}`, ErrDuplicateKey, nil},
		{"invalid-utf8", "{\"weight_map\":{\"\xff\":\"m.safetensors\"}}", ErrIndex, nil},
		{"lone-surrogate", `{"weight_map":{"\udfff":"m.safetensors"}}`, ErrIndex, nil},
		{"not-object", `[]`, ErrIndex, nil},
		{"truncated", `{"weight_map":{` + a, ErrIndex, nil},
		{"trailing", `{"weight_map":{}} {}`, ErrIndex, nil},
		{"empty", ``, ErrIndex, nil},
		{"too-deep", `{"metadata":{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `},"weight_map":{}}`, ErrIndex, nil},
	}
}

func TestParseIndex(t *testing.T) {
	for _, c := range indexCases() {
		t.Run(c.name, func(t *testing.T) {
			idx, err := ParseIndex([]byte(c.json))
			if c.err != nil {
				if !errors.Is(err, c.err) || !errors.Is(err, ErrFormat) {
					t.Fatalf("err = %v, want %v", err, c.err)
				}
				if _, ok := errors.AsType[*Error](err); !ok {
					t.Errorf("err is %T, want *Error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(idx.WeightMap, c.want) {
				t.Errorf("WeightMap = %v, want %v", idx.WeightMap, c.want)
			}
		})
	}
}

// TestParseIndexMetadata checks the metadata values, numbers kept exact.
func TestParseIndexMetadata(t *testing.T) {
	idx, err := ParseIndex([]byte(`{"metadata":{"total_size":68820352000123,"q":{"g":[1,"x",null,false]}},"weight_map":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"total_size": json.Number("68820352000123"),
		"q":          map[string]any{"g": []any{json.Number("1"), "x", nil, false}},
	}
	if !reflect.DeepEqual(idx.Metadata, want) {
		t.Errorf("Metadata = %#v, want %#v", idx.Metadata, want)
	}
	idx, err = ParseIndex([]byte(`{"weight_map":{}}`))
	if err != nil || idx.Metadata != nil {
		t.Errorf("no metadata: Metadata = %v, %v; want nil", idx.Metadata, err)
	}
}

// TestParseIndexErrorNamesTensor checks that a bad shard name is reported
// with its tensor and byte offset.
func TestParseIndexErrorNamesTensor(t *testing.T) {
	text := `{"weight_map":{"a":"m.safetensors", "lm_head.weight":"../x.safetensors"}}`
	_, err := ParseIndex([]byte(text))
	e, ok := errors.AsType[*Error](err)
	if !ok || e.Tensor != "lm_head.weight" || e.Off != int64(strings.Index(text, `"../`)) {
		t.Fatalf("err = %v, want *Error naming lm_head.weight at byte %d", err, strings.Index(text, `"../`))
	}
	if !strings.Contains(err.Error(), `"../x.safetensors"`) {
		t.Errorf("error %q does not name the shard", err)
	}
}

// TestParseIndexFixture parses the index the reference writer produced.
func TestParseIndexFixture(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "tiny-llama-bf16", IndexName))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := ParseIndex(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.WeightMap) != 39 || idx.WeightMap["lm_head.weight"] != "model-00002-of-00002.safetensors" {
		t.Errorf("WeightMap has %d entries, lm_head.weight in %q", len(idx.WeightMap), idx.WeightMap["lm_head.weight"])
	}
	if idx.Metadata["total_size"] != json.Number("6820352") {
		t.Errorf("total_size = %#v", idx.Metadata["total_size"])
	}
}
