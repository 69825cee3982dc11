package surgery

import "fmt"

// Warnings lists what prune noticed about its input and leaves as it is,
// one line each, for stderr and the report: the input's own
// inconsistencies (the lines inspect prints) and the weight files that
// the input's index does not name, which the output carries over
// unchanged and unpruned (a Mistral snapshot's consolidated.safetensors,
// say). TestUnindexedCarried holds the second.
func (p *Plan) Warnings() []string {
	out := append([]string(nil), p.Input.Warnings...)
	for _, name := range p.Input.Unindexed {
		out = append(out, fmt.Sprintf("%s is carried into the output unchanged and not pruned: the index does not name it", name))
	}
	return out
}
