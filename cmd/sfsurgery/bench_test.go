package main

import (
	"bytes"
	"encoding/json"
	"os"
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

// TestBenchListFused lists a checkpoint's shapes as an engine stacks them.
func TestBenchListFused(t *testing.T) {
	code, out, errs := sfs(t, "bench", "--list", "--fuse", testdataModel)
	want := `tiny-llama-bf16 qkv          N=512    K=256    count=4
tiny-llama-bf16 o            N=256    K=256    count=4
tiny-llama-bf16 gate_up      N=1536   K=256    count=4
tiny-llama-bf16 down         N=256    K=768    count=4
`
	if code != exitOK || out != want {
		t.Errorf("exit %d, stderr %q, shapes:\n%s\nwant:\n%s", code, errs, out, want)
	}
	// Compressed weights stack as their dense originals do.
	for _, format := range []string{"ampere", "bitmask"} {
		dir := filepath.Join(t.TempDir(), "tiny-llama-bf16")
		if code, _, errs := sfs(t, "prune", testdataModel, "-o", dir, "--format", format, "--quiet"); code != exitOK {
			t.Fatalf("prune --format %s: %s", format, errs)
		}
		if code, got, errs := sfs(t, "bench", "--list", "--fuse", dir); code != exitOK || got != want {
			t.Errorf("pruned (%s): exit %d, stderr %q, shapes:\n%s", format, code, errs, got)
		}
	}
	if code, out, errs := sfs(t, "bench", "--list", "--shapes", "64x64", "--dtype", "f16", "--out-dtype", "F16"); code != exitOK || out == "" {
		t.Errorf("--out-dtype of the --dtype: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, _ = sfs(t, "bench", "--list", "--fuse", "--shapes", "llama3-8b")
	if code != exitOK || !strings.Contains(out, "llama3-8b      qkv          N=6144   K=4096") ||
		!strings.Contains(out, "llama3-8b      gate_up      N=28672  K=4096") {
		t.Errorf("exit %d, shapes:\n%s", code, out)
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
		{"bench", "--shapes", "64x64", "--out-dtype", "f16", "--list"},
		{"bench", "--shapes", "64x64", "--dtype", "f16", "--out-dtype", "bf16", "--list"},
		{"bench", "--shapes", "64x64", "--out-dtype", "i8", "--list"},
		{"bench", "--report", "bench_test.go", "--out-dtype", "bf16"},
		{"bench", "--shapes", "64x64", "--gemm-share", "1.5", "--list"},
		{"bench", "--shapes", "64x64", "--dense-candidates", "0", "--list"},
		{"bench", "--shapes", "64x64", "--sparse-candidates", "-1", "--list"},
		{"bench", "--shapes", "64x64", "--graph-calls", "0", "--list"},
		{"bench", "--shapes", "64x64", "--runs", "9223372036854775807", "--list"},
		{"bench", "--shapes", "64x64", "--warmup", "-1", "--list"},
		{"bench", "--shapes", "2147483648x64", "--list"},
		{"bench", "--shapes", "64x64", "--plot", "out.gif", "--list"},
		{"bench", "--shapes", "64x64", "--plot", "/no/such/dir/b.png", "--list"},
		{"bench", "--shapes", "64x64", "--markdown", "/no/such/dir/b.md", "--list"},
		{"bench", "--shapes", "64x64", "--policy", ".", "--list"},
		{"bench", "--shapes", "64x64", "--markdown", "b.md", "--policy", "./b.md", "--list"},
		{"bench", "--shapes", "64x64", "--markdown", "bench_test.go/b.md", "--list"},
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
	snap := filepath.Join(t.TempDir(), "models--TinyLlama--TinyLlama-1.1B-Chat-v1.0", "snapshots", "0123456789abcdef0123456789abcdef01234567")
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		snap:                                     "TinyLlama-1.1B-Chat-v1.0",
		filepath.Join(snap, "model.safetensors"): "TinyLlama-1.1B-Chat-v1.0",
		"/m/Llama-3-8B/":                         "Llama-3-8B",
		"/m/Llama-3-8B/model.safetensors.index.json": "Llama-3-8B",
		"/m/tiny.safetensors":                        "tiny",
		"/m/dir/model.safetensors":                   "dir",
	} {
		if got := modelName(path); got != want {
			t.Errorf("modelName(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestBenchReport renders a saved report without a GPU.
func TestBenchReport(t *testing.T) {
	dir := t.TempDir()
	s := speed.Shape{Model: "llama3-8b", Ops: []string{"q", "o"}, N: 4096, K: 4096, Count: 2}
	rep := speed.Report{Schema: speed.ReportSchema, Tool: "sfsurgery test", DType: "BF16", Shapes: []speed.Shape{s},
		Ms: []int{1, 4096}, Env: speed.Env{GPU: "NVIDIA H200", Driver: "13.0", CuSPARSELt: "0.8.0"},
		Method: speed.Method{Runs: 25, MinSpeedup: speed.DefaultMinSpeedup, GEMMShare: 0.7},
		Rows: []speed.Row{
			{Model: s.Model, Ops: s.Ops, N: s.N, K: s.K, M: 1, Backend: speed.Dense, MedianUS: 16, Speedup: 1},
			{Model: s.Model, Ops: s.Ops, N: s.N, K: s.K, M: 1, Backend: speed.CuSPARSELt, MedianUS: 25, Speedup: 0.64},
			{Model: s.Model, Ops: s.Ops, N: s.N, K: s.K, M: 4096, Backend: speed.Dense, MedianUS: 180, Speedup: 1},
			{Model: s.Model, Ops: s.Ops, N: s.N, K: s.K, M: 4096, Backend: speed.CuSPARSELt, MedianUS: 120, Speedup: 1.5},
		}}
	saved := filepath.Join(dir, "bench.json")
	if b, err := json.MarshalIndent(rep, "", "  "); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(saved, b, 0o644); err != nil {
		t.Fatal(err)
	}
	md, png, pol := filepath.Join(dir, "b.md"), filepath.Join(dir, "b.png"), filepath.Join(dir, "p.json")
	code, out, errs := sfs(t, "bench", "--report", saved, "--markdown", md, "--plot", png, "--policy", pol)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if !strings.Contains(out, "cusparselt") {
		t.Errorf("text report: %q", out)
	}
	var p speed.Policy
	b, err := os.ReadFile(pol)
	if err != nil || json.Unmarshal(b, &p) != nil || len(p.Entries) != 1 || len(p.Entries[0].Sparse) != 1 ||
		p.Entries[0].Sparse[0].MinM != 4096 || p.GPU != "NVIDIA H200" {
		t.Errorf("policy %s: %v", b, err)
	}
	if b, err := os.ReadFile(md); err != nil || !strings.Contains(string(b), "![speedup vs M per shape](b.png)") {
		t.Errorf("markdown: %v", err)
	}
	if st, err := os.Stat(png); err != nil || st.Size() == 0 {
		t.Errorf("plot: %v", err)
	}
	// Without cuSPARSELt (one weight copy): no sparse range is left, as
	// the report has no row of ours.
	one := filepath.Join(dir, "one.json")
	if code, _, errs := sfs(t, "bench", "--report", saved, "--no-cusparselt", "--policy", one); code != exitOK {
		t.Fatalf("--no-cusparselt: exit %d, stderr %q", code, errs)
	}
	var p1 speed.Policy
	if b, err := os.ReadFile(one); err != nil || json.Unmarshal(b, &p1) != nil || len(p1.Entries) != 1 ||
		len(p1.Entries[0].Sparse) != 0 || p1.CuSPARSELt != "" {
		t.Errorf("one-copy policy %s: %v", b, err)
	}
	// Again over the same files: each replaced whole, no temporary left.
	if code, _, errs := sfs(t, "bench", "--report", saved, "--markdown", md, "--plot", png, "--policy", pol); code != exitOK {
		t.Fatalf("second render: exit %d, stderr %q", code, errs)
	}
	if names, err := filepath.Glob(filepath.Join(dir, ".*")); err != nil || len(names) != 0 {
		t.Errorf("left in %s: %v (%v)", dir, names, err)
	}
	// An output over the report it renders is refused before anything is
	// written.
	before, err := os.ReadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errs := sfs(t, "bench", "--report", saved, "--markdown", saved); code != exitError ||
		!strings.Contains(errs, "the same file as --report") {
		t.Errorf("--markdown over --report: exit %d, %q", code, errs)
	}
	if after, err := os.ReadFile(saved); err != nil || !bytes.Equal(before, after) {
		t.Errorf("the saved report changed: %v", err)
	}
	// --fuse chooses what to measure: a saved report has its shapes.
	if code, _, errs := sfs(t, "bench", "--report", saved, "--fuse"); code != exitError || !strings.Contains(errs, "--fuse") {
		t.Errorf("--report with --fuse: exit %d, %q", code, errs)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"schema":"other/1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := sfs(t, "bench", "--report", bad); code != exitError || !strings.Contains(errs, "not a bench report") {
		t.Errorf("bad report: exit %d, %q", code, errs)
	}
	if code, _, _ := sfs(t, "bench", "--report", saved, "--shapes", "64x64"); code != exitError {
		t.Errorf("--report with --shapes: exit %d", code)
	}
}
