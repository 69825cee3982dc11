package hfcache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

var (
	// ErrNotCached reports a model, revision or snapshot that is not in
	// the cache.
	ErrNotCached = errors.New("not in the Hugging Face cache")
	// ErrBadRef reports a refs/<revision> file that does not hold a
	// commit hash.
	ErrBadRef = errors.New("does not hold a commit hash")
	// ErrNoCacheDir reports an environment that names no cache
	// directory: none of the variables Dir reads is set.
	ErrNoCacheDir = errors.New("no Hugging Face cache directory: set HF_HUB_CACHE, HF_HOME or HOME")
)

// Dir returns the cache directory as huggingface_hub finds it, reading
// the environment through getenv: $HF_HUB_CACHE, else the older
// $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else $HOME/.cache/huggingface/hub. A
// leading "~" is expanded to $HOME.
func Dir(getenv func(string) string) (string, error) {
	home := getenv("HOME")
	if home == "" {
		home = getenv("USERPROFILE")
	}
	expand := func(p string) (string, error) {
		if p != "~" && !strings.HasPrefix(p, "~/") {
			return p, nil
		}
		if home == "" {
			return "", fmt.Errorf("%s: cannot expand ~: %w", p, ErrNoCacheDir)
		}
		return filepath.Join(home, p[1:]), nil
	}
	for _, v := range []struct{ name, sub string }{
		{"HF_HUB_CACHE", ""},
		{"HUGGINGFACE_HUB_CACHE", ""},
		{"HF_HOME", "hub"},
		{"XDG_CACHE_HOME", filepath.Join("huggingface", "hub")},
	} {
		if p := getenv(v.name); p != "" {
			p, err := expand(p)
			if err != nil {
				return "", fmt.Errorf("$%s: %w", v.name, err)
			}
			return filepath.Join(p, v.sub), nil
		}
	}
	if home == "" {
		return "", ErrNoCacheDir
	}
	return filepath.Join(home, ".cache", "huggingface", "hub"), nil
}

// Resolve returns the snapshot directory of id in the cache directory
// dir: snapshots/<hash> of the model, where hash is the revision when it
// is a 40-hex commit hash and otherwise what refs/<revision> holds. A
// missing model directory, ref or snapshot is an error wrapping
// ErrNotCached that names what is missing and dir.
func Resolve(dir string, id ID) (string, error) {
	repo := id.RepoDir()
	if err := needDir(dir, repo, id); err != nil {
		return "", err
	}
	rev := id.rev()
	hash, via := rev, ""
	if !isCommit(rev) {
		ref := filepath.Join(repo, "refs", filepath.FromSlash(rev))
		b, err := os.ReadFile(filepath.Join(dir, ref))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", notCached(id, dir, ref, "")
		case err != nil:
			return "", fmt.Errorf("model %s: %w", id, err)
		}
		hash = strings.TrimSpace(string(b))
		if !isCommit(hash) {
			return "", fmt.Errorf("model %s: %s holds %q, which %w", id, filepath.Join(dir, ref), truncate(hash, 48), ErrBadRef)
		}
		via = ", which refs/" + rev + " names"
	}
	snap := filepath.Join(repo, "snapshots", hash)
	if err := needDirVia(dir, snap, id, via); err != nil {
		return "", err
	}
	return filepath.Join(dir, snap), nil
}

// needDir checks that rel is a directory under dir.
func needDir(dir, rel string, id ID) error { return needDirVia(dir, rel, id, "") }

// needDirVia checks that rel is a directory under dir; via explains
// where rel came from.
func needDirVia(dir, rel string, id ID, via string) error {
	fi, err := os.Stat(filepath.Join(dir, rel))
	switch {
	case errors.Is(err, fs.ErrNotExist), err == nil && !fi.IsDir():
		return notCached(id, dir, rel, via)
	case err != nil:
		return fmt.Errorf("model %s: %w", id, err)
	}
	return nil
}

// notCached is the error for the missing path rel of the cache at dir.
func notCached(id ID, dir, rel, via string) error {
	return fmt.Errorf("model %s is %w at %s (no %s%s)", id, ErrNotCached, dir, filepath.ToSlash(rel), via)
}

// truncate shortens s to at most n bytes for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Locate returns the local path a checkpoint argument names. An existing
// path always wins: arg is returned as it is when it exists, when it
// cannot be a model id (see ParseID; names ending in .safetensors or .json
// are paths), or when stat fails for a reason other than its absence.
// Otherwise arg is a model id, resolved in the cache directory that Dir
// finds through getenv.
func Locate(arg string, getenv func(string) string) (string, error) {
	_, err := os.Stat(arg)
	if err == nil || !errors.Is(err, fs.ErrNotExist) ||
		strings.HasSuffix(arg, ".safetensors") || strings.HasSuffix(arg, ".json") {
		return arg, nil
	}
	id, perr := ParseID(arg)
	if perr != nil {
		return arg, nil
	}
	dir, err := Dir(getenv)
	if err != nil {
		return "", fmt.Errorf("model %s: %w", id, err)
	}
	return Resolve(dir, id)
}

// SnapshotModel reports whether path is a snapshot directory of a cache,
// .../models--org--name/snapshots/<hash>, and returns its model id with
// the hash as revision.
func SnapshotModel(path string) (ID, bool) {
	path = filepath.Clean(path)
	hash := filepath.Base(path)
	snaps := filepath.Dir(path)
	repo := filepath.Base(filepath.Dir(snaps))
	rest, ok := strings.CutPrefix(repo, "models--")
	if !isCommit(hash) || filepath.Base(snaps) != "snapshots" || !ok {
		return ID{}, false
	}
	org, name, ok := strings.Cut(rest, "--")
	if !ok {
		return ID{}, false
	}
	id, err := ParseID(org + "/" + name + "@" + hash)
	if err != nil {
		return ID{}, false
	}
	return id, true
}
