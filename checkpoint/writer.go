package checkpoint

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"
)

// ErrSourceSize is wrapped by the error a writer returns when a tensor's
// source writes more or fewer bytes than the tensor's size, or has none.
var ErrSourceSize = errors.New("tensor source wrote the wrong number of bytes")

// WriteFile writes tensors and metadata as one safetensors file at path.
//
// The header is computed from the specs alone, in the reference order
// (see [Layout]); then the file is built under a temporary name in path's
// directory that says which process made it (see [CleanStale], which runs
// first and tells opt.Stale what it finds): sized, given its header, and
// filled by up to opt.Workers tensors written in parallel, each at its
// own offset. [FileRange] sources are copied by the kernel
// (copy_file_range) where it can. When every source has written exactly
// its tensor's bytes the file is synced and renamed to path, and the
// directory is synced.
//
// WriteFile never leaves a partial file: when ctx is cancelled, a source
// fails or writes the wrong number of bytes (an error wrapping
// [ErrSourceSize]), or anything else goes wrong, the temporary file is
// removed and path is untouched. An existing path fails with [ErrExist]
// unless opt.Force is set; then it must be a safetensors file (else
// [ErrNotReplaceable]), and is replaced atomically, provided it is still
// the file that was there when the write began. A path that is, or lies
// inside, one of opt.Protect or one of the files the sources read from
// fails with [ErrOverwriteInput] before anything is written. opt.Beside
// files are built after the tensors and renamed into place right after
// path, whose rename is the moment the output appears; from then on the
// write is not cancelled, and an error says that path was written. opt
// may be nil.
//
// Each source gets its own [io.Writer], which is not safe for concurrent
// use and fails once ctx is cancelled; a source that blocks without
// writing cannot be cancelled. An error of a source is returned as the
// source worded it (it names what it read); see [SourceError].
func WriteFile(ctx context.Context, path string, tensors []TensorSpec, metadata map[string]string, opt *WriteOptions) error {
	if opt == nil {
		opt = &WriteOptions{}
	}
	p, perr := planFile(tensors, metadata)
	if perr != nil {
		perr.File = path
		return perr
	}
	if err := checkProtected(path, protectedPaths(opt.Protect, [][]TensorSpec{tensors}, nil)); err != nil {
		return err
	}
	pr, err := destination(path, opt.Force, false, safetensorsReplacer)
	if err != nil {
		return err
	}
	beside, err := planBeside(path, opt)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return &Error{File: path, Off: -1, Err: err, Detail: "before writing"}
	}
	reportStale(path, opt)
	tmp, err := writeTempFile(ctx, path, p, tensors, opt)
	if err != nil {
		return err
	}
	if err := beside.build(ctx); err != nil {
		return discardTemp(tmp, err)
	}
	if err := ctx.Err(); err != nil {
		beside.discard()
		return discardTemp(tmp, &Error{File: path, Off: -1, Err: err, Detail: "before renaming into place"})
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		beside.discard()
		return discardTemp(tmp, osError(path, err))
	}
	recheck := func(old string) error {
		fi, err := os.Lstat(old)
		if err != nil {
			return err
		}
		return safetensorsReplacer(old, fi)
	}
	old, err := install(tmp, abs, path, pr, recheck)
	if err != nil {
		beside.discard()
		return err
	}
	// The output is in place: what follows finishes it and is not
	// cancelled.
	berr := beside.install(path)
	if err := finishInstall(abs, path, old); err != nil {
		return err
	}
	return berr
}

// writeTempFile writes the file p lays out as a new temporary file beside
// path, synced and closed, and returns its name. On failure it removes it.
func writeTempFile(ctx context.Context, path string, p *filePlan, tensors []TensorSpec, opt *WriteOptions) (string, error) {
	f, tmp, err := createTemp(dirOf(path), filepath.Base(path), 0o666)
	if err != nil {
		return "", osError(path, err)
	}
	j := &fileJob{path: path, f: f, plan: p, specs: tensors}
	err = j.start()
	if err == nil {
		err = writeTensors(ctx, []*fileJob{j}, opt)
	}
	if err == nil {
		if serr := f.Sync(); serr != nil {
			err = osError(path, serr)
		}
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = osError(path, cerr)
	}
	if err != nil {
		return "", discardTemp(tmp, err)
	}
	return tmp, nil
}

// dirOf returns the directory of path, "." for a bare file name.
func dirOf(path string) string {
	if dir, _ := filepath.Split(path); dir != "" {
		return dir
	}
	return "."
}

// Layout returns the header that [WriteFile] would write for tensors and
// metadata, without writing anything: Tensors in file order with their
// data offsets, Metadata (nil when empty) and DataOffset. The order is the
// reference implementation's: by dtype rank descending (the order of its
// Dtype enum, so U64, I64, F64, C64, F32, U32, I32, BF16, F16, U16, I16,
// F8_E8M0, F8_E4M3, F8_E5M2, I8, U8, F6_E3M2, F6_E2M3, F4, BOOL), then by
// name. It fails as WriteFile does on invalid specs: an empty, duplicate,
// non-UTF-8 or reserved ("__metadata__") name wraps [ErrInvalidTensorName];
// an unknown dtype [ErrUnknownDType]; a negative dimension
// [ErrTensorInvalidInfo]; a size past 2^63-1 bytes [ErrOverflow]; a
// sub-byte tensor that does not fill whole bytes [ErrMisaligned]; non-UTF-8
// metadata [ErrInvalidMetadata]; a header past [MaxHeaderLen]
// [ErrHeaderTooLarge].
func Layout(tensors []TensorSpec, metadata map[string]string) (*Header, error) {
	p, err := planFile(tensors, metadata)
	if err != nil {
		return nil, err
	}
	h := &Header{Tensors: make([]TensorInfo, len(p.order)), DataOffset: p.dataOff}
	for k, i := range p.order {
		s := tensors[i]
		h.Tensors[k] = TensorInfo{
			Name:  s.Name,
			DType: s.DType,
			Shape: slices.Clone(s.Shape),
			Begin: p.begin[i],
			End:   p.begin[i] + p.size[i],
		}
	}
	if len(metadata) > 0 {
		h.Metadata = maps.Clone(metadata)
	}
	return h, nil
}

// FileSize returns the size in bytes of the file [WriteFile] would write
// for tensors and metadata, for a dry run. It fails as [Layout] does.
func FileSize(tensors []TensorSpec, metadata map[string]string) (int64, error) {
	p, err := planFile(tensors, metadata)
	if err != nil {
		return 0, err
	}
	return p.total, nil
}

// TensorSize returns the size in bytes of a tensor of dtype dt and the
// given shape. It fails as [Layout] does on an unknown dtype, a negative
// dimension, an overflow or a sub-byte tensor that does not fill whole
// bytes.
func TensorSize(dt DType, shape []int64) (int64, error) {
	n, err := specSize(TensorSpec{DType: dt, Shape: shape})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// filePlan is the computed layout of one file: everything but the data.
type filePlan struct {
	header  []byte  // length prefix, JSON and space padding
	order   []int   // indices of the specs in file order
	begin   []int64 // data-section offset of each spec, by spec index
	size    []int64 // byte size of each spec, by spec index
	dataOff int64   // file offset of the data section
	total   int64   // file size
}

// planFile validates specs and metadata and computes the file's layout.
// The returned error has no File.
func planFile(specs []TensorSpec, metadata map[string]string) (*filePlan, *Error) {
	p := &filePlan{
		order: make([]int, len(specs)),
		begin: make([]int64, len(specs)),
		size:  make([]int64, len(specs)),
	}
	seen := make(map[string]struct{}, len(specs))
	for i, s := range specs {
		if err := checkTensorName(s.Name); err != nil {
			return nil, err
		}
		if _, dup := seen[s.Name]; dup {
			return nil, &Error{Tensor: s.Name, Off: -1, Err: ErrInvalidTensorName, Detail: "duplicate name"}
		}
		seen[s.Name] = struct{}{}
		n, err := specSize(s)
		if err != nil {
			return nil, err
		}
		p.order[i], p.size[i] = i, n
	}
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, &Error{Off: -1, Err: ErrInvalidMetadata, Detail: fmt.Sprintf("entry %q is not valid UTF-8", k)}
		}
	}
	slices.SortFunc(p.order, func(a, b int) int {
		sa, sb := &specs[a], &specs[b]
		return cmp.Or(cmp.Compare(referenceRank(sb.DType), referenceRank(sa.DType)), strings.Compare(sa.Name, sb.Name))
	})
	var off int64
	for _, i := range p.order {
		if p.size[i] > math.MaxInt64-off {
			return nil, &Error{Tensor: specs[i].Name, Off: -1, Err: ErrOverflow, Detail: "tensors add up to more than 2^63-1 bytes"}
		}
		p.begin[i] = off
		off += p.size[i]
	}
	p.header = appendHeader(make([]byte, 0, 64+96*len(specs)), specs, p, metadata)
	n := int64(len(p.header) - headerLenSize)
	if n > MaxHeaderLen {
		return nil, &Error{Off: 0, Err: ErrHeaderTooLarge, Detail: fmt.Sprintf("header would be %d bytes", n)}
	}
	p.dataOff = int64(len(p.header))
	if off > math.MaxInt64-p.dataOff {
		return nil, &Error{Off: -1, Err: ErrOverflow, Detail: "file would be larger than 2^63-1 bytes"}
	}
	p.total = p.dataOff + off
	return p, nil
}

// checkTensorName reports whether name can be written as a tensor name.
func checkTensorName(name string) *Error {
	switch {
	case name == "":
		return &Error{Off: -1, Err: ErrInvalidTensorName, Detail: "empty name"}
	case name == metadataKey:
		return &Error{Tensor: name, Off: -1, Err: ErrInvalidTensorName, Detail: "the name is reserved for the metadata"}
	case !utf8.ValidString(name):
		return &Error{Tensor: name, Off: -1, Err: ErrInvalidTensorName, Detail: "not valid UTF-8"}
	}
	return nil
}

// specSize returns the byte size of s from its dtype and shape.
func specSize(s TensorSpec) (int64, *Error) {
	b := s.DType.Bits()
	if b == 0 {
		return 0, &Error{Tensor: s.Name, Off: -1, Err: ErrUnknownDType, Detail: strconv.Quote(string(s.DType))}
	}
	numel := uint64(1)
	for k, d := range s.Shape {
		if d < 0 {
			return 0, &Error{Tensor: s.Name, Off: -1, Err: ErrTensorInvalidInfo, Detail: fmt.Sprintf("dimension %d of shape %v is negative", k, s.Shape)}
		}
		hi, lo := bits.Mul64(numel, uint64(d))
		if hi != 0 {
			return 0, &Error{Tensor: s.Name, Off: -1, Err: ErrOverflow, Detail: fmt.Sprintf("shape %v has more than 2^64 elements", s.Shape)}
		}
		numel = lo
	}
	hi, nbits := bits.Mul64(numel, uint64(b))
	if hi != 0 || nbits/8 > math.MaxInt64 {
		return 0, &Error{Tensor: s.Name, Off: -1, Err: ErrOverflow, Detail: fmt.Sprintf("%s %v is more than 2^63-1 bytes", s.DType, s.Shape)}
	}
	if nbits%8 != 0 {
		return 0, &Error{Tensor: s.Name, Off: -1, Err: ErrMisaligned, Detail: fmt.Sprintf("%s %v is %d bits", s.DType, s.Shape, nbits)}
	}
	return int64(nbits / 8), nil
}

// referenceRank is the position of d in the reference implementation's
// Dtype enum, which its writer sorts tensors by (descending). Within one
// element size it is not alphabetical: BF16 ranks above F16, U64 above
// I64 above F64 above C64.
func referenceRank(d DType) int {
	switch d {
	case BOOL:
		return 0
	case F4:
		return 1
	case F6E2M3:
		return 2
	case F6E3M2:
		return 3
	case U8:
		return 4
	case I8:
		return 5
	case F8E5M2:
		return 6
	case F8E4M3:
		return 7
	case F8E8M0:
		return 8
	case I16:
		return 9
	case U16:
		return 10
	case F16:
		return 11
	case BF16:
		return 12
	case I32:
		return 13
	case U32:
		return 14
	case F32:
		return 15
	case C64:
		return 16
	case F64:
		return 17
	case I64:
		return 18
	case U64:
		return 19
	}
	return -1
}

// headerLenSize is the size of the little-endian header length prefix.
const headerLenSize = 8

// appendHeader appends the length prefix and the header JSON of p, space
// padded to a multiple of 8 bytes, to b, byte for byte as the reference
// (serde_json) writes it, with metadata keys sorted.
func appendHeader(b []byte, specs []TensorSpec, p *filePlan, metadata map[string]string) []byte {
	start := len(b)
	b = append(b, make([]byte, headerLenSize)...)
	b = append(b, '{')
	if len(metadata) > 0 {
		b = appendJSONString(b, metadataKey)
		b = append(b, ":{"...)
		for k, key := range slices.Sorted(maps.Keys(metadata)) {
			if k > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, key)
			b = append(b, ':')
			b = appendJSONString(b, metadata[key])
		}
		b = append(b, '}')
	}
	for k, i := range p.order {
		if k > 0 || len(metadata) > 0 {
			b = append(b, ',')
		}
		s := &specs[i]
		b = appendJSONString(b, s.Name)
		b = append(b, `:{"dtype":`...)
		b = appendJSONString(b, string(s.DType))
		b = append(b, `,"shape":[`...)
		for d, n := range s.Shape {
			if d > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, n, 10)
		}
		b = append(b, `],"data_offsets":[`...)
		b = strconv.AppendInt(b, p.begin[i], 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, p.begin[i]+p.size[i], 10)
		b = append(b, "]}"...)
	}
	b = append(b, '}')
	for (len(b)-start-headerLenSize)%8 != 0 {
		b = append(b, ' ')
	}
	binary.LittleEndian.PutUint64(b[start:], uint64(len(b)-start-headerLenSize))
	return b
}

// appendJSONString appends s (valid UTF-8) as a JSON string escaped as
// serde_json escapes it: quote, backslash and control characters only,
// with the short forms \b \f \n \r \t and lower-case \u00xx otherwise.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	last := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		var esc string
		switch c {
		case '"':
			esc = `\"`
		case '\\':
			esc = `\\`
		case '\b':
			esc = `\b`
		case '\f':
			esc = `\f`
		case '\n':
			esc = `\n`
		case '\r':
			esc = `\r`
		case '\t':
			esc = `\t`
		default:
			if c >= 0x20 {
				continue
			}
		}
		b = append(b, s[last:i]...)
		if esc != "" {
			b = append(b, esc...)
		} else {
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		last = i + 1
	}
	b = append(b, s[last:]...)
	return append(b, '"')
}

// fileJob is one output file being written: its open file, layout and
// specs. path is the name errors report (the final path, not the
// temporary one).
type fileJob struct {
	path  string
	f     *os.File
	plan  *filePlan
	specs []TensorSpec
}

// start sizes the file and writes its header.
func (j *fileJob) start() error {
	if err := j.f.Truncate(j.plan.total); err != nil {
		return &Error{File: j.path, Off: -1, Err: err, Detail: fmt.Sprintf("sizing the file to %d bytes", j.plan.total)}
	}
	if _, err := j.f.WriteAt(j.plan.header, 0); err != nil {
		return &Error{File: j.path, Off: 0, Err: err, Detail: "writing the header"}
	}
	return nil
}

// writeTensors writes the tensors of all jobs, at most opt.Workers at a
// time. They start in the order the caller listed the specs, not in file
// order: sources that share work (a compressed weight's values and its
// metadata) can then sit next to each other and finish together, instead
// of one waiting for the other at the far end of the file. The first
// failure cancels the rest.
func writeTensors(ctx context.Context, jobs []*fileJob, opt *WriteOptions) error {
	// Every job's tasks are planned before the first starts, so that a
	// planning error leaves no write running behind the caller.
	tasks := make([][]fileTask, len(jobs))
	for i, j := range jobs {
		var err error
		if tasks[i], err = j.tasks(); err != nil {
			return err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workerCount(opt.Workers))
	for i, j := range jobs {
		for _, t := range tasks[i] {
			if gctx.Err() != nil {
				break
			}
			if t.group != nil {
				g.Go(func() error { return j.writeGroup(gctx, t, opt) })
			} else {
				g.Go(func() error { return j.writeTensor(gctx, t.single, opt) })
			}
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	// A cancellation that came after the last tensor still fails the write.
	return ctx.Err()
}

// workerCount is the number of tensors written at once for Workers n.
func workerCount(n int) int {
	if n <= 0 {
		return runtime.GOMAXPROCS(0)
	}
	return n
}

// writeTensor writes spec i of j at its offset, and hands its digest to
// opt.Digest when that is set.
func (j *fileJob) writeTensor(ctx context.Context, i int, opt *WriteOptions) error {
	s := &j.specs[i]
	off := j.plan.dataOff + j.plan.begin[i]
	size := j.plan.size[i]
	if err := ctx.Err(); err != nil {
		return &Error{File: j.path, Tensor: s.Name, Off: off, Err: err}
	}
	var r *FileRange
	switch src := s.Src.(type) {
	case nil:
		if size != 0 {
			return &Error{File: j.path, Tensor: s.Name, Off: off, Err: ErrSourceSize, Detail: "no source"}
		}
		return j.digestFromFile(ctx, i, opt.Digest)
	case FileRange:
		r = &src
	case *FileRange:
		r = src
	}
	if r != nil {
		if err := j.copyRange(ctx, s, *r, off, size, opt.Progress); err != nil {
			return err
		}
		return j.digestFromFile(ctx, i, opt.Digest)
	}
	w := j.newTensorWriter(ctx, i, opt)
	_, err := s.Src.WriteTo(w)
	if err := j.finish(w, i, err); err != nil {
		return err
	}
	w.digest(s.Name, opt.Digest)
	return nil
}

// newTensorWriter returns the writer for spec i of j, hashing what it
// writes when opt asks for digests.
func (j *fileJob) newTensorWriter(ctx context.Context, i int, opt *WriteOptions) *tensorWriter {
	off := j.plan.dataOff + j.plan.begin[i]
	size := j.plan.size[i]
	w := &tensorWriter{
		ctx:      ctx,
		w:        io.NewOffsetWriter(j.f, off),
		end:      off + size,
		left:     size,
		wb:       writeback{f: j.f, from: off},
		progress: opt.Progress,
	}
	if opt.Digest != nil {
		w.hash = sha256.New()
	}
	return w
}

// finish flushes w, the writer of spec i, and turns the source's error
// and a short write into the tensor's error.
func (j *fileJob) finish(w *tensorWriter, i int, err error) error {
	s := &j.specs[i]
	size := j.plan.size[i]
	off := w.end - size
	w.wb.flush(w.end - w.left)
	at := off + size - w.left
	switch {
	case w.err != nil: // the writer's own failure wins over whatever the source made of it
		return &Error{File: j.path, Tensor: s.Name, Off: at, Err: w.err}
	case err != nil:
		return sourceError(j.path, s.Name, at, err)
	case w.left != 0:
		return &Error{File: j.path, Tensor: s.Name, Off: at, Err: ErrSourceSize,
			Detail: fmt.Sprintf("source wrote %d of %d bytes", size-w.left, size)}
	}
	return nil
}
