package verify

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/prune24"
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
	CheckDigest    = "digest"     // a tensor's bytes hash to the prune report's SHA-256
	CheckPresent   = "present"    // a target the manifest lists is in the checkpoint
)

// checkCompressed runs checks 1–4 on one compressed weight. It returns
// an error only when ctx is done; failed checks are in the Result.
func checkCompressed(ctx context.Context, c *format.Compressed, ch choice, ours bool, opt Options, num numeric) (Result, error) {
	res := Result{Tensor: c.Name, Format: string(c.Format)}
	var orig []byte
	if opt.Original != nil && ch.checksRule() {
		o, err := originalWeight(opt.Original, c.Name, string(c.Values.DType), c.Rows, c.Cols)
		if err != nil {
			res.add(CheckRule, err)
			res.finish()
			return res, nil
		}
		orig = o
	}
	w, err := walkCompressed(ctx, c, ch, ours, orig, opt.Progress)
	if err != nil {
		return res, err
	}
	res.add(CheckStructure, w.structErr)
	res.add(CheckRoundTrip, w.roundErr)
	if orig != nil {
		res.add(CheckRule, w.ruleErr)
	}
	res.addMask(ch, &w.mask, w.structErr)
	if note := w.nonFinite.note(); note != "" {
		res.Notes = append(res.Notes, note)
	}
	if w.structErr == nil && w.roundErr == nil {
		cmp, err := num.Compare(ctx, c)
		if ctxErr := ctx.Err(); ctxErr != nil {
			return res, ctxErr
		}
		res.RelErr, res.MaxAbs = cmp.relErr, cmp.maxAbs
		if err == nil && !(cmp.relErr <= num.Tolerance()) {
			err = fmt.Errorf("relative error %.3g over tolerance %.3g (max abs %.3g)", cmp.relErr, num.Tolerance(), cmp.maxAbs)
		}
		res.add(CheckNumeric, err)
		if cmp.nonFinite > 0 {
			res.Checks[len(res.Checks)-1].Detail = fmt.Sprintf("%d product elements non-finite in both products alike, left out of the error%s",
				cmp.nonFinite, detailSuffix(err))
		}
	} else {
		res.add(CheckNumeric, fmt.Errorf("not run: the compressed form does not decode"))
	}
	res.finish()
	return res, nil
}

// detailSuffix returns "; " and err's text, or "" for nil.
func detailSuffix(err error) string {
	if err == nil {
		return ""
	}
	return "; " + err.Error()
}

// walk is the outcome of walkCompressed: the first error of each check,
// and where the weight holds non-finite values.
type walk struct {
	structErr, roundErr, ruleErr error
	nonFinite                    weightScan
	mask                         maskWalk
}

// walkCompressed decodes c chunk by chunk and runs the structure,
// round-trip and (with orig) rule checks, hashes the mask of decided
// weights, and records the non-finite weights. It returns an error only
// when ctx is done, checked between chunks.
func walkCompressed(ctx context.Context, c *format.Compressed, ch choice, ours bool, orig []byte, progress func(int64)) (*walk, error) {
	rowBytes := c.Cols * c.DType.Size()
	a := c.RowAlign()
	step := max(chunkBytes/rowBytes/a*a, a)
	dense := make([]byte, min(step, c.Rows)*rowBytes)
	var scratch, v2, i2 []byte
	values, index := c.File.Data(c.Values), c.File.Data(c.Index)
	vRow, iRow := len(values)/c.Rows, len(index)/c.Rows
	w := &walk{}
	for r0 := 0; r0 < c.Rows; r0 += step {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := min(step, c.Rows-r0)
		d := dense[:n*rowBytes]
		var err error
		scratch, err = c.DecodeRows(d, r0, n, scratch)
		if err != nil {
			w.structErr, w.roundErr, w.ruleErr = err, err, err
			return w, nil
		}
		w.nonFinite.scan(d, c.DType, c.Cols, r0)
		if w.structErr == nil {
			if err := prune24.Check(d, c.DType, c.Cols, ch.rule); err != nil {
				w.structErr = prune24.OffsetRows(err, r0)
			}
		}
		var mask []byte
		if ch.decided() {
			mask = w.mask.add(d, c.DType, c.Cols, r0)
		}
		if w.roundErr == nil && (c.Format == format.Ampere || ours) {
			w.roundErr = reencode(c, d, r0, n, values[r0*vRow:(r0+n)*vRow], scratch, index[r0*iRow:(r0+n)*iRow], &v2, &i2)
		}
		if orig != nil && w.ruleErr == nil {
			w.ruleErr = ch.ruleAgainst(d, orig[r0*rowBytes:(r0+n)*rowBytes], mask, c.DType, c.Cols, r0)
		}
		if progress != nil {
			progress(int64(n * rowBytes))
		}
	}
	return w, nil
}

// addMask adds, for a decided weight whose decisions the prune report
// records, the mask check's outcome, and its note where there is one.
// structErr, the structure check's, explains a mask that cannot be
// shown.
func (r *Result) addMask(ch choice, m *maskWalk, structErr error) {
	if !ch.checksMask() {
		return
	}
	if structErr != nil {
		r.add(CheckMask, fmt.Errorf("not run: the weight is not 2:4"))
		return
	}
	note, err := m.verdict(ch.record)
	r.add(CheckMask, err)
	if note != "" {
		r.Notes = append(r.Notes, note)
	}
}

// reencode packs the decoded rows again and compares with the stored
// bytes. For the ampere form the encoding is canonical (PyTorch's); for a
// bitmask written by sfsurgery too.
func reencode(c *format.Compressed, dense []byte, r0, n int, values, ampMeta, bitmask []byte, v2, i2 *[]byte) error {
	var err error
	var idx []byte
	if c.Format == format.Ampere {
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

// checkDense runs checks 1 and 3 on a target of the dense format, in
// chunks of rows. It returns an error only when ctx is done, checked
// between chunks.
func checkDense(ctx context.Context, ck *checkpoint.Checkpoint, name string, ch choice, opt Options) (Result, error) {
	res := Result{Tensor: name, Format: string(format.Dense)}
	f, info, ok := ck.Lookup(name)
	if !ok {
		res.add(CheckStructure, fmt.Errorf("the manifest lists %s but the checkpoint lacks it", name))
		res.finish()
		return res, nil
	}
	dt := info.DType
	if prune24.CheckDType(dt) != nil || len(info.Shape) != 2 || info.Shape[1]%4 != 0 {
		res.add(CheckStructure, fmt.Errorf("%s %v is not a prunable weight", info.DType, info.Shape))
		res.finish()
		return res, nil
	}
	rows, cols := int(info.Shape[0]), int(info.Shape[1])
	var orig []byte
	var origErr error
	if opt.Original != nil && ch.checksRule() {
		orig, origErr = originalWeight(opt.Original, name, string(info.DType), rows, cols)
	}
	rowBytes := cols * dt.Size()
	data := f.Data(info)
	if data == nil || int64(len(data)) != int64(rows)*int64(rowBytes) || (orig != nil && len(orig) != len(data)) {
		res.add(CheckStructure, fmt.Errorf("%s: the tensor's %d bytes do not hold %s %v", f.Path(), len(data), info.DType, info.Shape))
		res.finish()
		return res, nil
	}
	step := max(chunkBytes/max(rowBytes, 1), 1)
	var structErr, ruleErr error
	var scan weightScan
	var masks maskWalk
	for r0 := 0; r0 < rows; r0 += step {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		n := min(step, rows-r0)
		d := data[r0*rowBytes : (r0+n)*rowBytes]
		scan.scan(d, dt, cols, r0)
		if structErr == nil {
			if err := prune24.Check(d, dt, cols, ch.rule); err != nil {
				structErr = prune24.OffsetRows(err, r0)
			}
		}
		var mask []byte
		if ch.decided() {
			mask = masks.add(d, dt, cols, r0)
		}
		if orig != nil && ruleErr == nil {
			ruleErr = ch.ruleAgainst(d, orig[r0*rowBytes:(r0+n)*rowBytes], mask, dt, cols, r0)
		}
		f.Release(d)
		if opt.Progress != nil {
			opt.Progress(int64(n * rowBytes))
		}
	}
	res.add(CheckStructure, structErr)
	if opt.Original != nil && ch.checksRule() {
		if origErr != nil {
			ruleErr = origErr
		}
		res.add(CheckRule, ruleErr)
	}
	res.addMask(ch, &masks, structErr)
	if note := scan.note(); note != "" {
		res.Notes = append(res.Notes, note)
	}
	res.finish()
	return res, nil
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
// but the compressed forms of targets. It returns an error only when ctx
// is done, checked between chunks.
func checkOthers(ctx context.Context, ck, orig *checkpoint.Checkpoint, targets map[string]bool) ([]Result, error) {
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
			i, err := firstDiffChunked(ctx, a, b)
			f.Release(a)
			of.Release(b)
			switch {
			case err != nil:
				return nil, err
			case i >= 0:
				res.add(CheckIdentical, fmt.Errorf("byte %d of the tensor differs from the original", i))
			default:
				res.add(CheckIdentical, nil)
			}
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
	return out, nil
}

// firstDiffChunked is firstDiff in chunks of chunkBytes, returning
// ctx's error when it is done between chunks.
func firstDiffChunked(ctx context.Context, a, b []byte) (int, error) {
	n := min(len(a), len(b))
	for off := 0; off < n; off += chunkBytes {
		if err := ctx.Err(); err != nil {
			return -1, err
		}
		end := min(off+chunkBytes, n)
		if i := firstDiff(a[off:end], b[off:end]); i >= 0 {
			return off + i, nil
		}
	}
	if len(a) != len(b) {
		return n, nil
	}
	return -1, nil
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
