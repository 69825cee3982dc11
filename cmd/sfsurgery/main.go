// Command sfsurgery prunes LLaMA-family safetensors checkpoints to 2:4
// sparsity, writes them in the formats sparse kernels and serving engines
// read, and verifies every byte it writes.
//
// Exit codes: 0 success, 1 a verification failed, 2 the command could not
// run (bad input, bad flags, I/O error, interrupted).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes, documented in the README and the verify help.
const (
	exitOK     = 0
	exitFailed = 1 // the checked property does not hold
	exitError  = 2 // could not run
)

func main() {
	// SIGHUP (a closed terminal or a dropped ssh connection) stops a run as
	// Ctrl-C does. The handlers stay installed until the process exits: a
	// signal after run returned must not kill a process whose output is
	// complete with the default action (TestInterruptAnyMoment).
	ctx, _ := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line and returns the process exit code.
// Errors are printed once, on one line, as "sfsurgery: <message>".
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var failed *failedError
	if errors.As(err, &failed) {
		if failed.msg != "" {
			fmt.Fprintln(stderr, "sfsurgery: "+failed.msg)
		}
		return exitFailed
	}
	if ctx.Err() != nil {
		msg := "interrupted"
		var iw *interruptedWrite
		if errors.As(err, &iw) {
			msg += "; " + iw.state
		}
		fmt.Fprintln(stderr, "sfsurgery: "+msg)
		return exitError
	}
	fmt.Fprintln(stderr, "sfsurgery: "+oneLine(err.Error()))
	return exitError
}

// failedError marks a command that ran to the end and found that what it
// checked does not hold (exit code 1).
type failedError struct{ msg string }

func (e *failedError) Error() string { return e.msg }

// interruptedWrite is returned by a command that writes an output when
// it stops before its output was renamed into place; state says what is
// at the output path.
type interruptedWrite struct {
	state string
	err   error
}

func (e *interruptedWrite) Error() string { return e.state + ": " + e.err.Error() }
func (e *interruptedWrite) Unwrap() error { return e.err }

// oneLine keeps an error message on one line.
func oneLine(s string) string {
	out := []rune{}
	for _, r := range s {
		if r == '\n' || r == '\r' {
			r = ' '
		}
		out = append(out, r)
	}
	return string(out)
}
