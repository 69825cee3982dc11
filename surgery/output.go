package surgery

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/sfsurgery/sfsurgery/hfcache"
)

// DefaultOutput returns the output path a command writes when it is given
// none: a name in the current directory, the model's name (see ModelName)
// with suffix added ("-2of4" for prune, "-dense" for unpack), and
// ".safetensors" after it when input is a single .safetensors file. It
// never points into the input's directory, which for a model in the
// Hugging Face cache is the cache.
func DefaultOutput(input, suffix string) string {
	name := ModelName(input) + suffix
	if isFile(input) {
		name += ".safetensors"
	}
	return name
}

// ModelName names the checkpoint at input: a single .safetensors file by
// its name without the extension; a model directory, or the index file
// in one, by the directory's name; a snapshot directory of the Hugging
// Face cache (models--org--name/snapshots/<hash>) by the model's name,
// not the commit hash.
func ModelName(input string) string {
	p := filepath.Clean(input)
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	switch {
	case isFile(p):
		return strings.TrimSuffix(filepath.Base(p), ".safetensors")
	case strings.HasSuffix(p, ".json") && !isDir(p):
		p = filepath.Dir(p)
	}
	if id, ok := hfcache.SnapshotModel(p); ok {
		return id.Name
	}
	switch base := filepath.Base(p); base {
	case "", ".", "..", string(filepath.Separator):
		return "model"
	default:
		return base
	}
}

// isFile reports whether path names a single .safetensors file rather
// than a directory.
func isFile(path string) bool {
	return strings.HasSuffix(filepath.Clean(path), ".safetensors") && !isDir(path)
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
