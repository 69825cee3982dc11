package prune24

import (
	"math/rand/v2"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// benchRows and benchCols are the shape of the benchmark matrices, a
// typical LLM projection.
const benchRows, benchCols = 4096, 4096

// weights returns a rows×cols matrix of dt with normally distributed
// values of standard deviation 0.02, as in a trained LLM layer.
func weights(dt checkpoint.DType, rows, cols int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, rows*cols*dt.Size())
	for i := 0; i < rows*cols; i++ {
		putBits(b, i, dt, fromFloat32(float32(rng.NormFloat64()*0.02), dt))
	}
	return b
}

func benchPrune(b *testing.B, dt checkpoint.DType, rule Rule) {
	src := weights(dt, benchRows, benchCols, 1)
	dst := make([]byte, len(src))
	b.SetBytes(int64(len(src)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := Prune(dst, src, dt, benchCols, 0, rule); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPrune(b *testing.B) {
	for _, c := range []struct {
		dt   checkpoint.DType
		rule Rule
	}{{checkpoint.BF16, Rule24}, {checkpoint.F16, Rule24}, {checkpoint.F32, Rule24}, {checkpoint.F32, Rule12}} {
		b.Run(string(c.dt)+"/"+c.rule.String(), func(b *testing.B) { benchPrune(b, c.dt, c.rule) })
	}
}

// benchPruned returns a pruned benchmark matrix of dt for the Ampere
// layout's rule.
func benchPruned(b *testing.B, dt checkpoint.DType) []byte {
	return mustPrune(b, weights(dt, benchRows, benchCols, 2), dt, benchCols, ampereRule(dt))
}

func BenchmarkCheck(b *testing.B) {
	for _, dt := range allDTypes {
		b.Run(string(dt), func(b *testing.B) {
			d := benchPruned(b, dt)
			b.SetBytes(int64(len(d)))
			b.ResetTimer()
			for b.Loop() {
				if err := Check(d, dt, benchCols, ampereRule(dt)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPackAmpere(b *testing.B) {
	for _, dt := range allDTypes {
		b.Run(string(dt), func(b *testing.B) {
			d := benchPruned(b, dt)
			pb, mb := AmpereSizes(dt, benchRows, benchCols)
			packed, meta := make([]byte, pb), make([]byte, mb)
			b.SetBytes(int64(len(d)))
			b.ResetTimer()
			for b.Loop() {
				if err := PackAmpere(packed, meta, d, dt, benchRows, benchCols); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPruneAmpere prunes and packs in one pass; its bytes are those
// of the dense input, as for Prune.
func BenchmarkPruneAmpere(b *testing.B) {
	for _, dt := range allDTypes {
		b.Run(string(dt), func(b *testing.B) {
			src := weights(dt, benchRows, benchCols, 2)
			pb, mb := AmpereSizes(dt, benchRows, benchCols)
			packed, meta := make([]byte, pb), make([]byte, mb)
			b.SetBytes(int64(len(src)))
			b.ResetTimer()
			for b.Loop() {
				if _, err := PruneAmpere(packed, meta, src, dt, benchRows, benchCols, 0, ampereRule(dt)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPruneThenPackAmpere is the two passes that PruneAmpere
// replaces, on the same input, for comparison.
func BenchmarkPruneThenPackAmpere(b *testing.B) {
	for _, dt := range allDTypes {
		b.Run(string(dt), func(b *testing.B) {
			src := weights(dt, benchRows, benchCols, 2)
			pruned := make([]byte, len(src))
			pb, mb := AmpereSizes(dt, benchRows, benchCols)
			packed, meta := make([]byte, pb), make([]byte, mb)
			b.SetBytes(int64(len(src)))
			b.ResetTimer()
			for b.Loop() {
				if _, err := Prune(pruned, src, dt, benchCols, 0, ampereRule(dt)); err != nil {
					b.Fatal(err)
				}
				if err := PackAmpere(packed, meta, pruned, dt, benchRows, benchCols); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkUnpackAmpere(b *testing.B) {
	for _, dt := range allDTypes {
		b.Run(string(dt), func(b *testing.B) {
			d := benchPruned(b, dt)
			pb, mb := AmpereSizes(dt, benchRows, benchCols)
			packed, meta := make([]byte, pb), make([]byte, mb)
			if err := PackAmpere(packed, meta, d, dt, benchRows, benchCols); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(d)))
			b.ResetTimer()
			for b.Loop() {
				if err := UnpackAmpere(d, packed, meta, dt, benchRows, benchCols); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPackBitmask(b *testing.B) {
	for _, dt := range allDTypes {
		b.Run(string(dt), func(b *testing.B) {
			d := mustPrune(b, weights(dt, benchRows, benchCols, 3), dt, benchCols, Rule24)
			cb, bb := BitmaskSizes(dt, benchRows, benchCols)
			comp, mask := make([]byte, cb), make([]byte, bb)
			b.SetBytes(int64(len(d)))
			b.ResetTimer()
			for b.Loop() {
				if err := PackBitmask(comp, mask, d, dt, benchRows, benchCols); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPruneBitmask prunes and packs in one pass; its bytes are those
// of the dense input, as for Prune.
func BenchmarkPruneBitmask(b *testing.B) {
	for _, dt := range allDTypes {
		b.Run(string(dt), func(b *testing.B) {
			src := weights(dt, benchRows, benchCols, 3)
			cb, bb := BitmaskSizes(dt, benchRows, benchCols)
			comp, mask := make([]byte, cb), make([]byte, bb)
			b.SetBytes(int64(len(src)))
			b.ResetTimer()
			for b.Loop() {
				if _, err := PruneBitmask(comp, mask, src, dt, benchRows, benchCols, 0, Rule24); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPruneThenPackBitmask is the two passes that PruneBitmask
// replaces, on the same input, for comparison.
func BenchmarkPruneThenPackBitmask(b *testing.B) {
	for _, dt := range allDTypes {
		b.Run(string(dt), func(b *testing.B) {
			src := weights(dt, benchRows, benchCols, 3)
			pruned := make([]byte, len(src))
			cb, bb := BitmaskSizes(dt, benchRows, benchCols)
			comp, mask := make([]byte, cb), make([]byte, bb)
			b.SetBytes(int64(len(src)))
			b.ResetTimer()
			for b.Loop() {
				if _, err := Prune(pruned, src, dt, benchCols, 0, Rule24); err != nil {
					b.Fatal(err)
				}
				if err := PackBitmask(comp, mask, pruned, dt, benchRows, benchCols); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkUnpackBitmask(b *testing.B) {
	for _, dt := range allDTypes {
		b.Run(string(dt), func(b *testing.B) {
			d := mustPrune(b, weights(dt, benchRows, benchCols, 3), dt, benchCols, Rule24)
			cb, bb := BitmaskSizes(dt, benchRows, benchCols)
			comp, mask := make([]byte, cb), make([]byte, bb)
			if err := PackBitmask(comp, mask, d, dt, benchRows, benchCols); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(d)))
			b.ResetTimer()
			for b.Loop() {
				if err := UnpackBitmask(d, comp, mask, dt, benchRows, benchCols); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
