package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/spf13/cobra"
)

// writeError turns the failure of a write to out into the command's
// error, saying what is at out: the writers install an output in one
// rename, after which they are not interrupted, so before it out holds
// nothing or what it held before, and after it (checkpoint.ErrInstalled)
// the whole output. A refusal before anything was written (the output
// exists, may not be replaced, or is an input) needs no such word.
func writeError(cmd *cobra.Command, out string, err error) error {
	if errors.Is(err, checkpoint.ErrInstalled) {
		return err
	}
	state := "nothing was written at " + out
	if _, serr := os.Lstat(out); serr == nil {
		state = out + " is as it was before this run"
	}
	if cmd.Context().Err() != nil {
		return &interruptedWrite{state: state, err: err}
	}
	for _, refusal := range []error{checkpoint.ErrExist, checkpoint.ErrNotReplaceable, checkpoint.ErrOverwriteInput} {
		if errors.Is(err, refusal) {
			return err
		}
	}
	return fmt.Errorf("%w; %s", err, state)
}
