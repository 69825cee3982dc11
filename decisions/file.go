package decisions

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/prune24"
)

// The suffixes of a decisions file's tensors, after the weight's name
// (P.weight.mask, P.weight.update).
const (
	MaskSuffix   = ".mask"
	UpdateSuffix = ".update"
)

// File is an open decisions file, valid in itself.
type File struct {
	// Meta is what the file says of itself.
	Meta Meta
	path string
	f    *checkpoint.File
	// weights maps each weight the file decides to its tensors.
	weights map[string]*entry
}

// entry is the tensors of one weight: its mask and, for sparsegpt, its
// updated values.
type entry struct {
	mask, update *checkpoint.TensorInfo
}

// Open opens the decisions file at path with the strict safetensors
// reader and validates it in itself (see [FromHeader]). A file that is not
// safetensors, or whose header is malformed, is an [*Error] wrapping the
// reader's error too.
func Open(path string) (*File, error) {
	f, err := checkpoint.OpenFile(path)
	if err != nil {
		detail := err.Error()
		if ce, ok := errors.AsType[*checkpoint.Error](err); ok {
			c := *ce
			c.File = ""
			detail = c.Error()
		}
		return nil, &Error{File: path, Detail: "not a decisions file: " + detail, Err: err}
	}
	d, err := FromHeader(path, &f.Header)
	if err != nil {
		f.Close()
		return nil, err
	}
	d.f = f
	return d, nil
}

// FromHeader validates the header h of the decisions file at path (a path
// only for the errors) and returns the file without its data: the
// metadata ([ParseMeta]); every tensor named P.weight.mask, U8 of rank
// 2, or P.weight.update, F16, BF16 or F32 of rank 2; an update beside
// every mask for sparsegpt, none for the other methods, and no update
// without its mask. Errors are [*Error] values; with several faults, the
// first by tensor name is reported.
func FromHeader(path string, h *checkpoint.Header) (*File, error) {
	refuse := func(tensor, format string, args ...any) error {
		return &Error{File: path, Tensor: tensor, Detail: fmt.Sprintf(format, args...)}
	}
	raw, ok := h.Metadata[MetadataKey]
	if !ok {
		return nil, refuse("", "no __metadata__[%q]: not a decisions file (python -m sfsurgery calibrate writes them)", MetadataKey)
	}
	meta, err := ParseMeta(raw)
	if err != nil {
		return nil, refuse("", "__metadata__[%q]: %v", MetadataKey, err)
	}
	d := &File{Meta: *meta, path: path, weights: map[string]*entry{}}
	tensors := slices.Clone(h.Tensors)
	sort.Slice(tensors, func(i, j int) bool { return tensors[i].Name < tensors[j].Name })
	for i := range tensors {
		t := &tensors[i]
		weight, isMask := strings.CutSuffix(t.Name, MaskSuffix)
		if !isMask {
			weight, _ = strings.CutSuffix(t.Name, UpdateSuffix)
		}
		if weight == t.Name || !strings.HasSuffix(weight, ".weight") {
			return nil, refuse(t.Name, "not a decisions tensor: their names are P.weight%s and P.weight%s", MaskSuffix, UpdateSuffix)
		}
		if len(t.Shape) != 2 {
			return nil, refuse(t.Name, "shape %v is not a matrix", t.Shape)
		}
		e := d.weights[weight]
		if e == nil {
			e = &entry{}
			d.weights[weight] = e
		}
		switch {
		case isMask && t.DType != checkpoint.U8:
			return nil, refuse(t.Name, "dtype %s: a mask is U8", t.DType)
		case isMask:
			e.mask = t
		case prune24.CheckDType(t.DType) != nil:
			return nil, refuse(t.Name, "dtype %s: an updated weight is F16, BF16 or F32", t.DType)
		case !meta.Method.UpdatesWeights():
			return nil, refuse(t.Name, "%s decisions hold masks only: updated weights are sparsegpt's", meta.Method)
		default:
			e.update = t
		}
	}
	for _, w := range d.Weights() {
		e := d.weights[w]
		switch {
		case e.mask == nil:
			return nil, refuse(w+MaskSuffix, "missing: %s%s has no mask beside it", w, UpdateSuffix)
		case e.update == nil && meta.Method.UpdatesWeights():
			return nil, refuse(w+UpdateSuffix, "missing: sparsegpt decisions hold the updated weight beside every mask")
		}
	}
	return d, nil
}

// Path returns the path the file was opened with.
func (d *File) Path() string { return d.path }

// Close closes the file.
func (d *File) Close() error {
	if d.f == nil {
		return nil
	}
	return d.f.Close()
}

// Weights returns the names of the weights the file decides, sorted.
func (d *File) Weights() []string {
	names := make([]string, 0, len(d.weights))
	for w := range d.weights {
		names = append(names, w)
	}
	sort.Strings(names)
	return names
}

// Has reports whether the file decides the weight called name.
func (d *File) Has(name string) bool { return d.weights[name] != nil }

// SHA256 returns the SHA-256 (hex) of the whole file's bytes, read a
// chunk at a time; it stops with ctx's error once ctx is done.
func (d *File) SHA256(ctx context.Context) (string, error) {
	if d.f == nil {
		return "", fmt.Errorf("%s: not open", d.path)
	}
	sum, err := checkpoint.SHA256(ctx, d.f, 0, d.f.Size())
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("%s: reading for its digest: %w", d.path, err)
	}
	return hex.EncodeToString(sum[:]), nil
}

// Lookup returns the decision for the target weight w of a model, a
// matrix of F16, BF16 or F32 whose columns are a multiple of 4: its mask
// must be U8 [rows, ceil(cols/8)] and, for sparsegpt, its update of w's
// dtype and shape. A missing tensor or another shape or dtype is an
// [*Error] naming the decisions file and the tensor.
func (d *File) Lookup(w checkpoint.TensorInfo) (*Decision, error) {
	refuse := func(tensor, format string, args ...any) error {
		return &Error{File: d.path, Tensor: tensor, Detail: fmt.Sprintf(format, args...)}
	}
	e := d.weights[w.Name]
	if e == nil {
		return nil, refuse(w.Name+MaskSuffix, "missing: the decisions hold no mask for the target %s", w.Name)
	}
	if len(w.Shape) != 2 || w.Shape[1]%4 != 0 || prune24.CheckDType(w.DType) != nil {
		return nil, refuse(e.mask.Name, "the target %s is %s %v, not a matrix that 2:4 decisions prune", w.Name, w.DType, w.Shape)
	}
	rows, cols := w.Shape[0], w.Shape[1]
	if want := []int64{rows, (cols + 7) / 8}; !slices.Equal(e.mask.Shape, want) {
		return nil, refuse(e.mask.Name, "shape %v, want %v for %s %v: the decisions were made for another model",
			e.mask.Shape, want, w.Name, w.Shape)
	}
	x := &Decision{Weight: w.Name, DType: w.DType, Rows: int(rows), Cols: int(cols), file: d, mask: *e.mask}
	if e.update != nil {
		if e.update.DType != w.DType || !slices.Equal(e.update.Shape, w.Shape) {
			return nil, refuse(e.update.Name, "%s %v, want %s %v as the target %s: the decisions were made for another model",
				e.update.DType, e.update.Shape, w.DType, w.Shape, w.Name)
		}
		x.update, x.updates = *e.update, true
	}
	return x, nil
}

// Extra returns an [*Error] for the first weight the file decides (by
// name) for which why says why it should not: that it is no target of
// the prune at hand, say; why returns "" for the weights it should
// decide. It returns nil when why has nothing to say of any.
func (d *File) Extra(why func(weight string) string) error {
	for _, w := range d.Weights() {
		if reason := why(w); reason != "" {
			return &Error{File: d.path, Tensor: d.weights[w].mask.Name, Detail: reason}
		}
	}
	return nil
}
