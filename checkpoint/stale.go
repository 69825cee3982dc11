package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The writers build every output under a temporary name in the output's
// directory that says who made it:
//
//	.<base>.sfsurgery-<kind>-<host>-<pid>-<start>-<random>
//
// kind is "tmp" for an output being written and "old" for a replaced
// output waiting to be removed; host is a hash of the host name, pid the
// writing process and start its start time (clock ticks since boot, from
// /proc/<pid>/stat; 0 where there is no /proc). A name whose process is
// provably gone can be removed by a later write to the same output: see
// [CleanStale].

// tempTag marks the temporary names of this package.
const tempTag = ".sfsurgery-"

// owner identifies the process that made a temporary name.
type owner struct {
	host  string // 8 hex digits of the host name's FNV-1a hash
	pid   int
	start uint64 // process start time in clock ticks since boot; 0 unknown
}

// currentOwner describes this process.
func currentOwner() owner {
	pid := os.Getpid()
	start, _ := processStart(pid)
	return owner{host: hostTag(), pid: pid, start: start}
}

// hostTag returns 8 hex digits naming this host.
func hostTag() string {
	name, err := os.Hostname()
	if err != nil {
		name = "unknown"
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("%08x", h.Sum32())
}

// processStart returns the start time of process pid in clock ticks since
// boot (field 22 of /proc/<pid>/stat), or an error wrapping
// fs.ErrNotExist when there is no such process or no /proc.
func processStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces
	// and parentheses; the fields after the last ')' start at field 3.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	const startField = 22 - 3
	if len(f) <= startField {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return strconv.ParseUint(f[startField], 10, 64)
}

// tempPrefix returns the temporary name prefix for an output called base
// made by o, before its random digits.
func (o owner) tempPrefix(base, kind string) string {
	return fmt.Sprintf(".%s%s%s-%s-%d-%d-", base, tempTag, kind, o.host, o.pid, o.start)
}

// parseTempName reads a temporary name made for the output called base.
// ok is false for any other name.
func parseTempName(name, base string) (kind string, o owner, ok bool) {
	rest, found := strings.CutPrefix(name, "."+base+tempTag)
	if !found {
		return "", owner{}, false
	}
	f := strings.Split(rest, "-")
	if len(f) != 5 || (f[0] != "tmp" && f[0] != "old") || len(f[1]) != 8 {
		return "", owner{}, false
	}
	// Numbers are as tempPrefix and tempName write them: decimal, no
	// sign, no leading zeros.
	pid, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[3], 10, 64)
	random, err3 := strconv.ParseUint(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || pid <= 0 || strconv.Itoa(pid) != f[2] ||
		strconv.FormatUint(start, 10) != f[3] || strconv.FormatUint(random, 10) != f[4] {
		return "", owner{}, false
	}
	return f[0], owner{host: f[1], pid: pid, start: start}, true
}

// gone reports whether o's process has provably ended: o was made on this
// host, and no process pid exists, or the one that does started at
// another time (its pid was reused). Anything it cannot prove is false,
// with the reason.
func (o owner) gone() (bool, string) {
	if o.host != hostTag() {
		return false, "made on another host (host tag " + o.host + ")"
	}
	start, err := processStart(o.pid)
	switch {
	case err == nil && o.start != 0 && start != o.start:
		return true, ""
	case err == nil:
		return false, fmt.Sprintf("process %d is still running", o.pid)
	case errors.Is(err, fs.ErrNotExist):
		// No /proc entry: either no such process, or no /proc at all;
		// kill(pid, 0) tells the two apart.
		if kerr := unix.Kill(o.pid, 0); kerr == unix.ESRCH {
			return true, ""
		}
		return false, fmt.Sprintf("process %d may still be running", o.pid)
	}
	return false, fmt.Sprintf("process %d: %v", o.pid, err)
}

// Stale is a temporary file or directory that an earlier write of the
// same output left beside it: a run that was killed, crashed or lost
// power before it could clean up.
type Stale struct {
	// Path is the temporary file or directory.
	Path string
	// PID is the process that made it; 0 when the name does not say.
	PID int
	// Removed is set when its process was provably gone and it was
	// removed.
	Removed bool
	// Kept says why it was left where it is (empty when Removed).
	Kept string
}

// String describes s in one line, for the user.
func (s Stale) String() string {
	if s.Removed {
		return fmt.Sprintf("removed %s, left by process %d, which is no longer running", s.Path, s.PID)
	}
	return fmt.Sprintf("left %s alone: %s", s.Path, s.Kept)
}

// CleanStale looks beside the output path for the temporary files and
// directories of earlier writes to it, removes those whose process is
// provably gone, and lists what it found. Temporary names of older
// versions (".<base>.tmp-<digits>", with no owner) are listed, never
// removed. A missing directory is not an error.
func CleanStale(path string) ([]Stale, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, osError(path, err)
	}
	dir, base := filepath.Split(abs)
	if base == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, osError(dir, err)
	}
	var out []Stale
	for _, e := range entries {
		name := e.Name()
		p := filepath.Join(dir, name)
		if legacyTempName(name, base) {
			out = append(out, Stale{Path: p, Kept: "a temporary name without an owner; remove it by hand if no sfsurgery run is writing " + path})
			continue
		}
		_, o, ok := parseTempName(name, base)
		if !ok {
			continue
		}
		s := Stale{Path: p, PID: o.pid}
		if dead, why := o.gone(); !dead {
			s.Kept = why
		} else if err := os.RemoveAll(p); err != nil {
			s.Kept = "removing it failed: " + err.Error()
		} else {
			s.Removed = true
		}
		out = append(out, s)
	}
	if len(out) > 0 {
		_ = syncDir(dir)
	}
	return out, nil
}

// legacyTempName reports whether name is ".<base>.tmp-<digits>" or
// ".<base>.old-<digits>", the owner-less temporary names of earlier
// versions.
func legacyTempName(name, base string) bool {
	for _, kind := range []string{".tmp-", ".old-"} {
		if rest, ok := strings.CutPrefix(name, "."+base+kind); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
			return true
		}
	}
	return false
}
