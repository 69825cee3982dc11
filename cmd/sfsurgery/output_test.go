package main

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// TestDefaultOutputInCurrentDir checks that prune without -o plans its
// output in the current directory, named after the model.
func TestDefaultOutputInCurrentDir(t *testing.T) {
	model, err := filepath.Abs(testdataModel)
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	for _, tt := range []struct{ in, want string }{
		{model, "tiny-llama-bf16-2of4"},
		{filepath.Join(model, "model.safetensors.index.json"), "tiny-llama-bf16-2of4"},
		{filepath.Join(model, "model-00002-of-00002.safetensors"), "model-00002-of-00002-2of4.safetensors"},
	} {
		code, stdout, errs := sfs(t, "prune", tt.in, "--dry-run", "--json")
		var plan struct{ Output string }
		if code != exitOK || json.Unmarshal([]byte(stdout), &plan) != nil {
			t.Fatalf("prune %s --dry-run: exit %d: %s", tt.in, code, errs)
		}
		if plan.Output != tt.want {
			t.Errorf("prune %s: default output %q, want %q", tt.in, plan.Output, tt.want)
		}
	}
}
