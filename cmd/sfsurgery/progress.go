package main

import (
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

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
