package prune24

import (
	"bytes"
	"encoding/binary"
	"math/bits"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// Check returns nil if data, whole rows of cols elements of type dt,
// satisfies rule: at most 2 nonzeros in every group of 4 (Rule24) or at
// most 1 in every pair (Rule12). -0.0 counts as zero and NaN as nonzero,
// as with an IEEE compare. Otherwise it returns a [*StructureError] for
// the first violating group in row-major order, at the group's first
// column.
func Check(data []byte, dt checkpoint.DType, cols int, rule Rule) error {
	e, err := elemOf(dt)
	if err != nil {
		return err
	}
	return check(data, e, cols, rule)
}

// check is Check for an elem.
func check(data []byte, dt elem, cols int, rule Rule) error {
	if err := checkRule(rule); err != nil {
		return err
	}
	if _, err := wholeRows(len(data), dt, cols); err != nil {
		return err
	}
	var off int
	switch {
	case dt != elemF32 && rule == Rule24:
		off = check16x24(data)
	case dt != elemF32:
		off = check16x12(data)
	case rule == Rule24:
		off = check32x24(data)
	default:
		off = check32x12(data)
	}
	if off < 0 {
		return nil
	}
	// Count the violating group's nonzeros for the report.
	size, group := dt.size(), 4
	if rule == Rule12 {
		group = 2
	}
	e, n := off/size, 0
	for i := e; i < e+group; i++ {
		if elemBits(data, i, dt)&magMask(dt) != 0 {
			n++
		}
	}
	return &StructureError{Row: e / cols, Col: e % cols, Rule: rule, Nonzero: n}
}

// check16x24 returns the byte offset of the first group of 4 16-bit
// elements of data with more than 2 nonzeros, or -1.
func check16x24(data []byte) int {
	for off := 0; off+8 <= len(data); off += 8 {
		if bits.OnesCount64(nonzero16(binary.LittleEndian.Uint64(data[off:]))) > 2 {
			return off
		}
	}
	return -1
}

// check16x12 returns the byte offset of the first pair of 16-bit elements
// of data with 2 nonzeros, or -1.
func check16x12(data []byte) int {
	for off := 0; off+8 <= len(data); off += 8 {
		nz := nonzero16(binary.LittleEndian.Uint64(data[off:]))
		if both := nz & (nz << 16); both&(1<<31) != 0 {
			return off
		} else if both&(1<<63) != 0 {
			return off + 4
		}
	}
	return -1
}

// check32x24 returns the byte offset of the first group of 4 F32 elements
// of data with more than 2 nonzeros, or -1.
func check32x24(data []byte) int {
	for off := 0; off+16 <= len(data); off += 16 {
		nz0 := nonzero32(binary.LittleEndian.Uint64(data[off:]))
		nz1 := nonzero32(binary.LittleEndian.Uint64(data[off+8:]))
		if bits.OnesCount64(nz0)+bits.OnesCount64(nz1) > 2 {
			return off
		}
	}
	return -1
}

// check32x12 returns the byte offset of the first pair of F32 elements of
// data with 2 nonzeros, or -1.
func check32x12(data []byte) int {
	for off := 0; off+8 <= len(data); off += 8 {
		if nonzero32(binary.LittleEndian.Uint64(data[off:])) == sign32 {
			return off
		}
	}
	return -1
}

// elemBits returns the bits of element i of data.
func elemBits(data []byte, i int, dt elem) uint32 {
	if dt == elemF32 {
		return binary.LittleEndian.Uint32(data[4*i:])
	}
	return uint32(binary.LittleEndian.Uint16(data[2*i:]))
}

// magMask returns the magnitude bits of one element of dt.
func magMask(dt elem) uint32 {
	if dt == elemF32 {
		return 0x7FFF_FFFF
	}
	return 0x7FFF
}

// checkRuleChunk is how many bytes CheckRule prunes at a time.
const checkRuleChunk = 64 << 10

// CheckRule returns nil if pruned is bit for bit what [Prune] makes of
// original with the same dt, cols and rule. Otherwise it returns a
// [*RuleError] for the first differing element, or Prune's [*NaNError]
// for a NaN in original.
func CheckRule(pruned, original []byte, dt checkpoint.DType, cols int, rule Rule) error {
	e, err := elemOf(dt)
	if err != nil {
		return err
	}
	return checkAgainst(pruned, original, e, cols, rule)
}

// checkAgainst is CheckRule for an elem.
func checkAgainst(pruned, original []byte, dt elem, cols int, rule Rule) error {
	if err := checkRule(rule); err != nil {
		return err
	}
	if _, err := wholeRows(len(original), dt, cols); err != nil {
		return err
	}
	if err := checkLen("pruned", len(pruned), len(original)); err != nil {
		return err
	}
	if cols == 0 {
		return nil
	}
	rowBytes := cols * dt.size()
	chunk := max(checkRuleChunk/rowBytes, 1) * rowBytes
	buf := make([]byte, min(chunk, len(original)))
	for off := 0; off < len(original); off += len(buf) {
		n := min(len(buf), len(original)-off)
		want := buf[:n]
		if _, err := prune(want, original[off:off+n], dt, cols, off/rowBytes, rule); err != nil {
			return err
		}
		got := pruned[off : off+n]
		if bytes.Equal(got, want) {
			continue
		}
		for i := 0; i < n/dt.size(); i++ {
			if g, w := elemBits(got, i, dt), elemBits(want, i, dt); g != w {
				e := off/dt.size() + i
				return &RuleError{Row: e / cols, Col: e % cols, Got: g, Want: w}
			}
		}
	}
	return nil
}
