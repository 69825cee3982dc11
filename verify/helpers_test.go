package verify_test

import (
	"context"
	"encoding/binary"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/format"
	"github.com/sfsurgery/sfsurgery/surgery"
	"github.com/sfsurgery/sfsurgery/verify"
)

// bytesSrc is a tensor source holding its bytes.
type bytesSrc []byte

func (b bytesSrc) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b)
	return int64(n), err
}

// tensor is a tensor of a hand-made checkpoint.
type tensor struct {
	name  string
	dtype checkpoint.DType
	rows  int
	cols  int // 0 for a vector of rows elements
	data  []byte
}

// writeModel writes tensors as the single file path.
func writeModel(t *testing.T, path string, ts []tensor) {
	t.Helper()
	var specs []checkpoint.TensorSpec
	for _, x := range ts {
		shape := []int64{int64(x.rows)}
		if x.cols > 0 {
			shape = append(shape, int64(x.cols))
		}
		specs = append(specs, checkpoint.TensorSpec{Name: x.name, DType: x.dtype, Shape: shape, Src: bytesSrc(x.data)})
	}
	if err := checkpoint.WriteFile(context.Background(), path, specs, nil, nil); err != nil {
		t.Fatal(err)
	}
}

// randomWeight returns n random values in (-1, 1) of type dt as bytes.
func randomWeight(n int, dt checkpoint.DType, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n*dt.Bits()/8)
	for i := range n {
		setElem(b, i, dt, rng.Float64()*2-1)
	}
	return b
}

// setElem stores v (finite in (-1, 1), or ±Inf) as element i of b.
func setElem(b []byte, i int, dt checkpoint.DType, v float64) {
	f := float32(v)
	switch dt {
	case checkpoint.F32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	case checkpoint.BF16:
		binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(f)>>16))
	default: // F16, by truncation; exactness does not matter here
		u := math.Float32bits(f)
		sign := uint16(u>>16) & 0x8000
		exp := int(u>>23&0xFF) - 127 + 15
		switch {
		case math.IsInf(v, 0):
			binary.LittleEndian.PutUint16(b[2*i:], sign|0x7C00)
		case exp <= 0:
			binary.LittleEndian.PutUint16(b[2*i:], sign)
		default:
			binary.LittleEndian.PutUint16(b[2*i:], sign|uint16(exp)<<10|uint16(u>>13&0x3FF))
		}
	}
}

// pruneFile prunes the checkpoint in into out in format f.
func pruneFile(t *testing.T, in, out string, f format.Format) {
	t.Helper()
	ck, err := checkpoint.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	p, err := surgery.NewPlan(ck, surgery.Options{Format: f, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write(context.Background(), out, checkpoint.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// verifyPath runs the CPU verifier on path, with the original orig when
// it is not "".
func verifyPath(t *testing.T, path, orig string) *verify.Report {
	t.Helper()
	ck, err := checkpoint.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	opt := verify.Options{Device: "cpu", Tokens: 4, Seed: 3}
	if orig != "" {
		o, err := checkpoint.Open(orig)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		opt.Original = o
	}
	rep, err := verify.Run(context.Background(), ck, opt)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// result returns the result for tensor name.
func result(t *testing.T, rep *verify.Report, name string) verify.Result {
	t.Helper()
	for _, r := range rep.Results {
		if r.Tensor == name {
			return r
		}
	}
	t.Fatalf("no result for %s", name)
	return verify.Result{}
}

// hasLine reports whether one of lines contains s.
func hasLine(lines []string, s string) bool {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}
