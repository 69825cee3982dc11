package verify

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/prune24"
	"github.com/sfsurgery/sfsurgery/surgery"
)

// chunkBytes bounds the dense rows decoded at a time.
const chunkBytes = 4 << 20

// Names of the checks in a Result.
const (
	CheckStructure = "structure"  // valid 2:4 (or 1:2)
	CheckRoundTrip = "round-trip" // decodes and re-encodes to the same bytes
	CheckRule      = "rule"       // equals the rule applied to the original
	CheckIdentical = "identical"  // a non-target is byte-identical to the original
	CheckNumeric   = "numeric"    // sparse product equals pruned-dense product
)

// checkCompressed runs checks 1–4 on one compressed weight.
func checkCompressed(c *surgery.Compressed, rule prune24.Rule, ours bool, opt Options, num numeric) Result {
	res := Result{Tensor: c.Name, Format: string(c.Format)}
	var orig []byte
	if opt.Original != nil {
		o, err := originalWeight(opt.Original, c.Name, string(c.Values.DType), c.Rows, c.Cols)
		if err != nil {
			res.add(CheckRule, err)
			res.finish()
			return res
		}
		orig = o
	}
	structErr, roundErr, ruleErr := walkCompressed(c, rule, ours, orig, opt.Progress)
	res.add(CheckStructure, structErr)
	res.add(CheckRoundTrip, roundErr)
	if orig != nil {
		res.add(CheckRule, ruleErr)
	}
	if structErr == nil && roundErr == nil {
		rel, maxAbs, err := num.Compare(c)
		res.RelErr, res.MaxAbs = rel, maxAbs
		if err == nil && !(rel <= num.Tolerance()) {
			err = fmt.Errorf("relative error %.3g over tolerance %.3g (max abs %.3g)", rel, num.Tolerance(), maxAbs)
		}
		res.add(CheckNumeric, err)
	} else {
		res.add(CheckNumeric, fmt.Errorf("not run: the compressed form does not decode"))
	}
	res.finish()
	return res
}

// walkCompressed decodes c chunk by chunk and runs the structure,
// round-trip and (with orig) rule checks. The first error of each kind is
// returned.
func walkCompressed(c *surgery.Compressed, rule prune24.Rule, ours bool, orig []byte, progress func(int64)) (structErr, roundErr, ruleErr error) {
	rowBytes := c.Cols * c.DType.Size()
	a := c.RowAlign()
	step := max(chunkBytes/rowBytes/a*a, a)
	dense := make([]byte, min(step, c.Rows)*rowBytes)
	var scratch, v2, i2 []byte
	values, index := c.File.Data(c.Values), c.File.Data(c.Index)
	vRow, iRow := len(values)/c.Rows, len(index)/c.Rows
	for r0 := 0; r0 < c.Rows; r0 += step {
		n := min(step, c.Rows-r0)
		d := dense[:n*rowBytes]
		var err error
		scratch, err = c.DecodeRows(d, r0, n, scratch)
		if err != nil {
			return err, err, err
		}
		if structErr == nil {
			if err := prune24.Check(d, c.DType, c.Cols, rule); err != nil {
				structErr = prune24.OffsetRows(err, r0)
			}
		}
		if roundErr == nil && (c.Format == surgery.FormatAmpere || ours) {
			roundErr = reencode(c, d, r0, n, values[r0*vRow:(r0+n)*vRow], scratch, index[r0*iRow:(r0+n)*iRow], &v2, &i2)
		}
		if orig != nil && ruleErr == nil {
			if err := prune24.CheckRule(d, orig[r0*rowBytes:(r0+n)*rowBytes], c.DType, c.Cols, rule); err != nil {
				ruleErr = prune24.OffsetRows(err, r0)
			}
		}
		if progress != nil {
			progress(int64(n * rowBytes))
		}
	}
	return structErr, roundErr, ruleErr
}

// reencode packs the decoded rows again and compares with the stored
// bytes. For the ampere form the encoding is canonical (PyTorch's); for a
// bitmask written by sfsurgery too.
func reencode(c *surgery.Compressed, dense []byte, r0, n int, values, ampMeta, bitmask []byte, v2, i2 *[]byte) error {
	var err error
	var idx []byte
	if c.Format == surgery.FormatAmpere {
		pb, mb := prune24.AmpereSizes(c.DType, n, c.Cols)
		*v2, *i2 = grow(*v2, pb), grow(*i2, mb)
		err = prune24.PackAmpere(*v2, *i2, dense, c.DType, n, c.Cols)
		idx = ampMeta
	} else {
		cb, mb := prune24.BitmaskSizes(c.DType, n, c.Cols)
		*v2, *i2 = grow(*v2, cb), grow(*i2, mb)
		err = prune24.PackBitmask(*v2, *i2, dense, c.DType, n, c.Cols)
		idx = bitmask
	}
	if err != nil {
		return fmt.Errorf("re-encoding: %w", prune24.OffsetRows(err, r0))
	}
	if i := firstDiff(*v2, values); i >= 0 {
		return fmt.Errorf("%s: byte %d of rows %d+ differs after a decode/encode round trip", c.Values.Name, i, r0)
	}
	if i := firstDiff(*i2, idx); i >= 0 {
		return fmt.Errorf("%s: byte %d of rows %d+ differs after a decode/encode round trip", c.Index.Name, i, r0)
	}
	return nil
}

// checkDense runs checks 1 and 3 on a target of the dense format.
func checkDense(ck *checkpoint.Checkpoint, name string, rule prune24.Rule, opt Options) Result {
	res := Result{Tensor: name, Format: string(surgery.FormatDense)}
	f, info, ok := ck.Lookup(name)
	if !ok {
		res.add(CheckStructure, fmt.Errorf("the manifest lists %s but the checkpoint lacks it", name))
		res.finish()
		return res
	}
	dt, ok := prune24.DTypeOf(string(info.DType))
	if !ok || len(info.Shape) != 2 || info.Shape[1]%4 != 0 {
		res.add(CheckStructure, fmt.Errorf("%s %v is not a prunable weight", info.DType, info.Shape))
		res.finish()
		return res
	}
	data := f.Data(info)
	cols := int(info.Shape[1])
	res.add(CheckStructure, prune24.Check(data, dt, cols, rule))
	if opt.Original != nil {
		orig, err := originalWeight(opt.Original, name, string(info.DType), int(info.Shape[0]), cols)
		if err == nil {
			err = prune24.CheckRule(data, orig, dt, cols, rule)
		}
		res.add(CheckRule, err)
	}
	f.Release(data)
	if opt.Progress != nil {
		opt.Progress(info.Size())
	}
	res.finish()
	return res
}

// originalWeight finds a target's weight in the original checkpoint.
func originalWeight(orig *checkpoint.Checkpoint, name, dtype string, rows, cols int) ([]byte, error) {
	f, info, ok := orig.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("the original checkpoint has no %s", name)
	}
	if string(info.DType) != dtype || !slices.Equal(info.Shape, []int64{int64(rows), int64(cols)}) {
		return nil, fmt.Errorf("the original %s is %s %v, the pruned one %s [%d %d]", name, info.DType, info.Shape, dtype, rows, cols)
	}
	return f.Data(info), nil
}

// checkOthers compares every non-target tensor with the original: each
// must be present and byte-identical, and the output must add nothing
// but the compressed forms of targets.
func checkOthers(ck, orig *checkpoint.Checkpoint, targets map[string]bool) []Result {
	var out []Result
	compressedParts := map[string]bool{}
	for name := range targets {
		base := name[:len(name)-len(".weight")]
		for _, s := range []string{".packed", ".meta", ".compressed", ".bitmask", ".shape"} {
			compressedParts[base+s] = true
		}
	}
	for _, name := range orig.Names() {
		if targets[name] {
			continue
		}
		res := Result{Tensor: name, Format: "copy"}
		of, oi, _ := orig.Lookup(name)
		f, info, ok := ck.Lookup(name)
		switch {
		case !ok:
			res.add(CheckIdentical, fmt.Errorf("missing from the pruned checkpoint"))
		case info.DType != oi.DType || !slices.Equal(info.Shape, oi.Shape):
			res.add(CheckIdentical, fmt.Errorf("is %s %v, the original %s %v", info.DType, info.Shape, oi.DType, oi.Shape))
		default:
			a, b := f.Data(info), of.Data(oi)
			if i := firstDiff(a, b); i >= 0 {
				res.add(CheckIdentical, fmt.Errorf("byte %d of the tensor differs from the original", i))
			} else {
				res.add(CheckIdentical, nil)
			}
			f.Release(a)
			of.Release(b)
		}
		res.finish()
		if !res.OK {
			out = append(out, res)
		}
	}
	for _, name := range ck.Names() {
		if _, _, ok := orig.Lookup(name); ok || compressedParts[name] {
			continue
		}
		res := Result{Tensor: name, Format: "extra"}
		res.add(CheckIdentical, fmt.Errorf("not in the original checkpoint"))
		res.finish()
		out = append(out, res)
	}
	if len(out) == 0 {
		res := Result{Tensor: "(all other tensors)", Format: "copy"}
		res.add(CheckIdentical, nil)
		res.finish()
		out = append(out, res)
	}
	return out
}

// firstDiff returns the first index where a and b differ, or -1.
func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
