package prune24_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/prune24"
)

// bf16 returns the BF16 bytes of small exact values.
func bf16(vals ...float32) []byte {
	b := make([]byte, 2*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(v)>>16))
	}
	return b
}

func ExamplePrune() {
	src := bf16(1, -3, 2, 0.5, 4, 4, -4, 0)
	dst := make([]byte, len(src))
	st, err := prune24.Prune(dst, src, checkpoint.BF16, 8, 0, prune24.Rule24)
	if err != nil {
		panic(err)
	}
	vals := make([]float64, len(dst)/2)
	if err := prune24.DecodeFloat64(vals, dst, checkpoint.BF16); err != nil {
		panic(err)
	}
	for _, v := range vals {
		fmt.Print(v, ",")
	}
	fmt.Printf(" kept %.3f of the magnitude\n", st.Fraction())
	// Output: 0,-3,2,0,4,4,0,0, kept 0.703 of the magnitude
}

func ExamplePackBitmask() {
	pruned := bf16(0, 5, 0, -6, 0, 0, 7, 0)
	cb, bb := prune24.BitmaskSizes(checkpoint.BF16, 1, 8)
	compressed, bitmask := make([]byte, cb), make([]byte, bb)
	if err := prune24.PackBitmask(compressed, bitmask, pruned, checkpoint.BF16, 1, 8); err != nil {
		panic(err)
	}
	fmt.Printf("bitmask %08b, %d bytes of kept values\n", bitmask[0], len(compressed))
	// Output: bitmask 01011010, 8 bytes of kept values
}

func ExampleCheck() {
	err := prune24.Check(bf16(1, 2, 3, 0), checkpoint.BF16, 4, prune24.Rule24)
	fmt.Println(err, errors.Is(err, prune24.ErrNot24))
	// Output: row 0, column 0: 3 nonzeros in a 2:4 group true
}
