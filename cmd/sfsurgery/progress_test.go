package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestProgressOffTerminal: off a terminal there is no bar, its methods do
// nothing, and bench's steps are lines.
func TestProgressOffTerminal(t *testing.T) {
	var buf bytes.Buffer
	if p := newBar(&buf, 10, "x", bytesDone, false); p != nil {
		t.Fatal("a bar on a buffer")
	}
	var p *progress
	p.add(1)
	p.set(2, "y")
	p.clear()
	p.finish()
	if p.fn() != nil {
		t.Error("a nil bar has a callback")
	}
	c := newCountBar(&buf, 2, false)
	c.step(1, 2, "first")
	c.printf("note %d", 7)
	c.finish()
	if got := buf.String(); !strings.HasPrefix(got, "bench: [1/2 0s] first\n") || !strings.HasSuffix(got, "note 7\n") {
		t.Errorf("output %q", got)
	}
	buf.Reset()
	q := newCountBar(&buf, 2, true)
	q.step(1, 2, "first")
	q.finish()
	if buf.Len() != 0 {
		t.Errorf("quiet output %q", buf.String())
	}
}
