package main

import (
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
// is not a terminal or quiet is set. A nil bar's add is a no-op.
func newProgress(total int64, desc string, quiet bool) *progress {
	if quiet || !term.IsTerminal(int(os.Stderr.Fd())) {
		return nil
	}
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetWidth(30),
	)
	return &progress{bar: bar}
}

// progress wraps a progress bar so that a nil one does nothing.
type progress struct{ bar *progressbar.ProgressBar }

// add records n more bytes done; safe for concurrent use.
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

// finish clears the bar.
func (p *progress) finish() {
	if p != nil {
		p.bar.Finish()
	}
}
