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
	// methods counts the targets by the method that chose what they
	// keep; masks counts the decided ones whose mask digests the report
	// records.
	methods map[format.Method]int
	masks   int
}

// count counts a target chosen as ch says.
func (c *coverage) count(ch choice) {
	if c.methods == nil {
		c.methods = map[format.Method]int{}
	}
	c.methods[ch.method]++
	if ch.checksMask() {
		c.masks++
	}
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
		if n := c.methods[format.Magnitude]; n > 0 || len(c.methods) == 0 {
			yes("rule against the original: kept values bit-exact and the ones the rule picks")
		}
		for _, m := range []format.Method{format.Wanda, format.RIA} {
			if n := c.methods[m]; n > 0 {
				yes("rule against the original for %d targets (%s decisions): kept values bit-exact, at the places the output's mask keeps, +0.0 elsewhere", n, m)
			}
		}
		if n := c.methods[format.SparseGPT]; n > 0 {
			no("rule against the original for %d targets: not applicable: sparsegpt updates the kept weights: the output's values are the calibration's, not the original's", n)
		}
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
	decided := 0
	for m, n := range c.methods {
		if m != format.Magnitude {
			decided += n
		}
	}
	switch {
	case c.masks > 0:
		yes("masks: %d targets' masks, as the output shows them, hash to their decisions' digests in the sfsurgery.json report", c.masks)
		if decided > c.masks {
			no("masks of %d decided targets: the sfsurgery.json report records no digest of their decisions", decided-c.masks)
		}
	case decided > 0 && c.report == nil:
		no("masks against the decisions: no sfsurgery.json report records their digests")
	case decided > 0:
		no("masks against the decisions: the sfsurgery.json report records no digest of them")
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
