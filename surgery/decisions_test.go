package surgery_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/decisions"
	"github.com/sfsurgery/sfsurgery/decisions/decisionstest"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/prune24"
	"github.com/sfsurgery/sfsurgery/surgery"
)

// buildDecisions writes at path the decisions of method for the targets
// of in (as format f prunes them), decided by decide.
func buildDecisions(t *testing.T, path, in string, f format.Format, method format.Method, decide decisionstest.Decide) {
	t.Helper()
	ck, err := checkpoint.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	decisionstest.Build(t, path, ck, decisionstest.Targets(t, in, f, true), method, decide)
}

// pruneDecided prunes in into out in format f by the decisions at dec.
func pruneDecided(t *testing.T, in, out, dec string, opt surgery.Options, wopt checkpoint.WriteOptions) *format.Report {
	t.Helper()
	d, err := decisions.Open(dec)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	opt.Decisions = d
	return prune(t, in, out, opt, wopt)
}

// randomModel writes a single-file model of dt with targets whose rows
// end inside a 128-byte block and whose masks end in half a byte, and
// shapes every format prunes.
func randomModel(t *testing.T, path string, dt checkpoint.DType, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 3))
	weight := func(rows, cols int) []byte {
		b := make([]byte, rows*cols*dt.Size())
		for i := range rows * cols {
			v := float32(rng.NormFloat64())
			if rng.IntN(16) == 0 {
				v = 0 // zeros, some of them kept by the magnitude rule
			}
			switch dt {
			case checkpoint.F32:
				binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
			case checkpoint.BF16:
				binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(v)>>16))
			default:
				binary.LittleEndian.PutUint16(b[2*i:], f16(v))
			}
		}
		return b
	}
	shape := func(r, c int) []int64 { return []int64{int64(r), int64(c)} }
	writeModel(t, path, []tensor{
		{"model.layers.0.self_attn.q_proj.weight", dt, shape(64, 128), weight(64, 128)},
		{"model.layers.0.mlp.up_proj.weight", dt, shape(96, 64), weight(96, 64)},
		{"model.layers.0.mlp.down_proj.weight", dt, shape(40, 72), weight(40, 72)}, // bitmask and dense only
		{"model.norm.weight", dt, shape(1, 64), weight(1, 64)},
	})
}

// f16 rounds v to binary16 by truncation (exactness does not matter).
func f16(v float32) uint16 {
	u := math.Float32bits(v)
	sign, exp := uint16(u>>16)&0x8000, int(u>>23&0xFF)-127+15
	if exp <= 0 {
		return sign
	}
	return sign | uint16(exp)<<10 | uint16(u>>13&0x3FF)
}

// outputFiles reads every file of an output (a directory, or a single
// file and its report) by name relative to it.
func outputFiles(t *testing.T, out string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	if strings.HasSuffix(out, ".safetensors") {
		files["model"] = fileBytes(t, out)
		files[format.ReportName] = fileBytes(t, format.ReportPath(out, true))
		return files
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		files[e.Name()] = fileBytes(t, filepath.Join(out, e.Name()))
	}
	return files
}

// sameExceptMethod compares two outputs of one input and format, one by
// the magnitude rule and one by decisions holding its own masks: every
// file byte for byte except the safetensors files' manifests, which may
// differ in their rule and method only, and the reports, which may differ
// in the fields that name the method, the output path, the mask digests
// and (where exact is false) the kept fractions, to Stats' accuracy.
func sameExceptMethod(t *testing.T, magnitude, decided string, exact bool) {
	t.Helper()
	a, b := outputFiles(t, magnitude), outputFiles(t, decided)
	if len(a) != len(b) {
		t.Fatalf("files %v and %v", sortedKeys(a), sortedKeys(b))
	}
	for name, x := range a {
		y, ok := b[name]
		switch {
		case !ok:
			t.Errorf("%s: missing from the decided output", name)
		case name == format.ReportName:
			sameReports(t, x, y, exact)
		case strings.HasSuffix(name, ".safetensors") || name == "model":
			sameShards(t, name, x, y)
		case !bytes.Equal(x, y):
			t.Errorf("%s differs", name)
		}
	}
}

// sameShards compares two safetensors files: the same tensors, byte for
// byte, at the same offsets, and the same metadata but for the manifest's
// rule and method.
func sameShards(t *testing.T, name string, a, b []byte) {
	t.Helper()
	ha, hb := header(t, a), header(t, b)
	if ha.DataOffset+int64(len(a)) != hb.DataOffset+int64(len(b)) && !bytes.Equal(a[ha.DataOffset:], b[hb.DataOffset:]) {
		t.Errorf("%s: the data sections differ", name)
	}
	if !bytes.Equal(a[ha.DataOffset:], b[hb.DataOffset:]) {
		t.Errorf("%s: the data sections differ", name)
	}
	if len(ha.Tensors) != len(hb.Tensors) {
		t.Fatalf("%s: %d and %d tensors", name, len(ha.Tensors), len(hb.Tensors))
	}
	for i := range ha.Tensors {
		x, y := ha.Tensors[i], hb.Tensors[i]
		if x.Name != y.Name || x.DType != y.DType || x.Begin != y.Begin || x.End != y.End || !slicesEqual(x.Shape, y.Shape) {
			t.Errorf("%s: tensor %+v and %+v", name, x, y)
		}
	}
	for k, v := range ha.Metadata {
		w := hb.Metadata[k]
		if k == format.MetadataKey {
			var m format.Manifest
			if err := json.Unmarshal([]byte(w), &m); err != nil {
				t.Fatal(err)
			}
			if m.Method == "" || m.Rule != m.Method.Rule() {
				t.Errorf("%s: the decided manifest's method %q, rule %q", name, m.Method, m.Rule)
			}
			m.Method, m.Rule = "", format.RuleDescription
			w = m.Encode()
		}
		if v != w {
			t.Errorf("%s: metadata %q: %q and %q", name, k, v, w)
		}
	}
	if len(ha.Metadata) != len(hb.Metadata) {
		t.Errorf("%s: metadata %v and %v", name, ha.Metadata, hb.Metadata)
	}
}

// sameReports compares two prune reports but for the fields that name
// the method, the output path, the mask digests and (unless exact) the
// kept fractions, which must agree to Stats' accuracy.
func sameReports(t *testing.T, a, b []byte, exact bool) {
	t.Helper()
	var x, y format.Report
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	if x.Method != format.Magnitude || x.Decisions != nil || y.Method == format.Magnitude || y.Decisions == nil {
		t.Errorf("methods %q %v and %q %v", x.Method, x.Decisions, y.Method, y.Decisions)
	}
	closeTo := func(p, q float64) bool { return exact && p == q || !exact && math.Abs(p-q) <= 1e-6*math.Max(p, q) }
	if !closeTo(x.KeptFraction, y.KeptFraction) {
		t.Errorf("kept fractions %v and %v", x.KeptFraction, y.KeptFraction)
	}
	for i := range y.Tensors {
		if i < len(x.Tensors) && !closeTo(x.Tensors[i].KeptFraction, y.Tensors[i].KeptFraction) {
			t.Errorf("%s: kept fractions %v and %v", y.Tensors[i].Name, x.Tensors[i].KeptFraction, y.Tensors[i].KeptFraction)
		}
		if y.Tensors[i].Skip == "" && (y.Tensors[i].MaskSHA256 == "" || y.Tensors[i].ZeroKeptGroups != 0) {
			t.Errorf("%s: mask digest %q, %d groups keep a zero", y.Tensors[i].Name, y.Tensors[i].MaskSHA256, y.Tensors[i].ZeroKeptGroups)
		}
		y.Tensors[i].KeptFraction, y.Tensors[i].MaskSHA256 = 0, ""
	}
	for i := range x.Tensors {
		x.Tensors[i].KeptFraction = 0
	}
	y.Method, y.Rule, y.Decisions, y.Output, y.KeptFraction, y.Worst = x.Method, x.Rule, nil, x.Output, x.KeptFraction, x.Worst
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	if !bytes.Equal(ja, jb) {
		t.Errorf("reports differ:\n%s\n%s", ja, jb)
	}
}

func header(t *testing.T, b []byte) *checkpoint.Header {
	t.Helper()
	h, err := checkpoint.ReadHeader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestMagnitudeDecisionsArePrune is the property that decisions cannot
// change what prune writes beyond their own choice: the magnitude rule's
// own masks, fed back as wanda's, ria's or (with the original's kept
// values as the update) sparsegpt's decisions, give every format's
// output byte for byte, for random weights of every dtype and for the
// repository's checkpoints (directory and single file).
func TestMagnitudeDecisionsArePrune(t *testing.T) {
	dir := t.TempDir()
	type input struct{ name, path string }
	inputs := []input{{"tiny-llama-bf16", testdataModel}, {"fp16-single-file", fixture(t, filepath.Join("tiny-llama-fp16", "model.safetensors"))}}
	for i, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16, checkpoint.F32} {
		p := filepath.Join(dir, "random-"+string(dt)+".safetensors")
		randomModel(t, p, dt, uint64(i))
		inputs = append(inputs, input{"random-" + string(dt), p})
	}
	for _, in := range inputs {
		for _, f := range formats {
			if strings.HasSuffix(in.name, "F32") && f == format.Ampere {
				continue // F32 is 1:2 in the ampere format, which decisions refuse (TestDecisionsRefused)
			}
			ext := ""
			if strings.HasSuffix(in.path, ".safetensors") {
				ext = ".safetensors"
			}
			base := filepath.Join(dir, in.name+"-"+string(f))
			magnitude := base + "-magnitude" + ext
			prune(t, in.path, magnitude, surgery.Options{Format: f}, checkpoint.WriteOptions{})
			for _, m := range []format.Method{format.Wanda, format.RIA, format.SparseGPT} {
				t.Run(in.name+"/"+string(f)+"/"+string(m), func(t *testing.T) {
					dec := base + "-" + string(m) + ".decisions.safetensors"
					buildDecisions(t, dec, in.path, f, m, decisionstest.Magnitude)
					out := base + "-" + string(m) + ext
					pruneDecided(t, in.path, out, dec, surgery.Options{Format: f}, checkpoint.WriteOptions{})
					// The dense format's sums are Prune's, chunk by chunk;
					// the compressed formats' fused kernels and sparsegpt's
					// smaller chunks group them differently.
					sameExceptMethod(t, magnitude, out, f == format.Dense && m != format.SparseGPT)
					verifyOK(t, out, in.path)
				})
			}
		}
	}
}

// expectDecided returns the dense weight the decisions select of the
// original w: the update's values (or the original's) where the mask
// keeps, +0 elsewhere and for a kept -0, decoded element by element.
func expectDecided(w, mask, update []byte, dt checkpoint.DType, rows, cols int) []byte {
	src := w
	if update != nil {
		src = update
	}
	out := make([]byte, len(w))
	size, mb := dt.Size(), (cols+7)/8
	for i := range rows * cols {
		r, c := i/cols, i%cols
		if mask[r*mb+c/8]>>(c%8)&1 == 0 {
			continue
		}
		elem := src[size*i : size*(i+1)]
		zero := true
		for k, b := range elem {
			if k == size-1 {
				b &= 0x7F
			}
			zero = zero && b == 0
		}
		if !zero {
			copy(out[size*i:], elem)
		}
	}
	return out
}

// decodedWeight returns the dense weight name of the output ck: the
// dense tensor, or its compressed form decoded.
func decodedWeight(t *testing.T, ck *checkpoint.Checkpoint, name string) []byte {
	t.Helper()
	if f, info, ok := ck.Lookup(name); ok {
		return f.Data(info)
	}
	comps, err := format.FindCompressed(ck)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range comps {
		if c.Name == name {
			dense := make([]byte, c.Rows*c.Cols*c.DType.Size())
			if _, err := c.DecodeRows(dense, 0, c.Rows, nil); err != nil {
				t.Fatal(err)
			}
			return dense
		}
	}
	t.Fatalf("no %s in the output", name)
	return nil
}

// TestRandomDecisions writes random 2:4 decisions (and for sparsegpt
// updates other than the original's values) in every format: each
// output weight decodes to the decided values at the kept places and +0
// elsewhere, and the report holds the SHA-256 of each mask as in the
// decisions file.
func TestRandomDecisions(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "m.safetensors")
	randomModel(t, in, checkpoint.BF16, 9)
	halve := func(_ int, v uint32) uint32 { // v/2 for a normal BF16: one less in the exponent
		if v&0x7F80 > 0x0080 {
			return v - 0x0080
		}
		return v
	}
	for _, f := range formats {
		for _, m := range []format.Method{format.Wanda, format.SparseGPT} {
			t.Run(string(f)+"/"+string(m), func(t *testing.T) {
				dec := filepath.Join(dir, string(f)+"-"+string(m)+".decisions.safetensors")
				decide := decisionstest.Random(uint64(len(f)))
				if m == format.SparseGPT {
					decide = decisionstest.WithUpdate(decide, halve)
				}
				buildDecisions(t, dec, in, f, m, decide)
				out := filepath.Join(dir, string(f)+"-"+string(m)+".safetensors")
				rep := pruneDecided(t, in, out, dec, surgery.Options{Format: f}, checkpoint.WriteOptions{})
				orig, err := checkpoint.Open(in)
				if err != nil {
					t.Fatal(err)
				}
				defer orig.Close()
				ck, err := checkpoint.Open(out)
				if err != nil {
					t.Fatal(err)
				}
				defer ck.Close()
				d, err := decisions.Open(dec)
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				dck, err := checkpoint.Open(dec)
				if err != nil {
					t.Fatal(err)
				}
				defer dck.Close()
				pruned := 0
				for _, tr := range rep.Tensors {
					if tr.Skip != "" {
						continue
					}
					pruned++
					of, oi, _ := orig.Lookup(tr.Name)
					mf, mi, _ := dck.Lookup(tr.Name + ".mask")
					var update []byte
					if m == format.SparseGPT {
						uf, ui, _ := dck.Lookup(tr.Name + ".update")
						update = uf.Data(ui)
					}
					rows, cols := int(oi.Shape[0]), int(oi.Shape[1])
					want := expectDecided(of.Data(oi), mf.Data(mi), update, oi.DType, rows, cols)
					if got := decodedWeight(t, ck, tr.Name); !bytes.Equal(got, want) {
						t.Errorf("%s: the output differs from the decided weight", tr.Name)
					}
					sum := sha256.Sum256(mf.Data(mi))
					if tr.MaskSHA256 != hex.EncodeToString(sum[:]) {
						t.Errorf("%s: mask digest %s, the decisions' mask hashes to %x", tr.Name, tr.MaskSHA256, sum)
					}
				}
				if pruned == 0 {
					t.Fatal("nothing pruned")
				}
				sum := sha256.Sum256(fileBytes(t, dec))
				if rep.Method != m || rep.Decisions == nil || rep.Decisions.SHA256 != hex.EncodeToString(sum[:]) ||
					rep.Decisions.File != dec || rep.Decisions.Samples != 4 || rep.Decisions.Seqlen != 16 || rep.Decisions.Text.SHA256 == "" {
					t.Errorf("report: method %q, decisions %+v", rep.Method, rep.Decisions)
				}
				onDisk, err := format.ReadReport(ck)
				if err != nil || onDisk.Decisions == nil || onDisk.Decisions.SHA256 != rep.Decisions.SHA256 || onDisk.Method != m {
					t.Errorf("the report on disk: %+v, %v", onDisk, err)
				}
				man, err := format.ReadManifest(ck)
				if err != nil || man.Method != m || man.Rule != m.Rule() {
					t.Errorf("manifest %+v, %v", man, err)
				}
			})
		}
	}
}

// TestZeroKeptAbovePruned: decisions that keep a zero above a pruned
// place are written as their values say, and the report counts those
// groups and records the mask the output shows beside the decisions'.
func TestZeroKeptAbovePruned(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "m.safetensors")
	const name = "model.layers.0.mlp.up_proj.weight"
	w := randomBF16(32*64, 5)
	for c := range 4 { // row 0, group 0: [0 0 0 x]
		if c < 3 {
			binary.LittleEndian.PutUint16(w[2*c:], 0)
		}
	}
	writeModel(t, in, []tensor{{name, checkpoint.BF16, []int64{32, 64}, w}})
	ck, err := checkpoint.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	dec := filepath.Join(dir, "d.safetensors")
	decisionstest.Build(t, dec, ck, []string{name}, format.Wanda,
		func(n string, w []byte, dt checkpoint.DType, rows, cols int) ([]byte, []byte, error) {
			mask, _, err := decisionstest.Magnitude(n, w, dt, rows, cols)
			mask[0] = mask[0]&0xF0 | 0x0C // keep the zeros... at 2 and 3
			return mask, nil, err
		})
	for _, f := range formats {
		out := filepath.Join(dir, string(f)+".safetensors")
		rep := pruneDecided(t, in, out, dec, surgery.Options{Format: f}, checkpoint.WriteOptions{})
		tr := rep.Tensors[0]
		if tr.ZeroKeptGroups != 1 || tr.WrittenMaskSHA256 == "" || tr.WrittenMaskSHA256 == tr.MaskSHA256 {
			t.Errorf("%s: %d zero-kept groups, written mask %q, decisions' %q", f, tr.ZeroKeptGroups, tr.WrittenMaskSHA256, tr.MaskSHA256)
		}
		out2, err := checkpoint.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		got := decodedWeight(t, out2, name)
		shown := make([]byte, prune24.MaskBytes(32, 64))
		if err := prune24.MaskOf(shown, got, checkpoint.BF16, 64); err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(shown); tr.WrittenMaskSHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: the written mask's digest is not the output's mask's", f)
		}
		out2.Close()
	}
}

// TestDecisionsOutputs holds the output paths of decisions: sharded
// output, several workers (identical bytes), unpack (the dense output,
// byte for byte), and a decisions file the output may not replace.
func TestDecisionsOutputs(t *testing.T) {
	dir := t.TempDir()
	dec := filepath.Join(dir, "tiny.decisions.safetensors")
	buildDecisions(t, dec, testdataModel, format.Ampere, format.RIA, decisionstest.Random(3))
	var first map[string]string
	for _, w := range []int{1, 3} {
		out := filepath.Join(dir, "ampere-"+string(rune('0'+w)))
		pruneDecided(t, testdataModel, out, dec, surgery.Options{Format: format.Ampere}, checkpoint.WriteOptions{Workers: w})
		h := treeHashes(t, out)
		delete(h, format.ReportName) // it names its output path
		if first == nil {
			first = h
			continue
		}
		for name, sum := range first {
			if h[name] != sum {
				t.Errorf("%s differs between --workers 1 and %d", name, w)
			}
		}
	}
	dense := filepath.Join(dir, "dense")
	pruneDecided(t, testdataModel, dense, dec, surgery.Options{Format: format.Dense}, checkpoint.WriteOptions{})
	ck, err := checkpoint.Open(filepath.Join(dir, "ampere-1"))
	if err != nil {
		t.Fatal(err)
	}
	up, err := surgery.NewUnpackPlan(ck, "test")
	if err != nil {
		t.Fatal(err)
	}
	unpacked := filepath.Join(dir, "unpacked")
	if _, err := up.Write(context.Background(), unpacked, checkpoint.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	ck.Close()
	want, got := treeHashes(t, dense), treeHashes(t, unpacked)
	delete(want, format.ReportName)
	for name, h := range want {
		if got[name] != h {
			t.Errorf("unpack of the ampere output: %s differs from the dense output", name)
		}
	}
	// Resharded: every shard's manifest names the method.
	d, err := decisions.Open(dec)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	in, err := checkpoint.Open(testdataModel)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	p, err := surgery.NewPlan(in, surgery.Options{Format: format.Bitmask, Version: "test", Decisions: d})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Reshard(1 << 20); err != nil {
		t.Fatal(err)
	}
	sharded := filepath.Join(dir, "sharded")
	if _, err := p.Write(context.Background(), sharded, checkpoint.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	sck, err := checkpoint.Open(sharded)
	if err != nil {
		t.Fatal(err)
	}
	defer sck.Close()
	if len(sck.Shards) < 3 {
		t.Errorf("%d shards", len(sck.Shards))
	}
	for _, s := range sck.Shards {
		var m format.Manifest
		if err := json.Unmarshal([]byte(s.Metadata[format.MetadataKey]), &m); err != nil || m.Method != format.RIA {
			t.Errorf("%s: manifest %+v, %v", s.Path(), m, err)
		}
	}
	verifyOK(t, sharded, testdataModel)
	// The decisions file is an input: never replaced, even with Force.
	single := filepath.Join(dir, "single.safetensors")
	writeModel(t, single, []tensor{{"model.layers.0.mlp.up_proj.weight", checkpoint.BF16, []int64{32, 64}, randomBF16(32*64, 4)}})
	sdec := filepath.Join(dir, "single.decisions.safetensors")
	buildDecisions(t, sdec, single, format.Dense, format.Wanda, decisionstest.Random(1))
	before := fileBytes(t, sdec)
	sd, err := decisions.Open(sdec)
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	err = planAndWrite(t, context.Background(), single, sdec, surgery.Options{Format: format.Dense, Decisions: sd}, checkpoint.WriteOptions{Force: true})
	if !errors.Is(err, checkpoint.ErrOverwriteInput) {
		t.Errorf("output = the decisions file: %v, want ErrOverwriteInput", err)
	}
	if !bytes.Equal(fileBytes(t, sdec), before) {
		t.Error("the decisions file changed")
	}
}

// TestDecisionsRefusedMidWrite: data the decisions file holds wrong is
// found as it is read, after other targets were written; the write
// fails with the decisions' one-line error and leaves nothing behind.
func TestDecisionsRefusedMidWrite(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "m.safetensors")
	var ts []tensor
	for i := range 4 {
		ts = append(ts, tensor{"model.layers." + string(rune('0'+i)) + ".mlp.up_proj.weight", checkpoint.BF16,
			[]int64{64, 128}, randomBF16(64*128, uint64(i))})
	}
	writeModel(t, in, ts)
	ck, err := checkpoint.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var names []string
	for _, x := range ts {
		names = append(names, x.name)
	}
	const bad = "model.layers.3.mlp.up_proj.weight"
	dec := filepath.Join(dir, "d.safetensors")
	decisionstest.Build(t, dec, ck, names, format.Wanda, func(n string, w []byte, dt checkpoint.DType, rows, cols int) ([]byte, []byte, error) {
		mask, _, err := decisionstest.Magnitude(n, w, dt, rows, cols)
		if n == bad {
			mask[len(mask)-1] |= 0xF0 // last row, last group: 4 kept
		}
		return mask, nil, err
	})
	for _, f := range formats {
		d, err := decisions.Open(dec)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "out-"+string(f)+".safetensors")
		err = planAndWrite(t, context.Background(), in, out, surgery.Options{Format: f, Decisions: d}, checkpoint.WriteOptions{Workers: 1})
		d.Close()
		var de *decisions.Error
		if !errors.As(err, &de) || !errors.Is(err, decisions.ErrInvalid) {
			t.Fatalf("%s: %v, want a decisions.Error", f, err)
		}
		if want := dec + `: tensor "` + bad + `.mask": row 63, columns 124-127: 4 kept, want 2 of every 4`; de.Error() != want {
			t.Errorf("%s: %q, want %q", f, de.Error(), want)
		}
		if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the output exists", f)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
			t.Errorf("%s: temporary files left: %v", f, left)
		}
	}
}

// TestDecisionsCancelled: a cancelled prune by decisions stops, leaves
// nothing, and does not wait for the decisions file's digest.
func TestDecisionsCancelled(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "m.safetensors")
	var ts []tensor
	var names []string
	for i := range 8 {
		name := "model.layers." + string(rune('0'+i)) + ".mlp.up_proj.weight"
		ts = append(ts, tensor{name, checkpoint.BF16, []int64{256, 1024}, randomBF16(256*1024, uint64(i))})
		names = append(names, name)
	}
	writeModel(t, in, ts)
	ck, err := checkpoint.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	dec := filepath.Join(dir, "d.safetensors")
	decisionstest.Build(t, dec, ck, names, format.SparseGPT, decisionstest.Random(2))
	d, err := decisions.Open(dec)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var once bool
	wopt := checkpoint.WriteOptions{Workers: 1, Progress: func(int64) {
		if !once {
			once = true
			cancel()
		}
	}}
	out := filepath.Join(dir, "out.safetensors")
	err = planAndWrite(t, ctx, in, out, surgery.Options{Format: format.Bitmask, Decisions: d}, wopt)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, serr := os.Stat(out); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("output exists after cancel: %v", serr)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
