package hfcache

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidID reports a string that is not a Hub model id.
var ErrInvalidID = errors.New("not a Hugging Face model id")

// maxPart is the longest org or model name the Hub accepts.
const maxPart = 96

// maxRevision bounds the length of a revision.
const maxRevision = 255

// DefaultRevision is the revision of an id that names none.
const DefaultRevision = "main"

// ID is a Hub model id: org/name, at a revision.
type ID struct {
	Org, Name string
	// Revision is a branch, tag or 40-hex commit hash; "" means
	// DefaultRevision.
	Revision string
}

// ParseID parses "org/name" or "org/name@revision". Org and name are 1 to
// 96 characters of ASCII letters, digits, '_', '.' and '-', start and end
// with a letter, digit or '_', and hold no "--" or ".."; the revision is
// a git ref name or commit hash. Errors wrap ErrInvalidID.
func ParseID(s string) (ID, error) {
	repo, rev, hasRev := strings.Cut(s, "@")
	org, name, ok := strings.Cut(repo, "/")
	if !ok {
		return ID{}, fmt.Errorf("%q: %w: want org/name or org/name@revision", s, ErrInvalidID)
	}
	if err := checkPart(org); err != nil {
		return ID{}, fmt.Errorf("%q: %w: org %v", s, ErrInvalidID, err)
	}
	if err := checkPart(name); err != nil {
		return ID{}, fmt.Errorf("%q: %w: name %v", s, ErrInvalidID, err)
	}
	if hasRev {
		if err := checkRevision(rev); err != nil {
			return ID{}, fmt.Errorf("%q: %w: revision %v", s, ErrInvalidID, err)
		}
	}
	return ID{Org: org, Name: name, Revision: rev}, nil
}

// Repo returns "org/name".
func (id ID) Repo() string { return id.Org + "/" + id.Name }

// String returns "org/name", or "org/name@revision" when the id names a
// revision.
func (id ID) String() string {
	if id.Revision == "" {
		return id.Repo()
	}
	return id.Repo() + "@" + id.Revision
}

// rev returns the revision the id resolves: Revision or DefaultRevision.
func (id ID) rev() string {
	if id.Revision == "" {
		return DefaultRevision
	}
	return id.Revision
}

// RepoDir returns the name of the model's directory in the cache,
// "models--org--name".
func (id ID) RepoDir() string { return "models--" + id.Org + "--" + id.Name }

// checkPart checks an org or model name.
func checkPart(p string) error {
	switch {
	case p == "":
		return errors.New("is empty")
	case len(p) > maxPart:
		return fmt.Errorf("is longer than %d characters", maxPart)
	case strings.Contains(p, "--"), strings.Contains(p, ".."):
		return fmt.Errorf("%q holds \"--\" or \"..\"", p)
	case !edgeChar(p[0]) || !edgeChar(p[len(p)-1]):
		return fmt.Errorf("%q does not start and end with a letter, digit or '_'", p)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; !edgeChar(c) && c != '.' && c != '-' {
			return fmt.Errorf("%q holds %q", p, rune(c))
		}
	}
	return nil
}

// edgeChar reports whether c may start or end an org or model name.
func edgeChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
}

// checkRevision checks a revision: a ref name whose '/'-separated parts
// are neither empty nor "." or "..", free of the characters git forbids
// in ref names.
func checkRevision(r string) error {
	switch {
	case r == "":
		return errors.New("is empty")
	case len(r) > maxRevision:
		return fmt.Errorf("is longer than %d characters", maxRevision)
	}
	for i := 0; i < len(r); i++ {
		if c := r[i]; c < 0x20 || c == 0x7f || strings.IndexByte(" ~^:?*[\\@", c) >= 0 {
			return fmt.Errorf("%q holds %q", r, rune(c))
		}
	}
	for part := range strings.SplitSeq(r, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("%q has an empty, \".\" or \"..\" part", r)
		}
	}
	return nil
}

// isCommit reports whether s is a full commit hash: 40 lower-case hex
// digits.
func isCommit(s string) bool {
	if len(s) != 40 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
