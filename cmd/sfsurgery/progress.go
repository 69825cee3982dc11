package main

import (
	"io"
	"os"
	"runtime/debug"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// streamingMemoryLimit is the soft heap limit of prune and unpack: their
// live memory is bounded by construction (surgery's chunk and metadata
// budgets, about 150 MiB with 16 workers), and the limit makes the
// collector return garbage before the heap doubles past 256 MiB on a
// machine of many cores.
const streamingMemoryLimit = 192 << 20

// limitMemory sets the soft heap limit of a streaming command.
func limitMemory() { debug.SetMemoryLimit(streamingMemoryLimit) }

// newProgress returns a byte progress bar on stderr, or nil when stderr
// is not a terminal or quiet is set. A nil bar's methods do nothing.
func newProgress(total int64, desc string, quiet bool) *progress {
	return newBar(os.Stderr, total, desc, bytesDone, quiet)
}

// unit is what a progress bar counts.
type unit int

const (
	bytesDone unit = iota // bytes, with the total
	stepsDone             // steps, with the count and the elapsed time
)

// newBar returns a progress bar of total units on w, or nil when w is not
// a terminal or quiet is set.
func newBar(w io.Writer, total int64, desc string, u unit, quiet bool) *progress {
	if f, ok := w.(*os.File); quiet || !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetWidth(30),
	}
	if u == stepsDone {
		opts = append(opts, progressbar.OptionShowCount(), progressbar.OptionSetElapsedTime(true))
	} else {
		opts = append(opts, progressbar.OptionShowBytes(true), progressbar.OptionShowTotalBytes(true))
	}
	return &progress{bar: progressbar.NewOptions64(total, opts...)}
}

// progress wraps a progress bar so that a nil one does nothing.
type progress struct{ bar *progressbar.ProgressBar }

// add records n more units done; safe for concurrent use.
func (p *progress) add(n int64) {
	if p != nil {
		p.bar.Add64(n)
	}
}

// fn returns add as a callback, or nil for no bar.
func (p *progress) fn() func(int64) {
	if p == nil {
		return nil
	}
	return p.add
}

// set records done units in all, and says what is being done.
func (p *progress) set(done int64, what string) {
	if p != nil {
		p.bar.Describe(what)
		_ = p.bar.Set64(done)
	}
}

// clear wipes the bar off the terminal, to print a line in its place;
// the next update draws it again.
func (p *progress) clear() {
	if p != nil {
		_ = p.bar.Clear()
	}
}

// finish clears the bar.
func (p *progress) finish() {
	if p != nil {
		_ = p.bar.Finish()
	}
}
