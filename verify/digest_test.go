package verify_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/verify"
)

// editReport rewrites the sha256 map of dir's prune report with fn.
func editReport(t *testing.T, dir string, fn func(map[string]string) map[string]string) {
	t.Helper()
	path := format.ReportPath(dir, false)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep map[string]any
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	if m, ok := rep["sha256"].(map[string]any); ok {
		for k, v := range m {
			sums[k], _ = v.(string)
		}
	}
	if s := fn(sums); s != nil {
		rep["sha256"] = s
	} else {
		rep["sha256"] = nil
	}
	if b, err = json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDigestsSeeWhatTheChecksCannot: without the original, an edited
// value or a meta nibble changed to another valid code passes every other
// check; the digests fail naming the tensor and its shard.
func TestDigestsSeeWhatTheChecksCannot(t *testing.T) {
	const q = "model.layers.1.self_attn.q_proj"
	const up = "model.layers.2.mlp.up_proj"
	tests := []struct {
		name   string
		format format.Format
		tensor string
		off    int64
		fn     func(byte) byte
	}{
		{"packed value byte", format.Ampere, up + ".packed", 1, func(b byte) byte { return b ^ 0x01 }},
		{"meta nibble to another valid code", format.Ampere, q + ".meta", 0, swapNibble},
		{"bitmask value byte", format.Bitmask, up + ".compressed", 5, func(b byte) byte { return b ^ 0x40 }},
		{"dense weight byte", format.Dense, up + ".weight", 0, func(b byte) byte { return b ^ 0x01 }},
		{"non-target byte", format.Ampere, "model.norm.weight", 2, func(b byte) byte { return b ^ 0x80 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := pruned(t, tt.format)
			patch(t, dir, tt.tensor, tt.off, tt.fn)
			rep := run(t, dir, false)
			failed := failedTensors(rep)
			if rep.OK || len(failed) != 1 || strings.Join(failed[tt.tensor], ",") != verify.CheckDigest {
				t.Fatalf("failed %v, want only the digest of %s", failed, tt.tensor)
			}
			detail := digestResult(t, rep, tt.tensor).Checks[0].Detail
			if !strings.Contains(detail, "shard model-0000") || !strings.Contains(detail, "differs from the prune report") {
				t.Errorf("detail %q does not name the shard and the report", detail)
			}
			if !hasLine(rep.Checked, "tensor digests") {
				t.Errorf("Checked %q does not list the digests", rep.Checked)
			}
		})
	}
}

func TestDigestListsDiffer(t *testing.T) {
	const name = "model.layers.0.mlp.down_proj.packed"
	tests := []struct {
		name string
		fn   func(map[string]string) map[string]string
		fail string // the tensor that fails
		want string // in its detail
	}{
		{"tensor missing from the report", func(m map[string]string) map[string]string { delete(m, name); return m },
			name, "not in the prune report's sha256 list"},
		{"tensor only in the report", func(m map[string]string) map[string]string {
			m["model.extra.weight"] = strings.Repeat("0", 64)
			return m
		},
			"model.extra.weight", "no shard of the checkpoint holds it"},
		{"empty list", func(map[string]string) map[string]string { return map[string]string{} },
			name, "not in the prune report's sha256 list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := pruned(t, format.Ampere)
			editReport(t, dir, tt.fn)
			rep := run(t, dir, false)
			if rep.OK {
				t.Fatal("passed")
			}
			if d := digestResult(t, rep, tt.fail).Checks[0].Detail; !strings.Contains(d, tt.want) {
				t.Errorf("%s: detail %q, want %q", tt.fail, d, tt.want)
			}
		})
	}
}

// digestResult returns the digest result of tensor name.
func digestResult(t *testing.T, rep *verify.Report, name string) verify.Result {
	t.Helper()
	for _, r := range rep.Results {
		if r.Tensor == name && r.Format == "digest" {
			return r
		}
	}
	t.Fatalf("no digest result for %s", name)
	return verify.Result{}
}

// TestSummarySaysWhatWasNotChecked: without a report (or digests in it)
// and without the original, verify passes and says what it left out.
func TestSummarySaysWhatWasNotChecked(t *testing.T) {
	tests := []struct {
		name     string
		prep     func(t *testing.T, dir string)
		original bool
		checked  []string
		not      []string
	}{
		{"no report", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "sfsurgery.json")); err != nil {
				t.Fatal(err)
			}
		}, false, []string{"structure", "round trip", "numeric: "},
			[]string{"tensor digests: no sfsurgery.json report", "rule against the original: no --original given", "byte identity of the other tensors with the original: no --original given", "numeric check on the GPU: --device cpu"}},
		{"report without digests", func(t *testing.T, dir string) {
			editReport(t, dir, func(map[string]string) map[string]string { return nil })
		}, true, nil, []string{"tensor digests: the sfsurgery.json report records none", "numeric check on the GPU: --device cpu"}},
		{"everything", func(*testing.T, string) {}, true,
			[]string{"tensor digests", "rule against the original", "byte-identical to the original"},
			[]string{"numeric check on the GPU: --device cpu"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := pruned(t, format.Ampere)
			tt.prep(t, dir)
			rep := run(t, dir, tt.original)
			if !rep.OK {
				t.Fatalf("failed: %v", failedTensors(rep))
			}
			for _, s := range tt.checked {
				if !hasLine(rep.Checked, s) || hasLine(rep.NotChecked, s) {
					t.Errorf("Checked %q, NotChecked %q: want %q checked", rep.Checked, rep.NotChecked, s)
				}
			}
			for _, s := range tt.not {
				if !hasLine(rep.NotChecked, s) {
					t.Errorf("NotChecked %q lacks %q", rep.NotChecked, s)
				}
			}
			if len(rep.NotChecked) != len(tt.not) {
				t.Errorf("NotChecked %q, want only %q", rep.NotChecked, tt.not)
			}
		})
	}
}
