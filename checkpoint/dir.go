package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
)

// ErrInvalidFileName is wrapped by the error WriteDir returns when a shard
// or extra file name is not a plain file name, is used twice, or is the
// index's name.
var ErrInvalidFileName = errors.New("invalid output file name")

// WriteDir writes the checkpoint out describes as the directory dir: each
// shard as a safetensors file written as [WriteFile] writes one (shards
// are written concurrently, opt.Workers tensors at a time in all), the
// index model.safetensors.index.json when out.Index is set or there is
// more than one shard, and out.Files (those with Make last, after every
// tensor is written).
//
// The index is {"metadata": {...}, "weight_map": {...}} with sorted keys
// and a two-space indent, as Hugging Face writes it: out.IndexMetadata
// with "total_size" set to the sum of the tensors' bytes, and every tensor
// name mapped to its shard.
//
// Everything is built in a temporary sibling directory named after the
// output and this process (see [CleanStale], which runs first and tells
// opt.Stale what it finds) and synced; only then is it renamed to dir and
// the parent synced: that rename is the one moment the output appears.
// On failure or cancellation the temporary directory is removed and dir
// is untouched. An existing dir fails with [ErrExist] unless it is an
// empty directory or opt.Force is set; with Force it must be a directory
// that holds only weights, an index and files the new output writes (or
// opt.Replaceable names), else the error wraps [ErrNotReplaceable]. The
// new directory replaces the old atomically where the file system can
// exchange the two (otherwise the old one is renamed aside first and
// moved back if the second rename fails), so that dir always holds a
// whole checkpoint, and the old one is removed last. What is replaced is
// what was there when the write began: anything else found there at the
// end is left alone and the write fails. A dir that is, lies inside or
// contains one of opt.Protect, a file a source reads from, or an extra
// file's From fails with [ErrOverwriteInput] before anything is written;
// so does (with [ErrNotReplaceable]) the working directory or one of its
// ancestors. opt may be nil.
func WriteDir(ctx context.Context, dir string, out *Output, opt *WriteOptions) error {
	if opt == nil {
		opt = &WriteOptions{}
	}
	if out == nil {
		return &Error{File: dir, Off: -1, Err: ErrInvalidFileName, Detail: "nil Output"}
	}
	jobs, index, names, err := planDir(dir, out)
	if err != nil {
		return err
	}
	specs := make([][]TensorSpec, len(out.Shards))
	for i, s := range out.Shards {
		specs[i] = s.Tensors
	}
	if err := checkProtected(dir, protectedPaths(opt.Protect, specs, out.Files)); err != nil {
		return err
	}
	pr, err := destination(dir, opt.Force, true, dirReplacer(names, opt.Replaceable))
	if err != nil {
		return err
	}
	abs, aerr := filepath.Abs(dir)
	if aerr != nil {
		return osError(dir, aerr)
	}
	parent, base := filepath.Split(abs)
	if base == "" {
		return &Error{File: dir, Off: -1, Err: ErrInvalidFileName, Detail: "cannot write a checkpoint as the root directory"}
	}
	if err := ctx.Err(); err != nil {
		return &Error{File: dir, Off: -1, Err: err, Detail: "before writing"}
	}
	reportStale(dir, opt)
	tmp, terr := mkdirTemp(parent, base)
	if terr != nil {
		return osError(dir, terr)
	}
	if err := fillDir(ctx, tmp, dir, jobs, index, out.Files, opt); err != nil {
		return discardTemp(tmp, err)
	}
	if err := ctx.Err(); err != nil {
		return discardTemp(tmp, &Error{File: dir, Off: -1, Err: err, Detail: "before renaming into place"})
	}
	var recheck func(string) error
	if pr.exists && !pr.empty {
		check := dirReplacer(names, opt.Replaceable)
		recheck = func(old string) error { return check(old, nil) }
	}
	old, err := install(tmp, abs, dir, pr, recheck)
	if err != nil {
		return err
	}
	return finishInstall(abs, dir, old)
}

// reportStale cleans the stale temporary names of earlier writes to path
// and tells opt.Stale about them.
func reportStale(path string, opt *WriteOptions) {
	found, err := CleanStale(path)
	if err != nil || opt.Stale == nil {
		return
	}
	for _, s := range found {
		opt.Stale(s)
	}
}

// finishInstall syncs the parent of the installed output abs (named shown
// in errors) and removes the output it replaced, now at old ("" for
// none). Its errors wrap [ErrInstalled]: the output is in place.
func finishInstall(abs, shown, old string) error {
	if err := syncDir(filepath.Dir(abs)); err != nil {
		return &Error{File: shown, Off: -1, Err: ErrInstalled, Detail: "syncing its directory failed: " + err.Error()}
	}
	if old != "" {
		if err := os.RemoveAll(old); err != nil {
			return &Error{File: shown, Off: -1, Err: ErrInstalled, Detail: "removing the replaced output, now at " + old + ", failed: " + err.Error()}
		}
	}
	return nil
}

// planDir validates out and computes the layout of every shard and the
// index (nil when none is written). The jobs have no open files yet.
func planDir(dir string, out *Output) ([]*fileJob, []byte, map[string]string, error) {
	names := make(map[string]string, len(out.Shards)+len(out.Files)+1)
	claim := func(name, what string) error {
		if err := checkFileName(name); err != "" {
			return &Error{File: dir, Off: -1, Err: ErrInvalidFileName, Detail: fmt.Sprintf("%s %q: %s", what, name, err)}
		}
		if prev, dup := names[name]; dup {
			return &Error{File: dir, Off: -1, Err: ErrInvalidFileName, Detail: fmt.Sprintf("%s %q has the name of %s", what, name, prev)}
		}
		names[name] = what + " " + name
		return nil
	}
	if len(out.Shards) == 0 {
		return nil, nil, nil, &Error{File: dir, Off: -1, Err: ErrInvalidFileName, Detail: "no shards"}
	}
	if err := claim(IndexName, "the index"); err != nil {
		return nil, nil, nil, err
	}
	jobs := make([]*fileJob, len(out.Shards))
	weightMap := make(map[string]string)
	var total int64
	for i, s := range out.Shards {
		if err := claim(s.Name, "shard"); err != nil {
			return nil, nil, nil, err
		}
		if !strings.HasSuffix(s.Name, ".safetensors") || strings.HasPrefix(s.Name, ".") {
			return nil, nil, nil, &Error{File: dir, Off: -1, Err: ErrInvalidFileName,
				Detail: fmt.Sprintf("shard %q: a shard name ends in .safetensors and does not start with a dot", s.Name)}
		}
		path := filepath.Join(dir, s.Name)
		p, err := planFile(s.Tensors, s.Metadata)
		if err != nil {
			err.File = path
			return nil, nil, nil, err
		}
		for _, t := range s.Tensors {
			if prev, dup := weightMap[t.Name]; dup {
				return nil, nil, nil, &Error{File: path, Tensor: t.Name, Off: -1, Err: ErrInvalidTensorName, Detail: "also in shard " + prev}
			}
			weightMap[t.Name] = s.Name
		}
		total += p.total - p.dataOff
		jobs[i] = &fileJob{path: path, plan: p, specs: s.Tensors}
	}
	for _, e := range out.Files {
		if err := claim(e.Name, "extra file"); err != nil {
			return nil, nil, nil, err
		}
		if e.Data == nil && e.Make == nil && e.From == "" {
			return nil, nil, nil, &Error{File: filepath.Join(dir, e.Name), Off: -1, Err: ErrInvalidFileName, Detail: "extra file has neither Data, Make nor From"}
		}
	}
	if !out.Index && len(out.Shards) == 1 {
		return jobs, nil, names, nil
	}
	index, err := encodeIndex(out.IndexMetadata, total, weightMap)
	if err != nil {
		return nil, nil, nil, &Error{File: filepath.Join(dir, IndexName), Off: -1, Err: err, Detail: "encoding the index"}
	}
	return jobs, index, names, nil
}

// checkFileName returns why name cannot be a file of the output
// directory, or "" when it can.
func checkFileName(name string) string {
	switch {
	case name == "":
		return "empty name"
	case name == "." || name == "..":
		return "not a file name"
	case strings.ContainsAny(name, "/\x00"):
		return "not a plain file name"
	}
	return ""
}

// encodeIndex returns the index JSON: metadata with total_size, and the
// weight map, sorted, indented by two spaces, with a final newline.
func encodeIndex(metadata map[string]any, total int64, weightMap map[string]string) ([]byte, error) {
	md := maps.Clone(metadata)
	if md == nil {
		md = make(map[string]any, 1)
	}
	md["total_size"] = total
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	err := enc.Encode(struct {
		Metadata  map[string]any    `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{md, weightMap})
	return b.Bytes(), err
}

// fillDir writes the extra files, the shards and the index into the
// empty directory tmp and syncs it. dir is the final name, for errors.
func fillDir(ctx context.Context, tmp, dir string, jobs []*fileJob, index []byte, extra []ExtraFile, opt *WriteOptions) error {
	for _, e := range extra {
		if e.Make != nil && e.Data == nil {
			continue
		}
		if err := writeExtra(tmp, dir, e); err != nil {
			return err
		}
	}
	if err := writeShards(ctx, tmp, jobs, opt); err != nil {
		return err
	}
	if index != nil {
		if err := writeExtra(tmp, dir, ExtraFile{Name: IndexName, Data: index}); err != nil {
			return err
		}
	}
	for _, e := range extra {
		if e.Make == nil || e.Data != nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			return &Error{File: filepath.Join(dir, e.Name), Off: -1, Err: err, Detail: "before writing"}
		}
		if err := writeExtra(tmp, dir, e); err != nil {
			return err
		}
	}
	if err := syncDir(tmp); err != nil {
		return osError(dir, err)
	}
	return nil
}

// writeShards creates the shard files in tmp, writes them and syncs and
// closes them.
func writeShards(ctx context.Context, tmp string, jobs []*fileJob, opt *WriteOptions) (err error) {
	defer func() {
		for _, j := range jobs {
			if j.f != nil {
				if cerr := j.f.Close(); err == nil && cerr != nil {
					err = osError(j.path, cerr)
				}
				j.f = nil
			}
		}
	}()
	for _, j := range jobs {
		f, err := os.OpenFile(filepath.Join(tmp, filepath.Base(j.path)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if err != nil {
			return osError(j.path, err)
		}
		j.f = f
		if err := j.start(); err != nil {
			return err
		}
	}
	if err := writeTensors(ctx, jobs, opt); err != nil {
		return err
	}
	for _, j := range jobs {
		if err := j.f.Sync(); err != nil {
			return osError(j.path, err)
		}
	}
	return nil
}

// writeExtra writes the extra file e into tmp and syncs it; dir is the
// final directory name, for errors.
func writeExtra(tmp, dir string, e ExtraFile) (err error) {
	path := filepath.Join(dir, e.Name)
	perm := os.FileMode(0o666)
	var src *os.File
	if e.Data == nil && e.Make != nil {
		if e.Data, err = e.Make(); err != nil {
			return &Error{File: path, Off: -1, Err: err, Detail: "making the file"}
		}
		if e.Data == nil {
			e.Data = []byte{}
		}
	}
	if e.Data == nil {
		src, err = os.Open(e.From)
		if err != nil {
			return osError(e.From, err)
		}
		defer src.Close()
		fi, err := src.Stat()
		if err != nil {
			return osError(e.From, err)
		}
		if !fi.Mode().IsRegular() {
			return &Error{File: e.From, Off: -1, Err: ErrInvalidFileName, Detail: "extra file source is not a regular file"}
		}
		perm = fi.Mode().Perm()
	}
	f, err := os.OpenFile(filepath.Join(tmp, e.Name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return osError(path, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = osError(path, cerr)
		}
	}()
	if src != nil {
		// *os.File to *os.File: io.Copy uses copy_file_range where it can.
		if _, err := io.Copy(f, src); err != nil {
			return &Error{File: path, Off: -1, Err: err, Detail: "copying from " + e.From}
		}
	} else if _, err := f.Write(e.Data); err != nil {
		return osError(path, err)
	}
	if err := f.Sync(); err != nil {
		return osError(path, err)
	}
	return nil
}
