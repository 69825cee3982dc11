package speed

import (
	"math"
	"testing"
	"time"
)

func TestRowCost(t *testing.T) {
	c := Ceilings{BandwidthGBs: 4000, DenseTFLOPS: 800, SparseTFLOPS: 1600}
	n, k := 14336, 4096
	// Decode: memory bound; dense moves the 117 MB weight.
	d := RowCost(Dense, 1, n, k, WeightBytes(Dense, n, k, 0), 4, c)
	if d.Bound != "memory" || d.Bytes != int64(2*n*k+2*k+4*n) {
		t.Errorf("dense m=1: %+v", d)
	}
	if want := float64(d.Bytes) / 4000e9; math.Abs(d.Floor.Seconds()-want) > 1e-9 {
		t.Errorf("floor %v, want %v s", d.Floor, want)
	}
	s := RowCost(Ours, 1, n, k, WeightBytes(Ours, n, k, 0), 4, c)
	if s.Bytes != int64(n*k+n*k/8+2*k+4*n) || s.Floor >= d.Floor {
		t.Errorf("ours m=1: %+v", s)
	}
	// 16-bit weight bytes: sparse (half the values + 1/8 meta) is 1.78x less.
	if r := float64(WeightBytes(Dense, n, k, 0)) / float64(WeightBytes(Ours, n, k, 0)); math.Abs(r-16.0/9) > 1e-9 {
		t.Errorf("weight-bytes ratio %v", r)
	}
	// Prefill: math bound, and the sparse peak halves the floor.
	dp := RowCost(Dense, 16384, n, k, WeightBytes(Dense, n, k, 0), 4, c)
	sp := RowCost(CuSPARSELt, 16384, n, k, 60<<20, 2, c)
	if dp.Bound != "math" || sp.Bound != "math" || math.Abs(dp.Floor.Seconds()/sp.Floor.Seconds()-2) > 1e-6 {
		t.Errorf("prefill: dense %+v sparse %+v", dp, sp)
	}
	if dp.FLOPs != 2*16384*float64(n)*float64(k) || sp.FLOPs != dp.FLOPs {
		t.Error("FLOPs must be the dense-equivalent 2MNK for every backend")
	}
	if WeightBytes(CuSPARSELt, n, k, 12345) != 12345 {
		t.Error("cuSPARSELt weight bytes are its compressed size")
	}
	if got := TFLOPS(4096, 4096, 4096, time.Millisecond); math.Abs(got-2*math.Pow(4096, 3)/1e-3/1e12) > 1e-9 {
		t.Errorf("TFLOPS = %v", got)
	}
	if TFLOPS(1, 1, 1, 0) != 0 || (RowCost(Dense, 1, 1, 1, 2, 4, Ceilings{}).Floor != 0) {
		t.Error("zero ceilings or time must give zero, not Inf")
	}
}

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	if s := Summarize([]time.Duration{5 * ms, 1 * ms, 3 * ms}); s.Median != 3*ms || s.Min != ms || s.Max != 5*ms || s.Runs != 3 {
		t.Errorf("odd: %+v", s)
	}
	if s := Summarize([]time.Duration{4 * ms, 1 * ms, 2 * ms, 100 * ms}); s.Median != 3*ms {
		t.Errorf("even: %+v", s)
	}
	if s := Summarize(nil); s != (Summary{}) {
		t.Errorf("empty: %+v", s)
	}
}
