package speed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// sampleReport is a small report as Run would return it.
func sampleReport() *Report {
	a := Shape{Model: "llama3-8b", Ops: []string{"q", "o"}, N: 4096, K: 4096, Count: 2}
	b := Shape{Model: "llama3-8b", Ops: []string{"down"}, N: 4096, K: 14336, Count: 1}
	ms := []int{1, 64, 4096}
	rows := append(table(a, ms, []float64{20, 25, 200}, map[string][]float64{Ours: {30, 35, 400}, CuSPARSELt: {22, 24, 130}}),
		table(b, ms, []float64{60, 70, 700}, map[string][]float64{Ours: {0, 100, 1500}, CuSPARSELt: {58, 66, 450}})...)
	for i := range rows {
		r := &rows[i]
		if r.Timed() {
			dense, _ := baseline(rows, r.shapeKey(), r.M)
			r.Speedup = dense.MedianUS / r.MedianUS
			r.TFLOPS = TFLOPS(r.M, r.N, r.K, time.Duration(r.MedianUS*1e3))
		}
	}
	rep := &Report{Schema: ReportSchema, Tool: "sfsurgery test", Date: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC),
		Command: "sfsurgery bench --shapes llama3-8b", DType: "BF16",
		Env:      Env{GPU: "NVIDIA H200", Capability: "9.0", SMs: 132, L2Bytes: 60 << 20, Driver: "13.0", CublasLt: 130100, CuSPARSELt: "0.8.0"},
		Ceilings: Ceilings{BandwidthGBs: 4300, DenseTFLOPS: 780, SparseTFLOPS: 1560, GEMM: "8192x8192x8192 BF16"},
		Method:   Method{Warmup: 5, Runs: 25, Statistic: "median", MinSpeedup: DefaultMinSpeedup, GEMMShare: DefaultGEMMShare},
		Shapes:   []Shape{a, b}, Ms: ms, Rows: rows, Notes: []string{"a note"}}
	rep.Estimates = Estimates(rep.Shapes, rows, DerivePolicy(rep.Shapes, rows, DefaultMinSpeedup), DefaultGEMMShare)
	return rep
}

func TestWritePlot(t *testing.T) {
	rep := sampleReport()
	dir := t.TempDir()
	pngPath := filepath.Join(dir, "speedup.png")
	if err := WritePlotFile(pngPath, rep); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 200 {
		t.Errorf("PNG is %v", b)
	}
	var svg bytes.Buffer
	if err := WritePlot(&svg, "svg", rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "llama3-8b q,o 4096x4096", "llama3-8b down 4096x14336", "cuSPARSELt", "break-even"} {
		if !strings.Contains(svg.String(), want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	if err := WritePlotFile(filepath.Join(dir, "x.gif"), rep); !errors.Is(err, ErrPlotFormat) {
		t.Errorf(".gif: %v", err)
	}
	if err := WritePlot(&svg, "svg", &Report{}); err == nil {
		t.Error("a report without shapes plotted")
	}
}

// TestReportJSON pins the JSON field names that scripts read.
func TestReportJSON(t *testing.T) {
	b, err := json.Marshal(sampleReport())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"schema", "tool", "date", "command", "dtype", "env", "ceilings", "method", "shapes", "m", "rows", "estimates", "notes"} {
		if _, ok := doc[key]; !ok {
			t.Errorf("report lacks %q", key)
		}
	}
	if doc["schema"] != ReportSchema {
		t.Errorf("schema = %v", doc["schema"])
	}
	row := doc["rows"].([]any)[0].(map[string]any)
	for _, key := range []string{"model", "ops", "n", "k", "m", "backend", "median_us", "tflops", "speedup", "runs", "rel_err"} {
		if _, ok := row[key]; !ok && key != "runs" && key != "ops" {
			t.Errorf("row lacks %q: %v", key, row)
		}
	}
	env := doc["env"].(map[string]any)
	for _, key := range []string{"gpu", "capability", "driver", "cublaslt", "cusparselt", "l2_bytes"} {
		if _, ok := env[key]; !ok {
			t.Errorf("env lacks %q", key)
		}
	}
	ceil := doc["ceilings"].(map[string]any)
	for _, key := range []string{"bandwidth_gbs", "dense_tflops", "sparse_tflops"} {
		if _, ok := ceil[key]; !ok {
			t.Errorf("ceilings lack %q", key)
		}
	}
	pol, err := json.Marshal(NewPolicy(sampleReport(), DerivePolicy(sampleReport().Shapes, sampleReport().Rows, 1.05)))
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(pol, &p); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"schema", "generated", "gpu", "driver", "cublaslt", "cusparselt", "dtype", "min_speedup", "measured_m", "default", "entries"} {
		if _, ok := p[key]; !ok {
			t.Errorf("policy lacks %q", key)
		}
	}
	e := p["entries"].([]any)[0].(map[string]any)
	if _, ok := e["sparse"].([]any); !ok || e["ops"] == nil {
		t.Errorf("entry %v: want ops and a sparse list (empty, not null)", e)
	}
}

func TestWriteTextAndMarkdown(t *testing.T) {
	rep := sampleReport()
	var txt bytes.Buffer
	if err := WriteText(&txt, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NVIDIA H200", "ceilings:", "llama3-8b q,o 4096x4096", "cusparselt", "headline", "end-to-end", "note: a note", "wrong result"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, txt.String())
		}
	}
	var md bytes.Buffer
	policy := DerivePolicy(rep.Shapes, rep.Rows, DefaultMinSpeedup)
	if err := WriteMarkdown(&md, rep, policy, "bench.png"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# 2:4 sparse vs dense on NVIDIA H200", "sfsurgery bench --shapes llama3-8b", "![speedup vs M per shape](bench.png)",
		"## Where each backend wins and loses", "## Headline", "## End-to-end estimate", "## Dispatch policy", "## All rows",
		"M 4096–4096: cusparselt", "not measured at 1"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
}

// TestOutputNote checks that a report of 16-bit output says so in its
// Markdown title and its text, and one of float32 output (every report
// from before the option) says nothing new.
func TestOutputNote(t *testing.T) {
	for _, c := range []struct {
		output, title, env string
	}{
		{"", "# 2:4 sparse vs dense on NVIDIA H200 (BF16)\n", ", BF16\n"},
		{"BF16", "# 2:4 sparse vs dense on NVIDIA H200 (BF16, y in BF16)\n", ", BF16, y in BF16\n"},
	} {
		rep := sampleReport()
		rep.Method.Output = c.output
		var txt, md bytes.Buffer
		if err := WriteText(&txt, rep); err != nil {
			t.Fatal(err)
		}
		if err := WriteMarkdown(&md, rep, nil, ""); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(md.String(), c.title) {
			t.Errorf("output %q: markdown starts %q", c.output, strings.SplitN(md.String(), "\n", 2)[0])
		}
		if first := strings.SplitN(txt.String(), "\n", 2)[0] + "\n"; !strings.HasSuffix(first, c.env) {
			t.Errorf("output %q: text starts %q", c.output, first)
		}
	}
}

// TestRunRefusesOutput checks that a sweep refuses, before it touches
// the device, an output type other than float32 or its data type.
func TestRunRefusesOutput(t *testing.T) {
	shapes := []Shape{{Model: "t", Ops: []string{"q"}, N: 32, K: 64, Count: 1}}
	for _, c := range []struct{ dt, out checkpoint.DType }{{checkpoint.BF16, checkpoint.F16}, {checkpoint.F16, checkpoint.BF16}, {checkpoint.BF16, checkpoint.I8}} {
		if _, err := Run(context.Background(), nil, shapes, Options{DType: c.dt, Output: c.out}); !errors.Is(err, ErrParse) {
			t.Errorf("%v with y of %v: %v, want ErrParse", c.dt, c.out, err)
		}
	}
}

func TestHeadlines(t *testing.T) {
	hs := Headlines(sampleReport().Rows, DefaultMinSpeedup)
	got := map[string]Headline{}
	for _, h := range hs {
		got[h.Backend+" "+h.Regime] = h
	}
	// ours at M ≤ 64: q,o 20/30 = 0.67, 25/35 = 0.71; down 70/100 = 0.70
	// (M=1 untimed).
	h := got["ours M<=64"]
	if h.Rows != 3 || h.Wins != 0 || h.Losses != 3 || h.Worst.M != 1 || h.Best.Label != "llama3-8b q,o 4096x4096" || h.Best.M != 64 {
		t.Errorf("ours decode: %+v", h)
	}
	h = got["cusparselt M>=4096"]
	if h.Rows != 2 || h.Wins != 2 || h.Losses != 0 || h.Best.Label != "llama3-8b down 4096x14336" || h.Worst.Label != "llama3-8b q,o 4096x4096" {
		t.Errorf("cuSPARSELt prefill: %+v", h)
	}
}

// TestTimingMethod checks that the documents say how rows were timed: one
// by one for reports without graphs, by graph replays when they were.
func TestTimingMethod(t *testing.T) {
	for _, c := range []struct {
		graphCalls int
		want, not  string
	}{
		{0, "CUDA events around each run", "CUDA graph"},
		{1, "CUDA events around each run", "CUDA graph"},
		{20, "captured up to 20 at a time into a CUDA graph", "around each run"},
	} {
		rep := sampleReport()
		rep.Method.GraphCalls = c.graphCalls
		var txt, md bytes.Buffer
		if err := WriteText(&txt, rep); err != nil {
			t.Fatal(err)
		}
		if err := WriteMarkdown(&md, rep, DerivePolicy(rep.Shapes, rep.Rows, DefaultMinSpeedup), ""); err != nil {
			t.Fatal(err)
		}
		for _, doc := range []string{txt.String(), md.String()} {
			if !strings.Contains(doc, c.want) || strings.Contains(doc, c.not) {
				t.Errorf("graph calls %d: the timing line lacks %q or has %q", c.graphCalls, c.want, c.not)
			}
		}
	}
}
