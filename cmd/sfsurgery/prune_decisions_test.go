package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/decisions"
	"github.com/sfsurgery/sfsurgery/decisions/decisionstest"
	"github.com/sfsurgery/sfsurgery/format"
)

// decisionTensors returns the tensors of decisions of method for the
// targets of model in format f, decided by decide.
func decisionTensors(t *testing.T, model string, f format.Format, method format.Method, decide decisionstest.Decide) []decisionstest.Tensor {
	t.Helper()
	ck, err := checkpoint.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	return decisionstest.Tensors(t, ck, decisionstest.Targets(t, model, f, true), method, decide)
}

// writeSingle writes a one-tensor model: name of dt and shape, random
// values, at path.
func writeSingle(t *testing.T, path, name string, dt checkpoint.DType, rows, cols int) {
	t.Helper()
	b := make([]byte, rows*cols*dt.Size())
	for i := range rows * cols {
		v := float32(math.Sin(float64(i)*1.7) + 0.1)
		if dt == checkpoint.F32 {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		} else {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(v)>>16))
		}
	}
	decisionstest.WriteMetadata(t, path, nil, decisionstest.Tensor{Name: name, DType: dt, Shape: []int64{int64(rows), int64(cols)}, Data: b})
}

// edit returns the tensors with fn applied to the one called name.
func edit(ts []decisionstest.Tensor, name string, fn func(*decisionstest.Tensor)) []decisionstest.Tensor {
	for i := range ts {
		if ts[i].Name == name {
			fn(&ts[i])
		}
	}
	return ts
}

// TestPruneDecisionsRefused runs prune --decisions on every refusal of
// the decisions contract: each exits 2 with one line "sfsurgery: FILE:
// tensor "NAME": what" (no tensor for the file as a whole), and leaves
// nothing at the output path nor beside it.
func TestPruneDecisionsRefused(t *testing.T) {
	const (
		up   = "model.layers.0.mlp.up_proj.weight"
		down = "model.layers.1.mlp.down_proj.weight"
	)
	wanda, sparse := decisionstest.Meta(format.Wanda), decisionstest.Meta(format.SparseGPT)
	tiny := func(m format.Method, d decisionstest.Decide) []decisionstest.Tensor {
		return decisionTensors(t, testdataModel, format.Ampere, m, d)
	}
	tests := []struct {
		name     string
		model    string // testdataModel unless set
		args     []string
		meta     decisions.Meta
		metadata map[string]string // instead of meta
		tensors  func(t *testing.T, dir string) []decisionstest.Tensor
		raw      []byte // the decisions file's bytes instead
		file     string // the file the line names: "model" for the model's, else the decisions'
		tensor   string
		want     string
	}{
		{name: "bad schema", metadata: map[string]string{decisions.MetadataKey: strings.Replace(wanda.Encode(), "decisions/1", "decisions/9", 1)},
			want: `__metadata__["sfsurgery_decisions"]: schema "sfsurgery-decisions/9": this sfsurgery reads sfsurgery-decisions/1`},
		{name: "unknown method", metadata: map[string]string{decisions.MetadataKey: strings.Replace(wanda.Encode(), `"wanda"`, `"obs"`, 1)},
			want: `unknown method "obs" (want wanda, ria or sparsegpt)`},
		{name: "not safetensors", raw: []byte("# calibration notes\n"), want: "not a decisions file: "},
		{name: "malformed header", raw: append(binary.LittleEndian.AppendUint64(nil, 12), `{"x.mask":1}`...), want: "not a decisions file: "},
		{name: "missing mask", meta: wanda, tensors: func(t *testing.T, _ string) []decisionstest.Tensor {
			ts := tiny(format.Wanda, decisionstest.Magnitude)
			return ts[1:] // the first target by name: model.layers.0.mlp.down_proj.weight
		}, tensor: "model.layers.0.mlp.down_proj.weight.mask", want: "missing: the decisions hold no mask for the target model.layers.0.mlp.down_proj.weight"},
		{name: "extra tensor not a target", meta: wanda, args: []string{"--scope", "attn"},
			tensors: func(t *testing.T, _ string) []decisionstest.Tensor {
				return tiny(format.Wanda, decisionstest.Magnitude)
			},
			tensor: "model.layers.0.mlp.down_proj.weight.mask", want: "model.layers.0.mlp.down_proj.weight is not a target of this prune (outside --scope attn)"},
		{name: "extra tensor of another model", meta: wanda, tensors: func(t *testing.T, _ string) []decisionstest.Tensor {
			ts := tiny(format.Wanda, decisionstest.Magnitude)
			return append(ts, decisionstest.Tensor{Name: "model.layers.9.mlp.up_proj.weight.mask", DType: checkpoint.U8, Shape: []int64{4, 4}, Data: make([]byte, 16)})
		}, tensor: "model.layers.9.mlp.up_proj.weight.mask", want: "the model has no tensor model.layers.9.mlp.up_proj.weight: the decisions were made for another model"},
		{name: "wrong shape", meta: wanda, tensors: func(t *testing.T, _ string) []decisionstest.Tensor {
			return edit(tiny(format.Wanda, decisionstest.Magnitude), up+".mask", func(x *decisionstest.Tensor) { x.Shape = []int64{x.Shape[1], x.Shape[0]} })
		}, tensor: up + ".mask", want: "shape [32 768], want [768 32] for " + up + " [768 256]: the decisions were made for another model"},
		{name: "wrong dtype", meta: sparse, tensors: func(t *testing.T, _ string) []decisionstest.Tensor {
			return edit(tiny(format.SparseGPT, decisionstest.Magnitude), up+".update", func(x *decisionstest.Tensor) { x.DType = checkpoint.F16 })
		}, tensor: up + ".update", want: "F16 [768 256], want BF16 [768 256] as the target " + up},
		{name: "group with 1 kept", meta: wanda, tensors: func(t *testing.T, _ string) []decisionstest.Tensor {
			return edit(tiny(format.Wanda, decisionstest.Magnitude), up+".mask", func(x *decisionstest.Tensor) { x.Data[32*5] = x.Data[32*5]&0xF0 | 0x01 })
		}, tensor: up + ".mask", want: "row 5, columns 0-3: 1 kept, want 2 of every 4"},
		{name: "group with 3 kept", meta: wanda, tensors: func(t *testing.T, _ string) []decisionstest.Tensor {
			return edit(tiny(format.Wanda, decisionstest.Magnitude), up+".mask", func(x *decisionstest.Tensor) { x.Data[32*767+31] = 0xE3 })
		}, tensor: up + ".mask", want: "row 767, columns 252-255: 3 kept, want 2 of every 4"},
		{name: "bit past k", model: "single", args: []string{"--format", "dense"}, meta: wanda, tensors: func(t *testing.T, dir string) []decisionstest.Tensor {
			return edit(decisionTensors(t, filepath.Join(dir, "single.safetensors"), format.Dense, format.Wanda, decisionstest.Magnitude),
				up+".mask", func(x *decisionstest.Tensor) { x.Data[3] |= 0x10 })
		}, tensor: up + ".mask", want: "row 1: 1 of the bits past the last column (11) set, want none"},
		{name: "update nonzero where pruned", meta: sparse, tensors: func(t *testing.T, _ string) []decisionstest.Tensor {
			ts := tiny(format.SparseGPT, decisionstest.Magnitude)
			var mask []byte
			edit(ts, up+".mask", func(x *decisionstest.Tensor) { mask = x.Data })
			return edit(ts, up+".update", func(x *decisionstest.Tensor) {
				c := 0
				for mask[3*32]>>c&1 != 0 { // the first column row 3 prunes
					c++
				}
				binary.LittleEndian.PutUint16(x.Data[2*(3*256+c):], 0x3F80)
			})
		}, tensor: up + ".update", want: "where the mask prunes, want ±0"},
		{name: "update NaN", meta: sparse, tensors: func(t *testing.T, _ string) []decisionstest.Tensor {
			return edit(tiny(format.SparseGPT, decisionstest.Magnitude), up+".update", func(x *decisionstest.Tensor) {
				binary.LittleEndian.PutUint16(x.Data[2*(700*256+9):], 0x7FC0)
			})
		}, tensor: up + ".update", want: "row 700, column 9: NaN: an updated weight must be finite"},
		{name: "update Inf", meta: sparse, tensors: func(t *testing.T, _ string) []decisionstest.Tensor {
			return edit(tiny(format.SparseGPT, decisionstest.Magnitude), up+".update", func(x *decisionstest.Tensor) {
				binary.LittleEndian.PutUint16(x.Data[2*(2*256+200):], 0xFF80)
			})
		}, tensor: up + ".update", want: "row 2, column 200: -Inf: an updated weight must be finite"},
		{name: "update present for wanda", meta: wanda, tensors: func(t *testing.T, _ string) []decisionstest.Tensor {
			return tiny(format.SparseGPT, decisionstest.Magnitude)
		}, tensor: "model.layers.0.mlp.down_proj.weight.update", want: "wanda decisions hold masks only: updated weights are sparsegpt's"},
		{name: "update missing for sparsegpt", meta: sparse, tensors: func(t *testing.T, _ string) []decisionstest.Tensor {
			return tiny(format.Wanda, decisionstest.Magnitude)
		}, tensor: "model.layers.0.mlp.down_proj.weight.update", want: "missing: sparsegpt decisions hold the updated weight beside every mask"},
		{name: "F32 target in the ampere format", model: "single-f32", meta: wanda, tensors: func(t *testing.T, dir string) []decisionstest.Tensor {
			return decisionTensors(t, filepath.Join(dir, "single-f32.safetensors"), format.Dense, format.Wanda, decisionstest.Magnitude)
		}, file: "model", tensor: up, want: "F32 in the ampere format is pruned 1:2 (the hardware's form), which the 2:4 decisions of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			model := testdataModel
			switch tt.model {
			case "single":
				model = filepath.Join(dir, "single.safetensors")
				writeSingle(t, model, up, checkpoint.BF16, 8, 12)
			case "single-f32":
				model = filepath.Join(dir, "single-f32.safetensors")
				writeSingle(t, model, up, checkpoint.F32, 32, 64)
			}
			dec := filepath.Join(dir, "model.decisions.safetensors")
			var tensors []decisionstest.Tensor
			if tt.tensors != nil {
				tensors = tt.tensors(t, dir)
			}
			switch {
			case tt.raw != nil:
				if err := os.WriteFile(dec, tt.raw, 0o644); err != nil {
					t.Fatal(err)
				}
			case tt.metadata != nil:
				decisionstest.WriteMetadata(t, dec, tt.metadata, tensors...)
			default:
				decisionstest.Write(t, dec, tt.meta, tensors...)
			}
			before := treeSums(t, dir)
			outDir := t.TempDir()
			out := filepath.Join(outDir, "out")
			args := append([]string{"prune", model, "--decisions", dec, "-o", out, "--quiet"}, tt.args...)
			code, stdout, stderr := sfs(t, args...)
			file := dec
			if tt.file == "model" {
				file = model
			}
			prefix := "sfsurgery: " + file + ": "
			if tt.tensor != "" {
				prefix += `tensor "` + tt.tensor + `": `
			}
			if code != exitError || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, prefix) || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stdout %q, stderr %q;\nwant exit 2 and one line %q…%q", code, stdout, stderr, prefix, tt.want)
			}
			checkEmpty(t, outDir)
			after := treeSums(t, dir)
			for name, sum := range before {
				if after[name] != sum {
					t.Errorf("input %s changed", name)
				}
			}
		})
	}
}

// treeSums returns the SHA-256 of every file in dir, by name.
func treeSums(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		s := sha256.Sum256(b)
		sums[e.Name()] = hex.EncodeToString(s[:])
	}
	return sums
}

// TestPruneDecisionsThenVerify is the two-step path with decisions the
// Python side would write: prune --decisions in every format, the
// report as JSON, then verify --original, which checks the masks and
// says what does not apply.
func TestPruneDecisionsThenVerify(t *testing.T) {
	dir := t.TempDir()
	for _, m := range []format.Method{format.Wanda, format.SparseGPT} {
		dec := filepath.Join(dir, string(m)+".decisions.safetensors")
		decide := decisionstest.Random(5)
		if m == format.SparseGPT {
			decide = decisionstest.WithUpdate(decide, func(_ int, v uint32) uint32 { return v ^ 1 })
		}
		decisionstest.Write(t, dec, decisionstest.Meta(m), decisionTensors(t, testdataModel, format.Ampere, m, decide)...)
		for _, f := range []string{"ampere", "bitmask", "dense"} {
			out := filepath.Join(dir, string(m)+"-"+f)
			code, stdout, stderr := sfs(t, "prune", testdataModel, "--decisions", dec, "--format", f, "-o", out, "--json")
			if code != exitOK {
				t.Fatalf("%s %s: exit %d: %s", m, f, code, stderr)
			}
			var rep format.Report
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatal(err)
			}
			if rep.Method != m || rep.Decisions == nil || rep.Decisions.File != dec || len(rep.Decisions.SHA256) != 64 || rep.Tensors[0].MaskSHA256 == "" {
				t.Errorf("%s %s: report method %q, decisions %+v", m, f, rep.Method, rep.Decisions)
			}
			code, stdout, _ = sfs(t, "verify", out, "--original", testdataModel)
			if code != exitOK || !strings.Contains(stdout, "\nchecked: masks: 28 targets' masks, as the output shows them, hash to their decisions' digests") {
				t.Errorf("%s %s: verify exit %d:\n%s", m, f, code, stdout)
			}
			notApplicable := strings.Contains(stdout, "\nnot checked: rule against the original for 28 targets: not applicable: sparsegpt updates the kept weights")
			if notApplicable != (m == format.SparseGPT) {
				t.Errorf("%s %s: verify says the rule check applies: %v\n%s", m, f, !notApplicable, stdout)
			}
		}
	}
	// The summary names the method and the decisions.
	out := filepath.Join(dir, "summary")
	dec := filepath.Join(dir, "wanda.decisions.safetensors")
	code, stdout, _ := sfs(t, "prune", testdataModel, "--decisions", dec, "-o", out)
	if code != exitOK || !strings.Contains(stdout, "  method: wanda decisions from "+dec+" (4 × 16 tokens of calib.txt)\n") {
		t.Errorf("exit %d, summary:\n%s", code, stdout)
	}
}

// TestPruneDecisionsDryRun: a dry run with decisions checks them against
// the model (headers only), names the method, and writes nothing.
func TestPruneDecisionsDryRun(t *testing.T) {
	dir := t.TempDir()
	dec := filepath.Join(dir, "ria.decisions.safetensors")
	decisionstest.Write(t, dec, decisionstest.Meta(format.RIA), decisionTensors(t, testdataModel, format.Bitmask, format.RIA, decisionstest.Magnitude)...)
	out := filepath.Join(dir, "out")
	code, stdout, stderr := sfs(t, "prune", testdataModel, "--decisions", dec, "-o", out, "--dry-run", "--format", "bitmask")
	if code != exitOK || !strings.Contains(stdout, "\nmethod:  ria decisions from "+dec+" (4 × 16 tokens of calib.txt; data checked as they are read)\n") {
		t.Errorf("exit %d, stderr %q:\n%s", code, stderr, stdout)
	}
	code, stdout, _ = sfs(t, "prune", testdataModel, "--decisions", dec, "-o", out, "--dry-run", "--json")
	var doc struct {
		Method    string `json:"method"`
		Decisions string `json:"decisions"`
	}
	if code != exitOK || json.Unmarshal([]byte(stdout), &doc) != nil || doc.Method != "ria" || doc.Decisions != dec {
		t.Errorf("--json: exit %d: %s", code, stdout)
	}
	if code, stdout, _ := sfs(t, "prune", testdataModel, "-o", out, "--dry-run"); code != exitOK || !strings.Contains(stdout, "\nmethod:  magnitude (") {
		t.Errorf("without decisions: exit %d:\n%s", code, stdout)
	}
	if code, _, stderr := sfs(t, "prune", testdataModel, "--decisions", dec, "-o", out, "--dry-run", "--scope", "mlp"); code != exitError ||
		!strings.Contains(stderr, "is not a target of this prune (outside --scope mlp)") {
		t.Errorf("--scope mlp: exit %d, %q", code, stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("--dry-run wrote %s", out)
	}
}

// TestSignalStopsPruneDecisions interrupts a prune by sparsegpt's
// decisions (masks and updated values streamed, the decisions file
// hashed aside) while it writes: it exits 2 with one line saying that
// nothing was written, and leaves nothing.
func TestSignalStopsPruneDecisions(t *testing.T) {
	in := model(t)
	dir := t.TempDir()
	dec := filepath.Join(t.TempDir(), "big.decisions.safetensors")
	decisionstest.Write(t, dec, decisionstest.Meta(format.SparseGPT),
		decisionTensors(t, in, format.Ampere, format.SparseGPT, decisionstest.Random(1))...)
	out := filepath.Join(dir, "out")
	cmd, stderr := sfsProcess(t, "prune", in, "--decisions", dec, "-o", out, "--workers", "1", "--quiet")
	waitForTemp(t, dir, "out")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code := exitCode(cmd.Wait())
	want := "sfsurgery: interrupted; nothing was written at " + out + "\n"
	if code != exitError || stderr.String() != want {
		t.Errorf("exit %d, stderr %q; want exit %d, %q", code, stderr.String(), exitError, want)
	}
	checkEmpty(t, dir)
}
