package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/prune24"
)

// CheckMask names the check that a target's mask, as the output shows
// it, is the one its decisions recorded.
const CheckMask = "mask" // the output's mask hashes to the decisions' (prune report)

// choice is how a target's kept weights were chosen: by the magnitude
// rule, or by a calibration's decisions whose mask digests the prune
// report records.
type choice struct {
	method format.Method
	rule   prune24.Rule
	// record is the prune report's entry for the target; nil when there
	// is no report or it lists no such target.
	record *format.TensorReport
}

// choiceOf returns the choice of the target called name: the method the
// manifest names (the magnitude rule without one), the rule, and the
// report's entry.
func choiceOf(man *format.Manifest, rep *format.Report, name string) choice {
	ch := choice{method: format.Magnitude, rule: ruleOf(man, name)}
	if man != nil {
		ch.method = man.Method.OrMagnitude()
	}
	if rep != nil {
		for i := range rep.Tensors {
			if rep.Tensors[i].Name == name {
				ch.record = &rep.Tensors[i]
			}
		}
	}
	return ch
}

// decided reports whether a calibration's decisions chose the kept
// weights.
func (ch choice) decided() bool { return ch.method != format.Magnitude }

// checksMask reports whether the mask check runs: decided, and the
// report records the decisions' mask digest.
func (ch choice) checksMask() bool {
	return ch.decided() && ch.record != nil && ch.record.MaskSHA256 != ""
}

// checksRule reports whether the output's values can be checked against
// the original's: not for sparsegpt, whose values are the calibration's.
func (ch choice) checksRule() bool { return !ch.method.UpdatesWeights() }

// ruleAgainst checks the decoded rows d (first row r0) against the same
// rows of the original: the magnitude rule's selection, or, for decided
// weights, the original's values at the places mask (the rows' mask as
// the output shows it) keeps.
func (ch choice) ruleAgainst(d, orig, mask []byte, dt checkpoint.DType, cols, r0 int) error {
	var err error
	if ch.decided() {
		if mask == nil {
			return fmt.Errorf("not run: the output shows no 2:4 mask")
		}
		err = prune24.CheckMasked(d, orig, mask, dt, cols)
	} else {
		err = prune24.CheckRule(d, orig, dt, cols, ch.rule)
	}
	return prune24.OffsetRows(err, r0)
}

// maskWalk hashes, chunk by chunk, the mask an output weight shows
// (prune24.MaskOf) for the mask check.
type maskWalk struct {
	h   hash.Hash
	buf []byte
	err error
}

// add hashes the mask of the decoded rows d (first row r0) and returns
// it, or nil once a chunk showed no 2:4 mask.
func (m *maskWalk) add(d []byte, dt checkpoint.DType, cols, r0 int) []byte {
	if m.err != nil {
		return nil
	}
	if m.h == nil {
		m.h = sha256.New()
	}
	rows := len(d) / (cols * dt.Size())
	m.buf = grow(m.buf, prune24.MaskBytes(rows, cols))
	if err := prune24.MaskOf(m.buf, d, dt, cols); err != nil {
		m.err = prune24.OffsetRows(err, r0)
		return nil
	}
	m.h.Write(m.buf)
	return m.buf
}

// verdict compares the mask hashed with the report's record: the
// decisions' mask digest, or, where the record says that the decisions
// keep zeros the output cannot show, the digest of the mask prune wrote
// (with a note saying so).
func (m *maskWalk) verdict(rec *format.TensorReport) (note string, err error) {
	if m.err != nil {
		return "", fmt.Errorf("the output shows no 2:4 mask: %w", m.err)
	}
	if m.h == nil {
		m.h = sha256.New()
	}
	got := hex.EncodeToString(m.h.Sum(nil))
	switch {
	case got == rec.MaskSHA256:
		return "", nil
	case rec.WrittenMaskSHA256 != "" && got == rec.WrittenMaskSHA256:
		return fmt.Sprintf("the decisions keep a zero above a pruned place in %d groups, which the output cannot show (it stores values): "+
			"its mask is the one prune recorded as written, which differs from the decisions' in those groups only", rec.ZeroKeptGroups), nil
	}
	return "", fmt.Errorf("the output's mask hashes to %s, the decisions' to %s (the prune report)", got, rec.MaskSHA256)
}
