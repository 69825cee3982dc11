package surgery_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/prune24"
	"github.com/sfsurgery/sfsurgery/surgery"
)

// planAndWrite runs a prune and returns its error; it checks that a
// failure leaves nothing at out.
func planAndWrite(t *testing.T, ctx context.Context, in, out string, opt surgery.Options, wopt checkpoint.WriteOptions) error {
	t.Helper()
	ck, err := checkpoint.Open(in)
	if err != nil {
		return err
	}
	defer ck.Close()
	opt.Version = "test"
	p, err := surgery.NewPlan(ck, opt)
	if err == nil {
		_, err = p.Write(ctx, out, wopt)
	}
	return err
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	const q = "model.layers.0.self_attn.q_proj.weight"
	good := randomBF16(64*64, 7)
	nan := append([]byte(nil), good...)
	binary.LittleEndian.PutUint16(nan[2*(5*64+9):], 0x7FC1) // row 5, column 9
	nanLast := append([]byte(nil), good...)
	binary.LittleEndian.PutUint16(nanLast[2*(63*64+60):], 0xFF81) // row 63, column 60
	tests := []struct {
		name    string
		tensors []tensor
		opt     surgery.Options
		wantErr error
		wantMsg []string
	}{
		{"nan", []tensor{{q, checkpoint.BF16, []int64{64, 64}, nan}}, surgery.Options{}, prune24.ErrNaN,
			[]string{q, "row 5", "column 9"}},
		// The first target is written before the second's last row turns
		// up a NaN: a failure part way through the output.
		{"nan part way", []tensor{
			{"model.layers.0.mlp.up_proj.weight", checkpoint.BF16, []int64{64, 64}, good},
			{"model.layers.1.mlp.up_proj.weight", checkpoint.BF16, []int64{64, 64}, nanLast},
		}, surgery.Options{}, prune24.ErrNaN, []string{"model.layers.1.mlp.up_proj.weight", "row 63", "column 60"}},
		{"unsupported dtype", []tensor{{q, checkpoint.I16, []int64{64, 64}, good}}, surgery.Options{}, surgery.ErrUnsupported,
			[]string{q, "I16"}},
		{"in not a multiple of 4", []tensor{{q, checkpoint.BF16, []int64{64, 62}, good[:64*62*2]}}, surgery.Options{}, surgery.ErrUnsupported,
			[]string{q, "62", "multiple of 4"}},
		{"not a matrix", []tensor{{q, checkpoint.BF16, []int64{64 * 64}, good}}, surgery.Options{}, surgery.ErrUnsupported,
			[]string{q, "not a matrix"}},
		{"guard with --strict", []tensor{{q, checkpoint.BF16, []int64{16, 64}, good[:16*64*2]}}, surgery.Options{Strict: true}, surgery.ErrUnsupported,
			[]string{q, "--strict"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := filepath.Join(dir, tt.name+".safetensors")
			writeModel(t, in, tt.tensors)
			before := fileBytes(t, in)
			out := filepath.Join(dir, tt.name+"-out.safetensors")
			if tt.opt.Format == "" {
				tt.opt.Format = format.Ampere
			}
			err := planAndWrite(t, context.Background(), in, out, tt.opt, checkpoint.WriteOptions{})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			for _, m := range tt.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not name %q", err, m)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
			if _, serr := os.Stat(out); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("something was left at the output path: %v", serr)
			}
			if string(fileBytes(t, in)) != string(before) {
				t.Error("the input was modified")
			}
			leftovers, _ := filepath.Glob(filepath.Join(dir, ".*"))
			if len(leftovers) > 0 {
				t.Errorf("temporary files left behind: %v", leftovers)
			}
		})
	}
}

func TestSkipUnsupportedAndGuard(t *testing.T) {
	dir := t.TempDir()
	const q = "model.layers.0.self_attn.q_proj.weight"
	const k = "model.layers.0.self_attn.k_proj.weight"
	const v = "model.layers.0.self_attn.v_proj.weight"
	in := filepath.Join(dir, "m.safetensors")
	writeModel(t, in, []tensor{
		{q, checkpoint.BF16, []int64{64, 64}, randomBF16(64*64, 1)},
		{k, checkpoint.BF16, []int64{16, 64}, randomBF16(16*64, 2)}, // fails out%32
		{v, checkpoint.I16, []int64{32, 64}, randomBF16(32*64, 3)},
	})
	out := filepath.Join(dir, "out.safetensors")
	r := prune(t, in, out, surgery.Options{Format: format.Ampere, SkipUnsupported: true}, checkpoint.WriteOptions{})
	if r.Pruned != 1 || r.Skipped != 2 {
		t.Fatalf("pruned %d skipped %d, want 1 and 2", r.Pruned, r.Skipped)
	}
	ck, err := checkpoint.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, name := range []string{k, v, "model.layers.0.self_attn.q_proj.packed"} {
		if _, _, ok := ck.Lookup(name); !ok {
			t.Errorf("output lacks %s", name)
		}
	}
	orig, _ := checkpoint.Open(in)
	defer orig.Close()
	for _, name := range []string{k, v} {
		f1, t1, _ := ck.Lookup(name)
		f2, t2, _ := orig.Lookup(name)
		if string(f1.Data(t1)) != string(f2.Data(t2)) {
			t.Errorf("%s was left dense but changed", name)
		}
	}
}

func TestOutputChecks(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	prune(t, testdataModel, out, surgery.Options{Format: format.Dense}, checkpoint.WriteOptions{})
	// An existing output is refused without Force, and left alone.
	before := treeHashes(t, out)
	err := planAndWrite(t, context.Background(), testdataModel, out, surgery.Options{Format: format.Ampere}, checkpoint.WriteOptions{})
	if !errors.Is(err, checkpoint.ErrExist) {
		t.Errorf("existing output: err = %v, want ErrExist", err)
	}
	after := treeHashes(t, out)
	if len(before) != len(after) {
		t.Error("the existing output was changed")
	}
	// Force replaces it.
	if err := planAndWrite(t, context.Background(), testdataModel, out, surgery.Options{Format: format.Ampere}, checkpoint.WriteOptions{Force: true}); err != nil {
		t.Errorf("--force: %v", err)
	}
	// The input itself is never an output, even with Force.
	tmp := filepath.Join(dir, "copy")
	if err := os.CopyFS(tmp, os.DirFS(testdataModel)); err != nil {
		t.Fatal(err)
	}
	hashes := treeHashes(t, tmp)
	err = planAndWrite(t, context.Background(), tmp, tmp, surgery.Options{Format: format.Dense}, checkpoint.WriteOptions{Force: true})
	if !errors.Is(err, checkpoint.ErrOverwriteInput) {
		t.Errorf("output = input: err = %v, want ErrOverwriteInput", err)
	}
	single := filepath.Join(dir, "single.safetensors")
	writeModel(t, single, []tensor{{"model.layers.0.mlp.up_proj.weight", checkpoint.BF16, []int64{32, 64}, randomBF16(32*64, 4)}})
	err = planAndWrite(t, context.Background(), single, single, surgery.Options{Format: format.Dense}, checkpoint.WriteOptions{Force: true})
	if !errors.Is(err, checkpoint.ErrOverwriteInput) {
		t.Errorf("single file output = input: err = %v, want ErrOverwriteInput", err)
	}
	for k, v := range treeHashes(t, tmp) {
		if hashes[k] != v {
			t.Errorf("input %s changed", k)
		}
	}
}

func TestCancelPartWay(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "m.safetensors")
	var ts []tensor
	for i := range 8 {
		ts = append(ts, tensor{"model.layers." + string(rune('0'+i)) + ".mlp.up_proj.weight", checkpoint.BF16,
			[]int64{512, 1024}, randomBF16(512*1024, uint64(i))})
	}
	writeModel(t, in, ts)
	before := fileBytes(t, in)
	ctx, cancel := context.WithCancel(context.Background())
	out := filepath.Join(dir, "out.safetensors")
	var once bool
	wopt := checkpoint.WriteOptions{Workers: 1, Progress: func(int64) {
		if !once {
			once = true
			cancel()
		}
	}}
	err := planAndWrite(t, ctx, in, out, surgery.Options{Format: format.Ampere}, wopt)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, serr := os.Stat(out); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("output exists after cancel: %v", serr)
	}
	if string(fileBytes(t, in)) != string(before) {
		t.Error("input modified")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestBrokenCheckpoints(t *testing.T) {
	dir := t.TempDir()
	// A truncated shard.
	trunc := filepath.Join(dir, "trunc")
	if err := os.CopyFS(trunc, os.DirFS(testdataModel)); err != nil {
		t.Fatal(err)
	}
	shard := filepath.Join(trunc, "model-00002-of-00002.safetensors")
	b := fileBytes(t, shard)
	if err := os.WriteFile(shard, b[:len(b)-100], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := checkpoint.Open(trunc)
	if !errors.Is(err, checkpoint.ErrFormat) || !strings.Contains(err.Error(), "model-00002-of-00002.safetensors") {
		t.Errorf("truncated shard: err = %v", err)
	}
	// An index naming a missing shard.
	missing := filepath.Join(dir, "missing")
	if err := os.CopyFS(missing, os.DirFS(testdataModel)); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(missing, "model-00001-of-00002.safetensors"))
	_, err = checkpoint.Open(missing)
	if !errors.Is(err, checkpoint.ErrMissingShard) || !strings.Contains(err.Error(), "model-00001-of-00002.safetensors") {
		t.Errorf("missing shard: err = %v", err)
	}
}
