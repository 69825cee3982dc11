package hfcache

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseID(t *testing.T) {
	tests := []struct {
		in   string
		want ID
		ok   bool
	}{
		{"TinyLlama/TinyLlama-1.1B-Chat-v1.0", ID{"TinyLlama", "TinyLlama-1.1B-Chat-v1.0", ""}, true},
		{"meta-llama/Llama-3.1-8B@main", ID{"meta-llama", "Llama-3.1-8B", "main"}, true},
		{"org/name@refs/pr/1", ID{"org", "name", "refs/pr/1"}, true},
		{"org/name@v1.0", ID{"org", "name", "v1.0"}, true},
		{"a/b@0123456789abcdef0123456789abcdef01234567", ID{"a", "b", "0123456789abcdef0123456789abcdef01234567"}, true},
		{"_x/y_", ID{"_x", "y_", ""}, true},
		{"name", ID{}, false},
		{"", ID{}, false},
		{"/abs/path", ID{}, false},
		{"./org/name", ID{}, false},
		{"../x", ID{}, false},
		{"org/", ID{}, false},
		{"org/name/extra", ID{}, false},
		{"org/na--me", ID{}, false},
		{"org/na..me", ID{}, false},
		{"org/-name", ID{}, false},
		{"org/name.", ID{}, false},
		{"org/na me", ID{}, false},
		{`org\name`, ID{}, false},
		{"org/name@", ID{}, false},
		{"org/name@../../etc", ID{}, false},
		{"org/name@a//b", ID{}, false},
		{"org/name@/abs", ID{}, false},
		{"org/name@a@b", ID{}, false},
		{"org/name@a b", ID{}, false},
		{"org/name@a\x00", ID{}, false},
		{"org/" + strings.Repeat("n", 97), ID{}, false},
		{"org/" + strings.Repeat("n", 96), ID{"org", strings.Repeat("n", 96), ""}, true},
		{"org/name@" + strings.Repeat("r", 256), ID{}, false},
	}
	for _, tt := range tests {
		got, err := ParseID(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ParseID(%q): error %v, want ok=%v", tt.in, err, tt.ok)
			continue
		}
		if err != nil && !errors.Is(err, ErrInvalidID) {
			t.Errorf("ParseID(%q): error %v does not wrap ErrInvalidID", tt.in, err)
		}
		if got != tt.want {
			t.Errorf("ParseID(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestIDString(t *testing.T) {
	for _, tt := range []struct {
		id                ID
		str, repo, dirStr string
	}{
		{ID{"o", "n", ""}, "o/n", "o/n", "models--o--n"},
		{ID{"o", "n", "v1"}, "o/n@v1", "o/n", "models--o--n"},
	} {
		if got := tt.id.String(); got != tt.str {
			t.Errorf("%+v.String() = %q, want %q", tt.id, got, tt.str)
		}
		if got := tt.id.Repo(); got != tt.repo {
			t.Errorf("%+v.Repo() = %q, want %q", tt.id, got, tt.repo)
		}
		if got := tt.id.RepoDir(); got != tt.dirStr {
			t.Errorf("%+v.RepoDir() = %q, want %q", tt.id, got, tt.dirStr)
		}
	}
}

// FuzzParseID checks that ParseID never panics, that what it accepts
// prints back to itself, and that the cache paths an accepted id names
// stay inside the cache directory.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{"TinyLlama/TinyLlama-1.1B-Chat-v1.0", "o/n@main", "o/n@refs/pr/1", "o/n@..", "a/b/c", "x", "o/n@a/../b", "é/n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidID) || strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("ParseID(%q): error %q", s, err)
			}
			return
		}
		if id.String() != s {
			t.Fatalf("ParseID(%q).String() = %q", s, id.String())
		}
		if again, err := ParseID(id.String()); err != nil || again != id {
			t.Fatalf("ParseID(%q) round trip: %+v, %v", s, again, err)
		}
		for _, rel := range []string{id.RepoDir(), filepath.Join(id.RepoDir(), "refs", filepath.FromSlash(id.rev()))} {
			if !filepath.IsLocal(rel) || strings.Count(rel, string(filepath.Separator)) != strings.Count(rel, "/") {
				t.Fatalf("ParseID(%q): cache path %q is not local", s, rel)
			}
		}
		if strings.Count(id.RepoDir(), "--") != 2 {
			t.Fatalf("ParseID(%q): RepoDir %q is ambiguous", s, id.RepoDir())
		}
	})
}
