package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// This file decides what an output may replace, and replaces it so that
// the output path names a whole old or a whole new output at every
// moment, and never something that changed hands while the new one was
// written.
//
// The rules (TestForce* in replace_test.go hold them):
//   - an output path that is the working directory or contains it is
//     refused, with or without Force;
//   - an existing empty directory is replaced by a directory output
//     without Force;
//   - with Force, a directory is replaced only when it holds nothing but
//     regular files that are weights (.safetensors), an index, or names
//     the new output writes itself (or WriteOptions.Replaceable lists):
//     never a subdirectory, never a file the new output would not
//     re-create; a file is replaced only by the same kind of file, and
//     a safetensors output only replaces a file that reads as one;
//   - whatever was at the path when the write began is what is replaced:
//     when something else is there at the end, the write fails and the
//     newcomer is left as it is.

// prior is what was at an output path when a write began.
type prior struct {
	exists   bool
	empty    bool // an empty directory (replaced without Force)
	dev, ino uint64
}

// same reports whether fi is the file that pr describes.
func (pr prior) same(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Dev) == pr.dev && uint64(st.Ino) == pr.ino
}

// replacer checks that the existing output at path (described by fi)
// may be replaced with Force.
type replacer func(path string, fi fs.FileInfo) error

// destination checks the output path before anything is written and
// returns what is there. A missing path is fine. An existing one fails
// with ErrExist unless force is set (or, for a directory output, it is an
// empty directory); with force it must pass ok, else the error wraps
// ErrNotReplaceable.
func destination(path string, force, wantDir bool, ok replacer) (prior, error) {
	if err := checkWorkingDir(path); err != nil {
		return prior{}, err
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return prior{}, nil
	}
	if err != nil {
		return prior{}, osError(path, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	pr := prior{exists: true}
	if st != nil {
		pr.dev, pr.ino = uint64(st.Dev), uint64(st.Ino)
	}
	if wantDir && fi.IsDir() && isEmptyDir(path) {
		pr.empty = true
		return pr, nil
	}
	if !force {
		return pr, &Error{File: path, Off: -1, Err: ErrExist, Detail: "use --force to replace it"}
	}
	switch {
	case wantDir && !fi.IsDir():
		return pr, &Error{File: path, Off: -1, Err: ErrNotReplaceable, Detail: "it is not a directory"}
	case !wantDir && !fi.Mode().IsRegular():
		return pr, &Error{File: path, Off: -1, Err: ErrNotReplaceable, Detail: "it is not a regular file"}
	}
	if ok != nil {
		if err := ok(path, fi); err != nil {
			return pr, err
		}
	}
	return pr, nil
}

// checkWorkingDir refuses an output path that is the working directory
// or one of its ancestors: replacing it would pull the directory from
// under the user's shell.
func checkWorkingDir(path string) error {
	wd, err := os.Getwd()
	if err != nil {
		return nil // no working directory to protect
	}
	out, cwd := resolvePath(path), resolvePath(wd)
	switch {
	case out == cwd:
		return &Error{File: path, Off: -1, Err: ErrNotReplaceable, Detail: "it is the current directory; name a new directory with -o"}
	case within(cwd, out):
		return &Error{File: path, Off: -1, Err: ErrNotReplaceable, Detail: "it contains the current directory " + wd}
	}
	return nil
}

// isEmptyDir reports whether path is a directory with no entries.
func isEmptyDir(path string) bool {
	d, err := os.Open(path)
	if err != nil {
		return false
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	return len(names) == 0 && err != nil
}

// dirReplacer returns the check of an existing output directory: it may
// hold only regular files (or links to them) that are weights, an index,
// or named by writes (the new output's own names) or extra.
func dirReplacer(writes map[string]string, extra []string) replacer {
	return func(path string, _ fs.FileInfo) error {
		entries, err := os.ReadDir(path)
		if err != nil {
			return osError(path, err)
		}
		var foreign []string
		for _, e := range entries {
			name := e.Name()
			fi, err := os.Stat(filepath.Join(path, name))
			switch {
			case err != nil || fi.IsDir():
				foreign = append(foreign, name+"/")
			case !fi.Mode().IsRegular():
				foreign = append(foreign, name)
			case strings.HasSuffix(name, ".safetensors"), strings.HasSuffix(name, ".safetensors.index.json"):
			default:
				if _, ours := writes[name]; !ours && !containsString(extra, name) {
					foreign = append(foreign, name)
				}
			}
		}
		if len(foreign) == 0 {
			return nil
		}
		return &Error{File: path, Off: -1, Err: ErrNotReplaceable,
			Detail: fmt.Sprintf("it holds %s, which this output would not re-create; --force replaces only a checkpoint or an earlier output (move them away or choose another -o)", nameList(foreign))}
	}
}

// containsString reports whether list holds s.
func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// safetensorsReplacer allows replacing a file only when it reads as a
// safetensors file.
func safetensorsReplacer(path string, fi fs.FileInfo) error {
	f, err := os.Open(path)
	if err != nil {
		return osError(path, err)
	}
	defer f.Close()
	if _, err := ReadHeader(f, fi.Size()); err != nil {
		return &Error{File: path, Off: -1, Err: ErrNotReplaceable, Detail: "it is not a safetensors file (" + err.Error() + ")"}
	}
	return nil
}

// install moves the complete output tmp to abs (named shown in errors)
// when what is at abs is still what pr describes, and returns the path
// where the replaced output now is ("" when there was none), for the
// caller to remove once the parent is synced. recheck, when set, is run
// on the replaced output before it is let go: if it fails, the two are
// put back. On failure tmp is removed and abs holds what it held.
func install(tmp, abs, shown string, pr prior, recheck func(old string) error) (string, error) {
	if !pr.exists {
		err := renameNoReplace(tmp, abs)
		if err != nil {
			if errors.Is(err, fs.ErrExist) {
				return "", discardTemp(tmp, &Error{File: shown, Off: -1, Err: ErrExist, Detail: "created by someone else while this output was written; left as it is"})
			}
			return "", discardTemp(tmp, osError(shown, err))
		}
		return "", nil
	}
	old, err := exchange(tmp, abs)
	if err != nil {
		return "", discardTemp(tmp, osError(shown, err))
	}
	fi, serr := os.Lstat(old)
	why := ""
	switch {
	case serr != nil:
		why = serr.Error()
	case !pr.same(fi):
		why = "replaced by someone else while this output was written"
	case pr.empty && !isEmptyDir(old):
		why = "the empty directory there was filled by someone else while this output was written"
	case recheck != nil:
		if err := recheck(old); err != nil {
			why = "it changed while this output was written: " + err.Error()
		}
	}
	if why == "" {
		return old, nil
	}
	return "", putBack(old, abs, shown, why, os.RemoveAll)
}

// putBack undoes install's exchange when what it replaced, now at old,
// must stay (why says why): that returns to abs (named shown in errors),
// and the new output, which the exchange moves to a temporary name, is
// removed with remove (os.RemoveAll; TestPutBack passes one that fails).
// The error wraps ErrNotReplaceable; when the new output cannot be
// removed it says where the new output was left and why, and when the
// exchange fails, where each of the two is.
func putBack(old, abs, shown, why string, remove func(string) error) error {
	ours, err := exchange(old, abs)
	if err != nil {
		return &Error{File: shown, Off: -1, Err: ErrNotReplaceable,
			Detail: why + "; putting it back failed (" + err.Error() + "): it is at " + old + " and the new output at " + shown}
	}
	detail := why + "; left as it is"
	if err := remove(ours); err != nil {
		detail += "; the new output is left at " + ours + " (removing it failed: " + err.Error() + ")"
	}
	return &Error{File: shown, Off: -1, Err: ErrNotReplaceable, Detail: detail}
}
