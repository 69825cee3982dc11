package checkpoint

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReshardGroups checks that Reshard never splits a group, even when
// its members are not next to each other or outgrow the limit, keeping
// the order of everything else (a table case and a property over random
// inputs).
func TestReshardGroups(t *testing.T) {
	g := &pairGroup{}
	spec := func(name string, n int64, src any) TensorSpec {
		s := TensorSpec{Name: name, DType: U8, Shape: []int64{n}}
		if m, ok := src.(Member); ok {
			s.Src = m
		}
		return s
	}
	in := []TensorSpec{spec("a", 4, nil), spec("g0", 6, Member{g, 0}), spec("b", 1, nil), spec("g1", 6, Member{g, 1})}
	var got [][]string
	for _, s := range Reshard(in, 8) {
		var names []string
		for _, t := range s.Tensors {
			names = append(names, t.Name)
		}
		got = append(got, names)
	}
	if want := [][]string{{"a"}, {"g0", "g1"}, {"b"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("Reshard = %q, want %q", got, want)
	}

	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 2000 {
		var specs []TensorSpec
		groups := make([]*pairGroup, 1+r.IntN(4))
		for i := range groups {
			groups[i] = &pairGroup{}
		}
		next := map[*pairGroup]int{}
		for i := range 1 + r.IntN(12) {
			s := TensorSpec{Name: string(rune('a' + i)), DType: U8, Shape: []int64{int64(r.IntN(10))}}
			if r.IntN(2) == 0 {
				gr := groups[r.IntN(len(groups))]
				s.Src = Member{gr, next[gr]}
				next[gr]++
			}
			specs = append(specs, s)
		}
		shards := Reshard(specs, int64(1+r.IntN(20)))
		where := map[Group]int{}
		var names []string
		for i, s := range shards {
			for _, ts := range s.Tensors {
				names = append(names, ts.Name)
				if m, ok := ts.Src.(Member); ok {
					if k, seen := where[m.Group]; seen && k != i {
						t.Fatalf("trial %d: a group is split across shards %d and %d", trial, k, i)
					}
					where[m.Group] = i
				}
			}
		}
		if len(names) != len(specs) {
			t.Fatalf("trial %d: %d tensors in, %d out", trial, len(specs), len(names))
		}
	}
}

// TestBesideFailsBeforeOutput checks that a file beside a single output
// file that cannot be made leaves nothing: the output does not appear.
func TestBesideFailsBeforeOutput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "m.safetensors")
	boom := errors.New("report failed")
	opt := &WriteOptions{Beside: []ExtraFile{{Name: "m.report.json", Make: func() ([]byte, error) { return nil, boom }}}}
	if err := WriteFile(context.Background(), out, []TensorSpec{u8Spec("a", 1)}, nil, opt); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the Make error", err)
	}
	checkDirEntries(t, dir)
	opt.Beside[0].Make = func() ([]byte, error) { return []byte("{}"), nil }
	if err := WriteFile(context.Background(), out, []TensorSpec{u8Spec("a", 1)}, nil, opt); err != nil {
		t.Fatal(err)
	}
	checkDirEntries(t, dir, "m.safetensors", "m.report.json")
}

// tinyFS mounts a tmpfs of size bytes in a new directory, or skips the
// test where it cannot (not root, no mount permission).
func tinyFS(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)); err != nil {
		t.Skipf("cannot mount a tiny tmpfs to fill (needs root): %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// TestDiskFullAtTheEnd checks that a disk that fills up while the last
// file of an output (a report built after the tensors) is written leaves
// nothing at the output path and no temporary files, for both writers.
func TestDiskFullAtTheEnd(t *testing.T) {
	for _, file := range []bool{false, true} {
		dir := tinyFS(t, 256<<10)
		out := filepath.Join(dir, "out")
		big := func() ([]byte, error) { return make([]byte, 512<<10), nil }
		specs := []TensorSpec{u8Spec("a", make([]byte, 64<<10)...)}
		var err error
		if file {
			err = WriteFile(context.Background(), out, specs, nil, &WriteOptions{Beside: []ExtraFile{{Name: "out.report.json", Make: big}}})
		} else {
			err = WriteDir(context.Background(), out, &Output{Shards: Reshard(specs, 0), Files: []ExtraFile{{Name: "report.json", Make: big}}}, nil)
		}
		if !errors.Is(err, unix.ENOSPC) {
			t.Errorf("file=%v: err = %v, want ENOSPC", file, err)
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 0 {
			t.Errorf("file=%v: left %v on the full file system", file, entries)
		}
	}
}
