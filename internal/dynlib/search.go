package dynlib

import (
	"path/filepath"
	"slices"
)

// Candidates lists the files dlopen tries for an NVIDIA library
// that is not part of the driver: names first (sonames that the loader
// finds through LD_LIBRARY_PATH and its cache), then the files matching
// the glob file in the pip wheels' folders subs under common Python
// prefixes (venv, /opt/*/.venv, /opt/*, /opt/conda, /usr/local, /usr,
// home/.local), then under the CUDA toolkits. Within one folder newer
// sonames (.so.13) come before older ones (.so.12).
func Candidates(names, subs []string, file, home, venv string) []string {
	out := slices.Clone(names)
	var prefixes []string
	if venv != "" {
		prefixes = append(prefixes, venv)
	}
	prefixes = append(prefixes, "/opt/*/.venv", "/opt/*", "/opt/conda", "/usr/local", "/usr")
	if home != "" {
		prefixes = append(prefixes, filepath.Join(home, ".local"))
	}
	var patterns []string
	for _, p := range prefixes {
		for _, site := range []string{"site-packages", "dist-packages"} {
			for _, sub := range subs {
				patterns = append(patterns, filepath.Join(p, "lib", "python3*", site, sub, file))
			}
		}
	}
	patterns = append(patterns, filepath.Join("/usr/local/cuda/lib64", file), filepath.Join("/usr/local/cuda-*/lib64", file))
	seen := map[string]bool{}
	for _, pat := range patterns {
		files, _ := filepath.Glob(pat)
		slices.Sort(files)
		slices.Reverse(files)
		for _, f := range files {
			if !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	return out
}
