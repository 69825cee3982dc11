package verify_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/decisions"
	"github.com/sfsurgery/sfsurgery/decisions/decisionstest"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/surgery"
	"github.com/sfsurgery/sfsurgery/verify"
)

// prunedBy writes testdata pruned in format f by random decisions of
// method m (for sparsegpt, with kept values other than the original's),
// and returns the output's path.
func prunedBy(t *testing.T, f format.Format, m format.Method) string {
	t.Helper()
	dir := t.TempDir()
	targets := decisionstest.Targets(t, testdataModel, f, false)
	ck, err := checkpoint.Open(testdataModel)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	decide := decisionstest.Random(7)
	if m == format.SparseGPT {
		decide = decisionstest.WithUpdate(decide, func(_ int, v uint32) uint32 { return v ^ 1 }) // the last mantissa bit
	}
	dec := filepath.Join(dir, "d.safetensors")
	decisionstest.Build(t, dec, ck, targets, m, decide)
	d, err := decisions.Open(dec)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p, err := surgery.NewPlan(ck, surgery.Options{Format: f, Version: "test", Decisions: d})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, string(f))
	if _, err := p.Write(context.Background(), out, checkpoint.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return out
}

// checksOf returns the names of the checks of tensor name's result.
func checksOf(t *testing.T, rep *verify.Report, name string) []string {
	t.Helper()
	var names []string
	for _, c := range result(t, rep, name).Checks {
		names = append(names, c.Name)
	}
	return names
}

// TestDecidedOutputsPass: outputs of every method's decisions in every
// format pass, with the mask check on every target, the rule check for
// wanda and ria only, and sparsegpt's rule check said not applicable,
// with the reason.
func TestDecidedOutputsPass(t *testing.T) {
	const q = "model.layers.0.self_attn.q_proj.weight"
	for _, f := range []format.Format{format.Ampere, format.Bitmask, format.Dense} {
		for _, m := range []format.Method{format.Wanda, format.RIA, format.SparseGPT} {
			out := prunedBy(t, f, m)
			for _, orig := range []bool{false, true} {
				rep := run(t, out, orig)
				if !rep.OK {
					t.Errorf("%s %s (original %v): %v", f, m, orig, failedTensors(rep))
				}
				checks := checksOf(t, rep, q)
				if !slices.Contains(checks, verify.CheckMask) {
					t.Errorf("%s %s: %s was not checked against its decisions' mask: %v", f, m, q, checks)
				}
				if wantRule := orig && m != format.SparseGPT; slices.Contains(checks, verify.CheckRule) != wantRule {
					t.Errorf("%s %s (original %v): checks %v", f, m, orig, checks)
				}
				if !hasLine(rep.Checked, "masks: 28 targets") {
					t.Errorf("%s %s: checked %q", f, m, rep.Checked)
				}
				if orig && m == format.SparseGPT && !hasLine(rep.NotChecked, "not applicable: sparsegpt updates the kept weights: the output's values are the calibration's, not the original's") {
					t.Errorf("%s: not checked %q", f, rep.NotChecked)
				}
				if orig && m != format.SparseGPT && !hasLine(rep.Checked, "("+string(m)+" decisions)") {
					t.Errorf("%s %s: checked %q", f, m, rep.Checked)
				}
			}
		}
	}
}

// rewriteReport applies fn to the prune report of the output dir.
func rewriteReport(t *testing.T, dir string, fn func(*format.Report)) {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := format.ReportPath(dir, !fi.IsDir())
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r format.Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	fn(&r)
	if b, err = json.Marshal(&r); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// redigest sets the report's SHA-256 of the tensor name to the digest
// of its bytes now, so that only the mask check can see a change.
func redigest(t *testing.T, dir, name string) {
	t.Helper()
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, info, ok := ck.Lookup(name)
	if !ok {
		t.Fatalf("no %s", name)
	}
	sum := sha256.Sum256(f.Data(info))
	ck.Close()
	rewriteReport(t, dir, func(r *format.Report) { r.SHA256[name] = hex.EncodeToString(sum[:]) })
}

// TestMaskDiffersFails moves kept values of a decided output to other
// places of their group and makes the tensor digests agree: the mask
// check (and only it, for sparsegpt without the original) fails, saying
// which digests differ. A report that records another mask fails too.
func TestMaskDiffersFails(t *testing.T) {
	const q = "model.layers.1.self_attn.q_proj.weight"
	for _, f := range []format.Format{format.Bitmask, format.Dense} {
		out := prunedBy(t, f, format.SparseGPT)
		if f == format.Bitmask {
			// Row 0, group 0: the other 2 places of the 4.
			patch(t, out, strings.TrimSuffix(q, ".weight")+".bitmask", 0, func(b byte) byte { return b&0xF0 | ^b&0x0F })
			redigest(t, out, strings.TrimSuffix(q, ".weight")+".bitmask")
		} else {
			// Row 0, group 0, BF16: swap elements 0, 1 with 2, 3.
			ck, err := checkpoint.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			fl, info, _ := ck.Lookup(q)
			group := slices.Clone(fl.Data(info)[:8])
			ck.Close()
			for i := range 8 {
				patch(t, out, q, int64(i), func(byte) byte { return group[(i+4)%8] })
			}
			redigest(t, out, q)
		}
		rep := run(t, out, false)
		if got := failedTensors(rep); len(got) != 1 || !slices.Equal(got[q], []string{verify.CheckMask}) {
			t.Fatalf("%s: failed %v, want the mask check of %s alone", f, got, q)
		}
		for _, c := range result(t, rep, q).Checks {
			if c.Name == verify.CheckMask && !strings.Contains(c.Detail, "the output's mask hashes to") {
				t.Errorf("%s: %q", f, c.Detail)
			}
		}
	}
	out := prunedBy(t, format.Ampere, format.Wanda)
	rewriteReport(t, out, func(r *format.Report) {
		for i := range r.Tensors {
			if r.Tensors[i].Name == q {
				r.Tensors[i].MaskSHA256 = strings.Repeat("0", 64)
			}
		}
	})
	if got := failedTensors(run(t, out, true)); len(got) != 1 || !slices.Equal(got[q], []string{verify.CheckMask}) {
		t.Errorf("ampere, another recorded mask: failed %v", got)
	}
}

// TestZeroKeptNoted: decisions that keep zeros the output cannot show
// pass against the mask prune recorded as written, with a note saying
// so; without that record they would fail.
func TestZeroKeptNoted(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "m.safetensors")
	const up = "model.layers.0.mlp.up_proj.weight"
	w := randomWeight(32*64, checkpoint.BF16, 1)
	for i := range 3 {
		setElem(w, i, checkpoint.BF16, 0) // row 0, group 0: [0 0 0 x]
	}
	writeModel(t, in, []tensor{{up, checkpoint.BF16, 32, 64, w}})
	ck, err := checkpoint.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	dec := filepath.Join(dir, "d.safetensors")
	decisionstest.Build(t, dec, ck, []string{up}, format.RIA, func(n string, w []byte, dt checkpoint.DType, rows, cols int) ([]byte, []byte, error) {
		mask, _, err := decisionstest.Magnitude(n, w, dt, rows, cols)
		mask[0] = mask[0]&0xF0 | 0x0C // keep places 2 and 3: a zero above the pruned 0 and 1
		return mask, nil, err
	})
	d, err := decisions.Open(dec)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p, err := surgery.NewPlan(ck, surgery.Options{Format: format.Ampere, Version: "test", Decisions: d})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.safetensors")
	if _, err := p.Write(context.Background(), out, checkpoint.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	rep := verifyPath(t, out, in)
	if !rep.OK || len(result(t, rep, up).Notes) != 1 || !strings.Contains(result(t, rep, up).Notes[0], "in 1 groups, which the output cannot show") {
		t.Fatalf("failed %v, notes %q", failedTensors(rep), result(t, rep, up).Notes)
	}
	rewriteReport(t, out, func(r *format.Report) { r.Tensors[0].WrittenMaskSHA256 = "" })
	if got := failedTensors(verifyPath(t, out, in)); !slices.Equal(got[up], []string{verify.CheckMask}) {
		t.Errorf("without the written mask's digest: failed %v", got)
	}
}

// TestDecidedWithoutReport: a decided output without its report (an
// unpacked one, say) still has its values checked against the original
// for wanda, and says that its masks were not checked, and why.
func TestDecidedWithoutReport(t *testing.T) {
	out := prunedBy(t, format.Dense, format.Wanda)
	if err := os.Remove(filepath.Join(out, format.ReportName)); err != nil {
		t.Fatal(err)
	}
	rep := run(t, out, true)
	if !rep.OK {
		t.Fatalf("failed %v", failedTensors(rep))
	}
	if !hasLine(rep.NotChecked, "masks against the decisions: no sfsurgery.json report") || !hasLine(rep.Checked, "(wanda decisions)") {
		t.Errorf("checked %q, not checked %q", rep.Checked, rep.NotChecked)
	}
	// The original's values moved to another place: the rule check sees it.
	const q = "model.layers.2.mlp.up_proj.weight"
	ck, err := checkpoint.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	f, info, _ := ck.Lookup(q)
	group := slices.Clone(f.Data(info)[:8])
	ck.Close()
	for i := range 8 {
		patch(t, out, q, int64(i), func(byte) byte { return group[(i+4)%8] })
	}
	if got := failedTensors(run(t, out, true)); !slices.Equal(got[q], []string{verify.CheckRule}) {
		t.Errorf("values moved: failed %v, want the rule check of %s", got, q)
	}
}
