package verify_test

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
)

const (
	infQ = "model.layers.0.self_attn.q_proj.weight"
	infK = "model.layers.0.self_attn.k_proj.weight"
	infV = "model.layers.0.self_attn.v_proj.weight"
)

// infPositions are the non-finite weights of infModel, as the notes
// name them.
var infPositions = map[string][]string{
	infQ: {"+Inf at row 3, column 5", "+Inf at row 9, column 0", "-Inf at row 9, column 33", "-Inf at row 40, column 17"},
	infK: {"+Inf at row 7, column 2"},
	infV: {"-Inf at row 31, column 63"},
}

// infModel writes a single-file checkpoint whose targets hold ±Inf (row 9
// of q holds both, so its products are NaN) and returns its path.
func infModel(t *testing.T) string {
	t.Helper()
	q := randomWeight(64*64, checkpoint.BF16, 1)
	setElem(q, 3*64+5, checkpoint.BF16, math.Inf(1))
	setElem(q, 9*64+0, checkpoint.BF16, math.Inf(1))
	setElem(q, 9*64+33, checkpoint.BF16, math.Inf(-1))
	setElem(q, 40*64+17, checkpoint.BF16, math.Inf(-1))
	k := randomWeight(32*32, checkpoint.F32, 2)
	setElem(k, 7*32+2, checkpoint.F32, math.Inf(1))
	v := randomWeight(32*64, checkpoint.F16, 3)
	setElem(v, 31*64+63, checkpoint.F16, math.Inf(-1))
	path := filepath.Join(t.TempDir(), "inf.safetensors")
	writeModel(t, path, []tensor{
		{infQ, checkpoint.BF16, 64, 64, q},
		{infK, checkpoint.F32, 32, 32, k},
		{infV, checkpoint.F16, 32, 64, v},
		{"model.norm.weight", checkpoint.BF16, 64, 0, randomWeight(64, checkpoint.BF16, 4)},
	})
	return path
}

// TestInfWeightsPass prunes weights holding ±Inf in every format: verify
// passes, with and without the original, and names every Inf.
func TestInfWeightsPass(t *testing.T) {
	in := infModel(t)
	for _, f := range []format.Format{format.Ampere, format.Bitmask, format.Dense} {
		out := filepath.Join(t.TempDir(), string(f)+".safetensors")
		pruneFile(t, in, out, f)
		for _, orig := range []string{"", in} {
			rep := verifyPath(t, out, orig)
			if !rep.OK {
				for _, r := range rep.Results {
					if !r.OK {
						t.Errorf("%s (original %q): %s: %+v", f, orig, r.Tensor, r.Checks)
					}
				}
			}
			for name, want := range infPositions {
				r := result(t, rep, name)
				notes := strings.Join(r.Notes, "\n")
				for _, pos := range want {
					if !strings.Contains(notes, pos) {
						t.Errorf("%s: %s: notes %q do not name %q", f, name, r.Notes, pos)
					}
				}
				if f == format.Dense {
					continue
				}
				if r.RelErr != 0 || math.IsNaN(r.MaxAbs) {
					t.Errorf("%s: %s: rel err %g, max abs %g over the finite elements, want 0", f, name, r.RelErr, r.MaxAbs)
				}
				for _, c := range r.Checks {
					if c.Name == "numeric" && !strings.Contains(c.Detail, "non-finite in both") {
						t.Errorf("%s: %s: numeric detail %q does not count the non-finite elements", f, name, c.Detail)
					}
				}
			}
		}
	}
}

// TestInfMoved tampers with the compressed form so that an Inf moves to
// another column of its group: the digests and, with the original, the
// rule fail, and the note names where the stored form now puts it.
func TestInfMoved(t *testing.T) {
	in := infModel(t)
	const meta = "model.layers.0.self_attn.q_proj.meta"
	const bitmask = "model.layers.0.self_attn.q_proj.bitmask"
	tests := []struct {
		format  format.Format
		tensor  string
		off     int64
		fn      func(byte) byte
		tamper  string // the tensor whose digest fails
		movedTo []string
	}{
		// Row 3's group 1 (columns 4-7, the +Inf at column 5) has its
		// nibble in int16 word 2·(4·3) = 24 of the meta layout
		// (docs/formats.md §1.5), bits 4-7: the high nibble of byte 48. The
		// +Inf is the first kept value when the nibble's low index is 1,
		// else the second; moving that index moves the Inf.
		{format.Ampere, meta, 48, moveInfNibble, meta, []string{"+Inf at row 3, column 4", "+Inf at row 3, column 6"}},
		// Row 3's mask is bytes 24-31 (8 a row); bits 4-7 of byte 24 are
		// columns 4-7. Clearing bit 5 and setting the lowest clear one
		// of the group moves the +Inf to column 4 or 6.
		{format.Bitmask, bitmask, 24, moveInfBit, bitmask, []string{"+Inf at row 3, column 4", "+Inf at row 3, column 6"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.format), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), string(tt.format)+".safetensors")
			pruneFile(t, in, out, tt.format)
			patch(t, out, tt.tensor, tt.off, tt.fn)

			rep := verifyPath(t, out, "")
			if rep.OK {
				t.Fatal("verify without the original passed an Inf moved")
			}
			failed := failedTensors(rep)
			if checks := failed[tt.tamper]; len(checks) != 1 || checks[0] != "digest" {
				t.Errorf("failed %v, want the digest of %s", failed, tt.tamper)
			}
			notes := strings.Join(result(t, rep, infQ).Notes, "\n")
			if !strings.Contains(notes, tt.movedTo[0]) && !strings.Contains(notes, tt.movedTo[1]) {
				t.Errorf("notes %q name neither %v", notes, tt.movedTo)
			}
			if strings.Contains(notes, "+Inf at row 3, column 5") {
				t.Errorf("notes %q still place the Inf at column 5", notes)
			}

			rep = verifyPath(t, out, in)
			if checks := failedTensors(rep)[infQ]; !strings.Contains(strings.Join(checks, ","), "rule") {
				t.Errorf("with the original: %s failed %v, want the rule", infQ, checks)
			}
		})
	}
}

// moveInfNibble rewrites the high nibble of b, the group (i0, i1) holding
// the +Inf at index 1, so that the +Inf moves: as the first value (i0 =
// 1) to index 0, as the second (i1 = 1, so i0 = 0) to index 2.
func moveInfNibble(b byte) byte {
	nib := b >> 4
	i0, i1 := nib&3, nib>>2
	if i0 == 1 {
		i0 = 0
	} else {
		i1 = 2
	}
	return b&0x0F | (i0|i1<<2)<<4
}

// moveInfBit clears bit 5 of b and sets the lowest clear bit among 4-7.
func moveInfBit(b byte) byte {
	b &^= 1 << 5
	for bit := 4; bit < 8; bit++ {
		if bit != 5 && b&(1<<bit) == 0 {
			return b | 1<<bit
		}
	}
	return b
}
