package checkpoint

// DType is a safetensors element type, spelled as in the file header
// ("BF16", "F8_E4M3", ...).
type DType string

// The element types of the safetensors specification.
const (
	BOOL   DType = "BOOL"
	U8     DType = "U8"
	I8     DType = "I8"
	F8E4M3 DType = "F8_E4M3"
	F8E5M2 DType = "F8_E5M2"
	F8E8M0 DType = "F8_E8M0"
	I16    DType = "I16"
	U16    DType = "U16"
	F16    DType = "F16"
	BF16   DType = "BF16"
	I32    DType = "I32"
	U32    DType = "U32"
	F32    DType = "F32"
	F64    DType = "F64"
	I64    DType = "I64"
	U64    DType = "U64"
	C64    DType = "C64"
	F4     DType = "F4"
	F6E2M3 DType = "F6_E2M3"
	F6E3M2 DType = "F6_E3M2"
)

// Bits returns the size of one element in bits, or 0 for a type the
// specification does not define.
func (d DType) Bits() int {
	switch d {
	case F4:
		return 4
	case F6E2M3, F6E3M2:
		return 6
	case BOOL, U8, I8, F8E4M3, F8E5M2, F8E8M0:
		return 8
	case I16, U16, F16, BF16:
		return 16
	case I32, U32, F32:
		return 32
	case F64, I64, U64, C64:
		return 64
	}
	return 0
}

// Valid reports whether d is a type of the specification.
func (d DType) Valid() bool { return d.Bits() != 0 }

// Size returns the size of one element in bytes, or 0 for a type the
// specification does not define or one narrower than a byte (F4,
// F6_E2M3, F6_E3M2).
func (d DType) Size() int {
	if b := d.Bits(); b%8 == 0 {
		return b / 8
	}
	return 0
}
