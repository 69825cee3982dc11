package surgery

import (
	"errors"
	"fmt"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
)

// ErrAlreadyPruned is wrapped by NewPlan's error for an input that is
// already pruned: it carries an sfsurgery manifest (any output of prune
// or unpack, dense format included) or holds compressed 2:4 weights
// (P.packed + P.meta, P.compressed + P.bitmask).
var ErrAlreadyPruned = errors.New("already pruned")

// checkNotPruned fails with an error wrapping ErrAlreadyPruned when ck is
// already pruned, saying in which format and by which tool.
func checkNotPruned(ck *checkpoint.Checkpoint) error {
	man, err := format.ReadManifest(ck)
	if err == nil {
		hint := "prune the original checkpoint instead, or unpack this one (sfsurgery unpack) to get its weights dense"
		if man.Format == format.Dense {
			hint = "its weights are already pruned in place; prune the original checkpoint to write another format"
		}
		return fmt.Errorf("%s: %w (format %s, by %s %s); %s",
			ck.Path, ErrAlreadyPruned, man.Format, man.Tool, man.Version, hint)
	}
	if !errors.Is(err, format.ErrNoManifest) {
		return fmt.Errorf("%s: reading the sfsurgery manifest: %w", ck.Path, err)
	}
	comps, err := format.FindCompressed(ck)
	if err != nil {
		return fmt.Errorf("%s: looking for compressed weights: %w", ck.Path, err)
	}
	if len(comps) > 0 {
		return fmt.Errorf("%s: %w (format %s, not by sfsurgery: %d compressed weights such as %s); "+
			"prune the original checkpoint instead, or unpack this one (sfsurgery unpack) to get its weights dense",
			ck.Path, ErrAlreadyPruned, comps[0].Format, len(comps), comps[0].Name)
	}
	return nil
}
