package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDryRunSaysSo checks that prune --dry-run ends its text with a line
// saying nothing was written and marks its JSON "dry_run".
func TestDryRunSaysSo(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	code, stdout, errs := sfs(t, "prune", testdataModel, "-o", out, "--dry-run")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.HasSuffix(stdout, "\ndry run: nothing was written\n") {
		t.Errorf("--dry-run text does not end with the dry-run line:\n%s", stdout)
	}
	code, stdout, errs = sfs(t, "prune", testdataModel, "-o", out, "--dry-run", "--json")
	if code != exitOK {
		t.Fatalf("--json: exit %d: %s", code, errs)
	}
	var plan map[string]any
	if err := json.Unmarshal([]byte(stdout), &plan); err != nil {
		t.Fatalf("--json: %v\n%s", err, stdout)
	}
	if plan["dry_run"] != true || plan["output"] != out {
		t.Errorf("--json: dry_run %v, output %v; want true, %s", plan["dry_run"], plan["output"], out)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("--dry-run wrote %s", out)
	}
}

// TestDryRunListsNotPruned checks that the plan lists and counts the
// projection-like tensors a run would leave unpruned, in text and JSON.
func TestDryRunListsNotPruned(t *testing.T) {
	code, stdout, errs := sfs(t, "prune", testdataModel, "--dry-run", "--scope", "attn")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"12 projection-like tensors not pruned", "not pruned: model.layers.N.mlp.down_proj.weight ×4: outside --scope attn"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("plan lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, _ = sfs(t, "prune", testdataModel, "--dry-run", "--scope", "attn", "--json")
	var plan struct {
		NotPruned []struct{ Name, Reason string } `json:"not_pruned"`
	}
	if err := json.Unmarshal([]byte(stdout), &plan); code != exitOK || err != nil || len(plan.NotPruned) != 12 {
		t.Errorf("--json: exit %d, %v, %d not pruned, want 12", code, err, len(plan.NotPruned))
	}
}
