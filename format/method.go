package format

import "fmt"

// Method names what decided which weights prune keeps.
type Method string

// The methods. Magnitude needs no data; the others are calibrated
// (python -m sfsurgery calibrate) and reach prune as a decisions file.
const (
	// Magnitude keeps the 2 of largest |w| in each group of 4
	// (RuleDescription).
	Magnitude Method = "magnitude"
	// Wanda keeps the 2 of largest |w|·‖x‖₂ over the calibration
	// activations x of the weight's input column.
	Wanda Method = "wanda"
	// RIA keeps the 2 of largest relative importance times ‖x‖₂^α.
	RIA Method = "ria"
	// SparseGPT chooses the 2 by the OBS error and updates the kept
	// weights to compensate for the pruned ones.
	SparseGPT Method = "sparsegpt"
)

// ParseMethod checks the name of a calibrated method: wanda, ria or
// sparsegpt (magnitude is not one: it needs no decisions).
func ParseMethod(s string) (Method, error) {
	switch m := Method(s); m {
	case Wanda, RIA, SparseGPT:
		return m, nil
	}
	return "", fmt.Errorf("unknown method %q (want wanda, ria or sparsegpt)", s)
}

// UpdatesWeights reports whether the method writes kept weights of its
// own rather than the original's (SparseGPT).
func (m Method) UpdatesWeights() bool { return m == SparseGPT }

// Rule returns the selection rule recorded, for method m, in the
// manifest and the report: RuleDescription for the magnitude rule (and
// the empty method of a manifest that names none).
func (m Method) Rule() string {
	switch {
	case m == "" || m == Magnitude:
		return RuleDescription
	case m.UpdatesWeights():
		return string(m) + ": keep the 2 of each group of 4 consecutive weights along the input dimension that the calibration's decisions name (their mask), with the calibration's updated values; pruned and -0.0 written as +0.0"
	}
	return string(m) + ": keep the 2 of each group of 4 consecutive weights along the input dimension that the calibration's decisions name (their mask), with the original's values, bit-exact; pruned and -0.0 written as +0.0"
}

// OrMagnitude returns m, or Magnitude for the empty method of a manifest
// written by the magnitude rule.
func (m Method) OrMagnitude() Method {
	if m == "" {
		return Magnitude
	}
	return m
}
