package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/speed"
)

const tinyShapes = `tiny-llama-bf16 q,o          N=256    K=256    count=8
tiny-llama-bf16 k,v          N=128    K=256    count=8
tiny-llama-bf16 gate,up      N=768    K=256    count=8
tiny-llama-bf16 down         N=256    K=768    count=4
`

func TestBenchListCheckpoint(t *testing.T) {
	code, out, errs := sfs(t, "bench", "--list", testdataModel)
	if code != exitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if out != tinyShapes {
		t.Errorf("shapes:\n%s\nwant:\n%s", out, tinyShapes)
	}
	// A pruned checkpoint stores P.packed/P.meta/P.shape: the same shapes.
	dir := filepath.Join(t.TempDir(), "tiny-llama-bf16")
	if code, _, errs := sfs(t, "prune", testdataModel, "-o", dir, "--quiet"); code != exitOK {
		t.Fatalf("prune: %s", errs)
	}
	code, out, errs = sfs(t, "bench", "--list", dir)
	if code != exitOK || out != tinyShapes {
		t.Errorf("pruned checkpoint: exit %d, %q, stderr %q", code, out, errs)
	}
}

func TestBenchListShapes(t *testing.T) {
	code, out, _ := sfs(t, "bench", "--list", "--shapes", "llama3-70b,q+o=512x256")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"llama3-70b     gate,up      N=28672  K=8192", "llama3-70b     k,v          N=1024   K=8192",
		"               q,o          N=512    K=256"} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench"},
		{"bench", "--shapes", "4096", "--list"},
		{"bench", testdataModel, "--shapes", "64x64", "--list"},
		{"bench", "--shapes", "64x64", "--m", "0", "--list"},
		{"bench", "--shapes", "64x64", "--m", "1,x", "--list"},
		{"bench", "--shapes", "64x64", "--dtype", "f32", "--list"},
		{"bench", "--shapes", "64x64", "--gemm-share", "1.5", "--list"},
		{"bench", "--shapes", "64x64", "--plot", "out.gif", "--list"},
		{"bench", "/no/such/checkpoint", "--list"},
	} {
		code, out, errs := sfs(t, args...)
		if code != exitError || out != "" || !strings.HasPrefix(errs, "sfsurgery: ") || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
}

// TestBenchRuns runs a tiny sweep: on a machine without a GPU it must
// fail with one clear line (exit 2); with one it must measure and print
// a JSON report.
func TestBenchRuns(t *testing.T) {
	code, out, errs := sfs(t, "bench", "--shapes", "q=256x512", "--m", "1,32", "--json", "--quiet")
	if code == exitError {
		if !strings.Contains(errs, "bench needs a CUDA GPU") || strings.Count(errs, "\n") != 1 {
			t.Errorf("no-GPU message: %q", errs)
		}
		t.Skipf("no GPU: %s", strings.TrimSpace(errs))
	}
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var rep speed.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("JSON report: %v", err)
	}
	if rep.Schema != speed.ReportSchema || rep.Ceilings.BandwidthGBs <= 0 || len(rep.Rows) < 4 {
		t.Errorf("report: %+v", rep)
	}
	for _, r := range rep.Rows {
		if r.Error != "" {
			t.Errorf("row %s M=%d: %s", r.Backend, r.M, r.Error)
		}
	}
	t.Logf("notes: %v", rep.Notes)
}

func TestModelName(t *testing.T) {
	for path, want := range map[string]string{
		"/m/Llama-3-8B/": "Llama-3-8B",
		"/m/Llama-3-8B/model.safetensors.index.json": "Llama-3-8B",
		"/m/tiny.safetensors":                        "tiny",
		"/m/dir/model.safetensors":                   "dir",
	} {
		if got := modelName(path); got != want {
			t.Errorf("modelName(%q) = %q, want %q", path, got, want)
		}
	}
}
