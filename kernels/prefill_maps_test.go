package kernels

import (
	"testing"

	"github.com/sfsurgery/sfsurgery/cuda"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// TestPrefillMapsFillRing holds prefillMaps to the planner's ring: per
// tile, the boxes one stage copies (StageK/64 activation boxes, one packed
// and one meta box) add up to a ring slot of SharedBytes (1024 bytes of
// slack, the slots, two mbarriers a slot), so a slot's expected bytes and
// the copies agree; and each packed box row fills its swizzle, as the
// kernel's A descriptor reads it.
func TestPrefillMapsFillRing(t *testing.T) {
	ops := SparseOperands{X: &Buffer{}, Packed: &Buffer{}, Meta: &Buffer{}, M: 300, N: 1024, K: 4096}
	for _, tile := range launchplan.PrefillTiles() {
		m := prefillMaps(ops, tile)
		box := func(v cuda.TensorMap2D) int { return v.BoxCols * v.BoxRows * v.ElemBytes }
		c := tile.StageK()
		stage := box(m[0])*c/64 + box(m[1]) + box(m[2])
		if got, want := 1024+tile.Stages()*(stage+16), tile.SharedBytes(); got != want {
			t.Errorf("%s: boxes of %d bytes a stage make %d bytes of shared memory, the planner gives %d", tile, stage, got, want)
		}
		width := map[cuda.Swizzle]int{cuda.Swizzle64B: 64, cuda.Swizzle128B: 128}[m[1].Swizzle]
		if m[1].BoxCols*m[1].ElemBytes != c || width != c {
			t.Errorf("%s: packed box rows of %d bytes in a %d-byte swizzle, want %d of both", tile, m[1].BoxCols*m[1].ElemBytes, width, c)
		}
		if m[2].BoxRows != c/32 || m[0].BoxRows != tile.Tokens || m[1].BoxRows != tile.Rows {
			t.Errorf("%s: boxes %+v", tile, m)
		}
	}
}
