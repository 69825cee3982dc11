package surgery

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// DefaultOutput returns the output path prune uses when none is given:
// "-2of4" added before ".safetensors" for a single file, or to the model
// directory's name.
func DefaultOutput(input string) string {
	input = filepath.Clean(input)
	if strings.HasSuffix(input, ".safetensors") && !isDir(input) {
		return strings.TrimSuffix(input, ".safetensors") + "-2of4.safetensors"
	}
	if filepath.Base(input) == checkpoint.IndexName {
		input = filepath.Dir(input)
	}
	return input + "-2of4"
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
