package speed

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText prints the report for a terminal: machine and ceilings, one
// line per row, the headline, the end-to-end estimate and the notes.
func WriteText(w io.Writer, rep *Report) error {
	var b strings.Builder
	writeEnv(&b, rep)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "shape\tM\tbackend\tmedian µs\tTFLOP/s\tspeedup\tfloor µs\tof floor\tbound\trel err\tdetail")
	for _, r := range sortedRows(rep.Shapes, rep.Rows) {
		label := Shape{Model: r.Model, Ops: r.Ops, N: r.N, K: r.K}.Label()
		if !r.Timed() {
			fmt.Fprintf(tw, "%s\t%d\t%s\t—\t\t\t\t\t\t\t%s\n", label, r.M, r.Backend, r.Error)
			continue
		}
		mark := ""
		if r.HostBound {
			mark = " (host-bound)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.1f\t%.1f\t%.2fx\t%.1f\t%.0f%%\t%s\t%.1e\t%s%s\n", label, r.M, r.Backend,
			r.MedianUS, r.TFLOPS, r.Speedup, r.FloorUS, 100*r.OfFloor, r.Bound, r.RelErr, r.Detail, mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	writeHeadlines(&b, rep, false)
	writeEstimates(&b, rep, false)
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeEnv writes the machine, libraries and ceilings.
func writeEnv(b *strings.Builder, rep *Report) {
	e, c := rep.Env, rep.Ceilings
	lt := "not found"
	if e.CuSPARSELt != "" {
		lt = e.CuSPARSELt
	}
	fmt.Fprintf(b, "GPU %s (sm %s, %d SMs, L2 %d MiB), driver %s, %s, cuSPARSELt %s, %s%s\n", e.GPU, e.Capability,
		e.SMs, e.L2Bytes>>20, e.Driver, e.DenseBackend, lt, rep.DType, outputNote(rep.Method))
	fmt.Fprintf(b, "ceilings: copy %.0f GB/s (read+write, %d MiB), dense %.0f TFLOP/s (%s), sparse %.0f TFLOP/s (2x)\n",
		c.BandwidthGBs, c.CopyBytes>>20, c.DenseTFLOPS, c.GEMM, c.SparseTFLOPS)
	fmt.Fprintf(b, "timing: %s; inputs rotated over ≥ %d MiB\n\n", timing(rep.Method), rep.Method.RotateBytes>>20)
}

// writeHeadlines writes the best and worst speedups per backend and
// regime.
func writeHeadlines(b *strings.Builder, rep *Report, md bool) {
	hs := Headlines(rep.Rows, rep.Method.MinSpeedup)
	if len(hs) == 0 {
		return
	}
	if md {
		b.WriteString("\n## Headline\n\n| backend | regime | best | worst | wins / loses / rows |\n|---|---|---|---|---|\n")
	} else {
		b.WriteString("\nheadline (speedup over dense cuBLASLt):\n")
	}
	for _, h := range hs {
		best := fmt.Sprintf("%.2fx (%s, M=%d)", h.Best.Speedup, h.Best.Label, h.Best.M)
		worst := fmt.Sprintf("%.2fx (%s, M=%d)", h.Worst.Speedup, h.Worst.Label, h.Worst.M)
		if md {
			fmt.Fprintf(b, "| %s | %s | %s | %s | %d / %d / %d |\n", h.Backend, h.Regime, best, worst, h.Wins, h.Losses,
				h.Rows)
		} else {
			fmt.Fprintf(b, "  %-10s %-8s best %s, worst %s; wins %d, loses %d of %d\n", h.Backend, h.Regime, best,
				worst, h.Wins, h.Losses, h.Rows)
		}
	}
}

// writeEstimates writes the end-to-end estimate.
func writeEstimates(b *strings.Builder, rep *Report, md bool) {
	if len(rep.Estimates) == 0 {
		return
	}
	share := rep.Method.GEMMShare
	if md {
		fmt.Fprintf(b, "\n## End-to-end estimate\n\nAn estimate, not a measurement: Amdahl's law with the projections "+
			"taking %.0f%% of a step (--gemm-share), each shape following the policy.\n\n"+
			"| model | M | regime | projections speedup | end-to-end |\n|---|---|---|---|---|\n", 100*share)
	} else {
		fmt.Fprintf(b, "\nend-to-end estimate (Amdahl, projections = %.0f%% of a step, policy applied):\n", 100*share)
	}
	for _, e := range rep.Estimates {
		if md {
			fmt.Fprintf(b, "| %s | %d | %s | %.2fx | %.2fx |\n", e.Model, e.M, e.Regime, e.GEMMSpeedup, e.EndToEnd)
		} else {
			fmt.Fprintf(b, "  %-12s M=%-6d %-8s projections %.2fx, end-to-end %.2fx\n", e.Model, e.M, e.Regime,
				e.GEMMSpeedup, e.EndToEnd)
		}
	}
}
