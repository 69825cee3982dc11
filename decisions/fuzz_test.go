package decisions_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/decisions"
	"github.com/sfsurgery/sfsurgery/decisions/decisionstest"
	"github.com/sfsurgery/sfsurgery/format"
)

// FuzzParseMeta feeds ParseMeta any text: it never panics, and what it
// accepts is valid and reads back the same from its encoding.
func FuzzParseMeta(f *testing.F) {
	for _, m := range []format.Method{format.Wanda, format.RIA, format.SparseGPT} {
		meta := decisionstest.Meta(m)
		f.Add(meta.Encode())
	}
	f.Add(`{"schema":"sfsurgery-decisions/1","method":"wanda","method":"ria"}`)
	f.Add(`{"text":{"file":"a","file":"b"}}`)
	f.Add(`[[[[[[[[[[]]]]]]]]]]`)
	f.Fuzz(func(t *testing.T, s string) {
		m, err := decisions.ParseMeta(s)
		if err != nil {
			return
		}
		if m.Schema != decisions.Schema || m.Samples < 1 || m.Seqlen < 1 || m.Params == nil {
			t.Fatalf("accepted %+v", m)
		}
		if _, err := format.ParseMethod(string(m.Method)); err != nil {
			t.Fatalf("accepted method %q", m.Method)
		}
		if !json.Valid([]byte(s)) {
			t.Fatalf("accepted invalid JSON %q", s)
		}
		again, err := decisions.ParseMeta(m.Encode())
		if err != nil || again.Encode() != m.Encode() {
			t.Fatalf("%s reads back as %+v, %v", m.Encode(), again, err)
		}
	})
}

// FuzzFromHeader feeds FromHeader any safetensors header the strict reader
// accepts: it never panics, and what it accepts names only masks (U8
// matrices) and updates (float matrices, sparsegpt's only, each beside
// its mask).
func FuzzFromHeader(f *testing.F) {
	seed := func(meta decisions.Meta, tensors string, dataLen uint32) {
		md, _ := json.Marshal(meta.Encode())
		f.Add(`{"__metadata__":{"sfsurgery_decisions":`+string(md)+`}`+tensors+`}`, dataLen)
	}
	mask := `,"a.weight.mask":{"dtype":"U8","shape":[2,1],"data_offsets":[0,2]}`
	update := `,"a.weight.update":{"dtype":"BF16","shape":[2,4],"data_offsets":[2,18]}`
	seed(decisionstest.Meta(format.Wanda), mask, 2)
	seed(decisionstest.Meta(format.SparseGPT), mask+update, 18)
	seed(decisionstest.Meta(format.Wanda), mask+update, 18)
	seed(decisionstest.Meta(format.SparseGPT), update, 16)
	f.Fuzz(func(t *testing.T, header string, dataLen uint32) {
		h, err := checkpoint.ParseHeader([]byte(header), int64(dataLen))
		if err != nil {
			return
		}
		d, err := decisions.FromHeader("fuzz.safetensors", h)
		if err != nil {
			if !errors.Is(err, decisions.ErrInvalid) || !strings.HasPrefix(err.Error(), "fuzz.safetensors: ") {
				t.Fatalf("error %q", err)
			}
			return
		}
		updates := d.Meta.Method.UpdatesWeights()
		names := map[string]bool{}
		for _, ti := range h.Tensors {
			names[ti.Name] = true
			switch {
			case strings.HasSuffix(ti.Name, ".weight.mask"):
				if ti.DType != checkpoint.U8 || len(ti.Shape) != 2 {
					t.Fatalf("accepted mask %+v", ti)
				}
			case strings.HasSuffix(ti.Name, ".weight.update"):
				if !updates || len(ti.Shape) != 2 || slices.Index([]checkpoint.DType{checkpoint.F16, checkpoint.BF16, checkpoint.F32}, ti.DType) < 0 {
					t.Fatalf("accepted update %+v of %s", ti, d.Meta.Method)
				}
			default:
				t.Fatalf("accepted tensor %q", ti.Name)
			}
		}
		for _, w := range d.Weights() {
			if !names[w+".mask"] || updates != names[w+".update"] {
				t.Fatalf("weight %s: mask %v, update %v, method %s", w, names[w+".mask"], names[w+".update"], d.Meta.Method)
			}
		}
	})
}
