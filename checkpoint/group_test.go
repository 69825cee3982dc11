package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// splitGroup writes the even bytes of data to its first member and the
// odd ones to its second, in one pass, in small pieces.
type splitGroup struct {
	data  []byte
	calls *int
}

func (g *splitGroup) WriteGroup(ws []io.Writer) error {
	*g.calls++
	for i := 0; i < len(g.data); i += 8 {
		var even, odd []byte
		for j := i; j < min(i+8, len(g.data)); j++ {
			if j%2 == 0 {
				even = append(even, g.data[j])
			} else {
				odd = append(odd, g.data[j])
			}
		}
		if _, err := ws[0].Write(even); err != nil {
			return err
		}
		if _, err := ws[1].Write(odd); err != nil {
			return err
		}
	}
	return nil
}

func TestGroupWritesEachMember(t *testing.T) {
	data := make([]byte, 1000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	calls := 0
	g := &splitGroup{data: data, calls: &calls}
	specs := []TensorSpec{
		{Name: "z.odd", DType: U8, Shape: []int64{500}, Src: Member{Group: g, Index: 1}},
		{Name: "alone", DType: U8, Shape: []int64{3}, Src: byteSource{data: []byte{1, 2, 3}}},
		{Name: "a.even", DType: U8, Shape: []int64{500}, Src: Member{Group: g, Index: 0}},
	}
	for _, workers := range []int{1, 3} {
		calls = 0
		path := filepath.Join(t.TempDir(), "g.safetensors")
		if err := WriteFile(context.Background(), path, specs, nil, &WriteOptions{Workers: workers}); err != nil {
			t.Fatal(err)
		}
		if calls != 1 {
			t.Errorf("WriteGroup called %d times, want 1", calls)
		}
		f, err := OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]func(int) bool{"a.even": func(i int) bool { return i%2 == 0 }, "z.odd": func(i int) bool { return i%2 == 1 }} {
			var exp []byte
			for i, b := range data {
				if want(i) {
					exp = append(exp, b)
				}
			}
			info, _ := f.Tensor(name)
			if !bytes.Equal(f.Data(info), exp) {
				t.Errorf("workers %d: %s has the wrong bytes", workers, name)
			}
		}
		f.Close()
	}
}

func TestGroupErrors(t *testing.T) {
	calls := 0
	g := &splitGroup{data: make([]byte, 8), calls: &calls}
	tests := []struct {
		name  string
		specs []TensorSpec
		want  error
	}{
		{"missing member", []TensorSpec{{Name: "a", DType: U8, Shape: []int64{4}, Src: Member{Group: g, Index: 1}}}, ErrSourceSize},
		{"member twice", []TensorSpec{
			{Name: "a", DType: U8, Shape: []int64{4}, Src: Member{Group: g, Index: 0}},
			{Name: "b", DType: U8, Shape: []int64{4}, Src: Member{Group: g, Index: 0}},
		}, ErrSourceSize},
		{"wrong size", []TensorSpec{
			{Name: "a", DType: U8, Shape: []int64{5}, Src: Member{Group: g, Index: 0}},
			{Name: "b", DType: U8, Shape: []int64{4}, Src: Member{Group: g, Index: 1}},
		}, ErrSourceSize},
		{"nil group", []TensorSpec{{Name: "a", DType: U8, Shape: []int64{4}, Src: Member{Index: 0}}}, ErrSourceSize},
		{"uncomparable group", []TensorSpec{{Name: "a", DType: U8, Shape: []int64{4}, Src: Member{Group: sliceGroup{1}, Index: 0}}}, ErrSourceSize},
		{"uncomparable value", []TensorSpec{{Name: "a", DType: U8, Shape: []int64{4}, Src: Member{Group: boxGroup{sliceGroup{1}}, Index: 0}}}, ErrSourceSize},
	}
	if s := Reshard([]TensorSpec{{Name: "a", DType: U8, Shape: []int64{4}, Src: Member{Group: sliceGroup{1}, Index: 0}}}, 1); len(s) != 1 {
		t.Errorf("Reshard of an uncomparable group's member: %d shards", len(s))
	}
	for _, tt := range tests {
		path := filepath.Join(t.TempDir(), "g.safetensors")
		err := WriteFile(context.Background(), path, tt.specs, nil, nil)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := (Member{Group: g}).WriteTo(io.Discard); err == nil {
		t.Error("a member wrote on its own")
	}
}

// boxGroup is a Group of a comparable type whose value may not be: its
// interface field can hold an uncomparable value.
type boxGroup struct{ v any }

// WriteGroup writes nothing.
func (boxGroup) WriteGroup([]io.Writer) error { return nil }

// sliceGroup is a Group of a type that cannot be compared.
type sliceGroup []byte

// WriteGroup writes nothing.
func (sliceGroup) WriteGroup([]io.Writer) error { return nil }

// startedSource is a Source that records that a write of it began.
type startedSource struct{ started *atomic.Bool }

// WriteTo records the start and writes four zero bytes.
func (s startedSource) WriteTo(w io.Writer) (int64, error) {
	s.started.Store(true)
	n, err := w.Write(make([]byte, 4))
	return int64(n), err
}

// TestGroupErrorInLaterShard holds that a malformed group in a later
// shard fails WriteDir before any tensor of an earlier shard is written:
// no write may still be running when WriteDir returns and removes its
// temporary directory.
func TestGroupErrorInLaterShard(t *testing.T) {
	var started atomic.Bool
	calls := 0
	g := &splitGroup{data: make([]byte, 8), calls: &calls}
	out := &Output{Shards: []Shard{
		{Name: "a.safetensors", Tensors: []TensorSpec{{Name: "a", DType: U8, Shape: []int64{4}, Src: startedSource{&started}}}},
		{Name: "b.safetensors", Tensors: []TensorSpec{{Name: "b", DType: U8, Shape: []int64{4}, Src: Member{Group: g, Index: 1}}}},
	}}
	dir := filepath.Join(t.TempDir(), "out")
	err := WriteDir(context.Background(), dir, out, &WriteOptions{Workers: 4})
	if !errors.Is(err, ErrSourceSize) {
		t.Fatalf("err = %v, want %v", err, ErrSourceSize)
	}
	time.Sleep(20 * time.Millisecond) // time for a stray write to begin
	if started.Load() {
		t.Error("a tensor of the first shard was written after planning the second failed")
	}
	if entries, _ := os.ReadDir(filepath.Dir(dir)); len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
}
