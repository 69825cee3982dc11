// Package decisionstest writes decisions files for tests, with the
// checkpoint writer: the decisions the Python side's calibration would
// write for a model, from masks a test chooses (the magnitude rule's
// own, random 2:4 ones, or any other).
package decisionstest

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/decisions"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/prune24"
	"github.com/sfsurgery/sfsurgery/surgery"
)

// Meta returns a valid Meta for method: a calibration of 4 samples of 16
// tokens, with the method's usual parameters.
func Meta(method format.Method) decisions.Meta {
	params := map[string]float64{}
	switch method {
	case format.RIA:
		params["alpha"] = 0.5
	case format.SparseGPT:
		params["dampening"], params["block"] = 0.01, 128
	}
	return decisions.Meta{Schema: decisions.Schema, Method: method, Model: "testdata/tiny-llama-bf16",
		Text:    format.CalibrationText{File: "calib.txt", SHA256: fmt.Sprintf("%064x", 0xC0FFEE), Kind: "plain"},
		Samples: 4, Seqlen: 16, Seed: 0, Params: params, Tool: "sfsurgery-python test"}
}

// Tensor is one tensor of a decisions file.
type Tensor struct {
	Name  string
	DType checkpoint.DType
	Shape []int64
	Data  []byte
}

// Write writes a decisions file at path: metadata holds meta under
// decisions.MetadataKey (and "format": "pt", as safetensors' torch
// writer adds), and the tensors.
func Write(t testing.TB, path string, meta decisions.Meta, tensors ...Tensor) {
	t.Helper()
	WriteMetadata(t, path, map[string]string{decisions.MetadataKey: meta.Encode(), "format": "pt"}, tensors...)
}

// WriteMetadata writes a safetensors file at path with the metadata and
// tensors given, valid or not as decisions.
func WriteMetadata(t testing.TB, path string, metadata map[string]string, tensors ...Tensor) {
	t.Helper()
	specs := make([]checkpoint.TensorSpec, 0, len(tensors))
	for _, x := range tensors {
		specs = append(specs, checkpoint.TensorSpec{Name: x.Name, DType: x.DType, Shape: x.Shape, Src: source(x.Data)})
	}
	if err := checkpoint.WriteFile(context.Background(), path, specs, metadata, nil); err != nil {
		t.Fatal(err)
	}
}

// source is a tensor source holding its bytes.
type source []byte

func (b source) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b)
	return int64(n), err
}

// Decide returns the decision for one weight (name, raw bytes w of dt,
// rows × cols): its mask in the bitmask layout, and its updated values
// for sparsegpt (nil otherwise).
type Decide func(name string, w []byte, dt checkpoint.DType, rows, cols int) (mask, update []byte, err error)

// Magnitude decides by the magnitude rule: the mask of the set
// prune24.Prune keeps by Rule24.
func Magnitude(_ string, w []byte, dt checkpoint.DType, rows, cols int) ([]byte, []byte, error) {
	pruned := make([]byte, len(w))
	if _, err := prune24.Prune(pruned, w, dt, cols, 0, prune24.Rule24); err != nil {
		return nil, nil, err
	}
	mask := make([]byte, prune24.MaskBytes(rows, cols))
	return mask, nil, prune24.MaskOf(mask, pruned, dt, cols)
}

// Random decides 2 of every 4 at random, from seed.
func Random(seed uint64) Decide {
	rng := rand.New(rand.NewPCG(seed, 2))
	return func(_ string, _ []byte, _ checkpoint.DType, rows, cols int) ([]byte, []byte, error) {
		mb := (cols + 7) / 8
		mask := make([]byte, rows*mb)
		for r := range rows {
			for g := range cols / 4 {
				p := rng.Perm(4)
				mask[r*mb+g/2] |= byte(1<<p[0]|1<<p[1]) << (4 * (g % 2))
			}
		}
		return mask, nil, nil
	}
}

// WithUpdate adds to d's masks updated values: change(i, v) of every kept
// element i (row-major) of the weight, whose original bits are v, and
// +0 wherever the mask prunes. change nil keeps the original's values.
func WithUpdate(d Decide, change func(i int, v uint32) uint32) Decide {
	return func(name string, w []byte, dt checkpoint.DType, rows, cols int) ([]byte, []byte, error) {
		mask, _, err := d(name, w, dt, rows, cols)
		if err != nil {
			return nil, nil, err
		}
		update := make([]byte, len(w))
		if _, err := prune24.PruneMask(update, w, mask, dt, cols, 0); err != nil {
			return nil, nil, err
		}
		if change != nil {
			mb := (cols + 7) / 8
			for i := range rows * cols {
				if r, c := i/cols, i%cols; mask[r*mb+c/8]>>(c%8)&1 != 0 {
					putBits(update, i, dt, change(i, getBits(w, i, dt)))
				}
			}
		}
		return mask, update, nil
	}
}

// Build writes at path the decisions of method for the weights targets of
// the model ck, decided by decide (see Tensors).
func Build(t testing.TB, path string, ck *checkpoint.Checkpoint, targets []string, method format.Method, decide Decide) {
	t.Helper()
	Write(t, path, Meta(method), Tensors(t, ck, targets, method, decide)...)
}

// Tensors returns the tensors of the decisions of method for the weights
// targets of the model ck, decided by decide, sorted by name: a mask for
// each, and for sparsegpt an update (the original's kept values, for a
// decision without one).
func Tensors(t testing.TB, ck *checkpoint.Checkpoint, targets []string, method format.Method, decide Decide) []Tensor {
	t.Helper()
	var tensors []Tensor
	for _, name := range slices.Sorted(slices.Values(targets)) {
		f, info, ok := ck.Lookup(name)
		if !ok {
			t.Fatalf("the model has no %s", name)
		}
		rows, cols := int(info.Shape[0]), int(info.Shape[1])
		w := f.Data(info)
		mask, update, err := decide(name, w, info.DType, rows, cols)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		tensors = append(tensors, Tensor{Name: name + decisions.MaskSuffix, DType: checkpoint.U8,
			Shape: []int64{int64(rows), int64((cols + 7) / 8)}, Data: mask})
		if method.UpdatesWeights() {
			if update == nil {
				update = make([]byte, len(w))
				if _, err := prune24.PruneMask(update, w, mask, info.DType, cols, 0); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
			tensors = append(tensors, Tensor{Name: name + decisions.UpdateSuffix, DType: info.DType, Shape: info.Shape, Data: update})
		}
	}
	return tensors
}

// getBits returns the bits of element i of b.
func getBits(b []byte, i int, dt checkpoint.DType) uint32 {
	if dt.Size() == 4 {
		return uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24
	}
	return uint32(b[2*i]) | uint32(b[2*i+1])<<8
}

// putBits sets element i of b to v.
func putBits(b []byte, i int, dt checkpoint.DType, v uint32) {
	for k := range dt.Size() {
		b[dt.Size()*i+k] = byte(v >> (8 * k))
	}
}

// Targets returns the weights a magnitude prune of model in format f
// (default scope) selects: every target, or only those it does not leave
// dense where pruned is true. The tests' decisions cover exactly these.
func Targets(t testing.TB, model string, f format.Format, pruned bool) []string {
	t.Helper()
	ck, err := checkpoint.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	p, err := surgery.NewPlan(ck, surgery.Options{Format: f, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tp := range p.Targets {
		if !pruned || tp.Skip == "" {
			names = append(names, tp.Name)
		}
	}
	return names
}
