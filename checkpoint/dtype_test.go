package checkpoint

import "testing"

func TestDTypeSize(t *testing.T) {
	for d, want := range map[DType]int{
		BOOL: 1, U8: 1, F8E4M3: 1, F16: 2, BF16: 2, I16: 2, F32: 4, I32: 4,
		F64: 8, I64: 8, C64: 8, F4: 0, F6E2M3: 0, F6E3M2: 0, "": 0, "F12": 0,
	} {
		if got := d.Size(); got != want {
			t.Errorf("DType(%q).Size() = %d, want %d", d, got, want)
		}
	}
}
