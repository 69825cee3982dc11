package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// This file holds what makes the writers atomic and safe: temporary
// names, no-clobber and exchanging renames, directory syncs, and the
// checks that keep an output off its inputs.

// tempTries bounds the attempts at a fresh temporary name.
const tempTries = 10000

// tempName returns dir/prefix followed by random digits.
func tempName(dir, prefix string) string {
	return filepath.Join(dir, prefix+strconv.FormatUint(rand.Uint64()%1e12, 10))
}

// discardTemp removes the temporary file or directory tmp of a write
// that failed with err, and returns err; if tmp cannot be removed, the
// error also says where it was left ([CleanStale] removes it at the next
// write of the same output). TestDiscardTemp holds both cases.
func discardTemp(tmp string, err error) error {
	if rerr := os.RemoveAll(tmp); rerr != nil {
		return fmt.Errorf("%w (and its temporary %s could not be removed: %v)", err, tmp, rerr)
	}
	return err
}

// createTemp creates a new file beside the output called base in dir,
// under this process's temporary name of kind "tmp" (see [CleanStale]),
// with mode perm (less the umask, unlike os.CreateTemp's 0600), open for
// reading and writing.
func createTemp(dir, base string, perm os.FileMode) (*os.File, string, error) {
	prefix := currentOwner().tempPrefix(base, "tmp")
	for range tempTries {
		name := tempName(dir, prefix)
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, name, err
	}
	return nil, "", &fs.PathError{Op: "createtemp", Path: filepath.Join(dir, prefix+"*"), Err: fs.ErrExist}
}

// mkdirTemp creates a new directory beside the output called base in
// dir, under this process's temporary name of kind "tmp", with mode 0777
// less the umask, unlike os.MkdirTemp's 0700.
func mkdirTemp(dir, base string) (string, error) {
	prefix := currentOwner().tempPrefix(base, "tmp")
	for range tempTries {
		name := tempName(dir, prefix)
		err := os.Mkdir(name, 0o777)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return name, err
	}
	return "", &fs.PathError{Op: "mkdirtemp", Path: filepath.Join(dir, prefix+"*"), Err: fs.ErrExist}
}

// renameNoReplace renames from to to, failing with an error that wraps
// fs.ErrExist if to exists (even as an empty directory, which a plain
// rename would replace). Where the file system lacks RENAME_NOREPLACE it
// falls back to a check and a rename, which has a window for a race.
func renameNoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if err == nil {
		return nil
	}
	if err != unix.EINVAL && err != unix.ENOSYS && err != unix.EOPNOTSUPP {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	if _, err := os.Lstat(to); err == nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: fs.ErrExist}
	}
	return os.Rename(from, to)
}

// exchange puts the file or directory from in the place of the existing
// one at to, so that to names either the old or the new one at every
// moment, and returns where the old one now is, for the caller to
// remove. It exchanges the two atomically (RENAME_EXCHANGE) where the file
// system can, and otherwise renames the old one aside first, moving it
// back if the second rename fails.
func exchange(from, to string) (old string, err error) {
	err = unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_EXCHANGE)
	if err == nil {
		return from, nil
	}
	if err != unix.EINVAL && err != unix.ENOSYS && err != unix.EOPNOTSUPP {
		return "", &os.LinkError{Op: "exchange", Old: from, New: to, Err: err}
	}
	return exchangeByRenames(from, to)
}

// exchangeByRenames is exchange with two renames instead of an
// exchange.
func exchangeByRenames(from, to string) (string, error) {
	dir, base := filepath.Split(to)
	if dir == "" {
		dir = "."
	}
	for range tempTries {
		aside := tempName(dir, currentOwner().tempPrefix(base, "old"))
		if err := renameNoReplace(to, aside); err != nil {
			if errors.Is(err, fs.ErrExist) {
				continue
			}
			return "", err
		}
		if err := os.Rename(from, to); err != nil {
			if rerr := os.Rename(aside, to); rerr != nil {
				return "", fmt.Errorf("%w (and moving the old directory back from %s failed: %v)", err, aside, rerr)
			}
			return "", err
		}
		return aside, nil
	}
	return "", &fs.PathError{Op: "rename aside", Path: to, Err: fs.ErrExist}
}

// syncDir fsyncs the directory dir, so that entries created or renamed in
// it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// protectedPaths returns the paths an output may not touch: protect, the
// files that FileRange sources in specs read from, and the From of extra
// files.
func protectedPaths(protect []string, specs [][]TensorSpec, extra []ExtraFile) []string {
	paths := append([]string(nil), protect...)
	for _, ss := range specs {
		for _, s := range ss {
			var f *File
			switch src := s.Src.(type) {
			case FileRange:
				f = src.File
			case *FileRange:
				if src != nil {
					f = src.File
				}
			}
			if f != nil && f.path != "" {
				paths = append(paths, f.path)
			}
		}
	}
	for _, e := range extra {
		if e.Data == nil && e.Make == nil && e.From != "" {
			paths = append(paths, e.From)
		}
	}
	return paths
}

// checkProtected fails with ErrOverwriteInput when out is one of
// protected (by name after resolving symbolic links, or as the same file),
// lies inside one of them, or contains one of them.
func checkProtected(out string, protected []string) error {
	outPath := resolvePath(out)
	outInfo, outErr := os.Stat(out)
	for _, p := range protected {
		if p == "" {
			continue
		}
		pPath := resolvePath(p)
		detail := ""
		switch {
		case pPath == outPath:
			detail = "it is the input " + p
		case within(outPath, pPath):
			detail = "it lies inside the input directory " + p
		case within(pPath, outPath):
			detail = "it contains the input " + p
		case outErr == nil:
			if pInfo, err := os.Stat(p); err == nil && os.SameFile(outInfo, pInfo) {
				detail = "it is the same file as the input " + p
			}
		}
		if detail != "" {
			return &Error{File: out, Off: -1, Err: ErrOverwriteInput, Detail: detail}
		}
	}
	return nil
}

// resolvePath returns the absolute form of p with symbolic links resolved
// as far as p exists.
func resolvePath(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		abs = filepath.Clean(p)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r
	}
	dir, base := filepath.Split(abs)
	dir = filepath.Clean(dir)
	if dir == abs || base == "" {
		return abs
	}
	return filepath.Join(resolvePath(dir), base)
}

// within reports whether the clean absolute path child lies strictly
// inside the directory parent.
func within(child, parent string) bool {
	rel, err := filepath.Rel(parent, child)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
