package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
)

// besideFile is one of WriteOptions.Beside on its way to its place next
// to an output file.
type besideFile struct {
	e    ExtraFile
	path string // where it goes
	tmp  string // its complete temporary file, once built
	pr   prior  // what was at path when the write began
}

// besideFiles are the files written next to one output file.
type besideFiles []*besideFile

// planBeside checks opt.Beside for the output file path: plain names,
// not inputs, and destinations that may be written (see [destination]).
func planBeside(path string, opt *WriteOptions) (besideFiles, error) {
	var out besideFiles
	dir := dirOf(path)
	for _, e := range opt.Beside {
		p := filepath.Join(dir, e.Name)
		if why := checkFileName(e.Name); why != "" || e.Name == filepath.Base(path) {
			if why == "" {
				why = "the output's own name"
			}
			return nil, &Error{File: p, Off: -1, Err: ErrInvalidFileName, Detail: why}
		}
		if err := checkProtected(p, opt.Protect); err != nil {
			return nil, err
		}
		pr, err := destination(p, opt.Force, false, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, &besideFile{e: e, path: p, pr: pr})
	}
	return out, nil
}

// build writes every file to a synced temporary file beside its place.
// On failure none is left.
func (bs besideFiles) build(ctx context.Context) error {
	for _, b := range bs {
		if err := ctx.Err(); err != nil {
			bs.discard()
			return &Error{File: b.path, Off: -1, Err: err, Detail: "before writing"}
		}
		data, err := b.e.contents()
		if err == nil {
			b.tmp, err = writeTempBytes(b.path, data)
		}
		if err != nil {
			bs.discard()
			return &Error{File: b.path, Off: -1, Err: err, Detail: "writing a file beside the output"}
		}
	}
	return nil
}

// discard removes the temporary files built so far.
func (bs besideFiles) discard() {
	for _, b := range bs {
		if b.tmp != "" {
			os.Remove(b.tmp)
			b.tmp = ""
		}
	}
}

// install renames every built file into place, after the output file
// main. It goes on past a failure and reports every one.
func (bs besideFiles) install(main string) error {
	var errs []error
	for _, b := range bs {
		abs, err := filepath.Abs(b.path)
		var old string
		if err == nil {
			old, err = install(b.tmp, abs, b.path, b.pr, nil)
		}
		b.tmp = ""
		if err == nil && old != "" {
			err = os.Remove(old)
		}
		if err != nil {
			errs = append(errs, &Error{File: main, Off: -1, Err: ErrInstalled,
				Detail: "the file beside it " + b.path + " was not put in place: " + err.Error()})
		}
	}
	return errors.Join(errs...)
}

// contents returns the file's bytes: Data, what Make returns, or the
// file at From.
func (e ExtraFile) contents() ([]byte, error) {
	switch {
	case e.Data != nil:
		return e.Data, nil
	case e.Make != nil:
		return e.Make()
	}
	return os.ReadFile(e.From)
}

// writeTempBytes writes data to a new synced temporary file beside path
// and returns its name.
func writeTempBytes(path string, data []byte) (string, error) {
	f, tmp, err := createTemp(dirOf(path), filepath.Base(path), 0o666)
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}
