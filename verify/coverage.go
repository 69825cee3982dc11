package verify

import (
	"fmt"

	"github.com/sfsurgery/sfsurgery/format"
)

// coverage gathers what Run checked, for the report's Checked and
// NotChecked lines.
type coverage struct {
	opt    Options
	num    numeric
	report *format.Report // the prune report; nil when there is none
	// targets counts the targets checked, compressed those stored in a
	// compressed form, foreign the bitmask forms not written by sfsurgery
	// (decoded and validated, not re-encoded), cpuOnly the compressed
	// forms no GPU kernel reads.
	targets, compressed, foreign, cpuOnly int
	// digests counts the tensors hashed, in shards files.
	digests, shards int
}

// lines returns what was checked and what was not, with the reasons.
func (c *coverage) lines() (checked, notChecked []string) {
	yes := func(format string, a ...any) { checked = append(checked, fmt.Sprintf(format, a...)) }
	no := func(format string, a ...any) { notChecked = append(notChecked, fmt.Sprintf(format, a...)) }

	yes("structure: %d targets are 2:4 (1:2 for F32 in the ampere format)", c.targets)
	if n := c.compressed - c.foreign; n > 0 {
		yes("round trip: %d compressed forms decode with valid metadata and re-encode to the same bytes", n)
	}
	if c.foreign > 0 {
		no("byte-exact re-encoding of %d bitmask forms: no sfsurgery manifest, so their encoding need not be ours (they were decoded and validated)", c.foreign)
	}
	if c.opt.Original != nil {
		yes("rule against the original: kept values bit-exact and the ones the rule picks")
		yes("every other tensor byte-identical to the original, nothing added")
	} else {
		no("rule against the original: no --original given")
		no("byte identity of the other tensors with the original: no --original given")
	}
	if c.compressed > 0 {
		yes("numeric: W·X from the compressed form against the pruned dense product, on %s", c.num.Describe())
	} else {
		no("numeric check: the dense format has no compressed form to compute from")
	}
	switch cpu, isCPU := c.num.(*cpuNumeric); {
	case c.compressed == 0:
	case isCPU && cpu.why != "":
		no("numeric check on the GPU: %s", cpu.why)
	case isCPU:
		no("numeric check on the GPU: --device cpu")
	case c.cpuOnly > 0:
		no("numeric check on the GPU of %d bitmask or F32 weights: no tensor-core kernel here reads them, so the CPU checked them", c.cpuOnly)
	}
	switch {
	case c.report == nil:
		no("tensor digests: no sfsurgery.json report")
	case c.report.SHA256 == nil:
		no("tensor digests: the sfsurgery.json report records none")
	default:
		yes("tensor digests: the bytes of %d tensors in %d shards against the SHA-256 of the sfsurgery.json report", c.digests, c.shards)
	}
	return checked, notChecked
}
