package main

import (
	"os"

	"github.com/spf13/cobra"
)

// writeError turns the failure of a write to out into the command's
// error. When the run was interrupted it says what is at out: nothing,
// or what was there before (the writers install an output in one rename
// and are not interrupted after it).
func writeError(cmd *cobra.Command, out string, err error) error {
	if cmd.Context().Err() == nil {
		return err
	}
	state := "nothing was written at " + out
	if _, serr := os.Lstat(out); serr == nil {
		state = out + " is as it was before this run"
	}
	return &interruptedWrite{state: state, err: err}
}
