package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
)

// Group is a source of several tensors of one file that are best written
// in a single pass over their common input: a compressed weight's values
// and its metadata, say. Each tensor of the group names it through a
// [Member] source; the writer calls WriteGroup once, in one worker, with
// one writer per member, indexed by [Member.Index]. Each writer takes
// exactly its tensor's bytes, in order, as with [io.WriterTo] sources.
// The members of one group are recognised by comparing their Group
// values, so a Group must be of a comparable type (a pointer, typically);
// a member whose Group is not is an error.
type Group interface {
	// WriteGroup writes every member's bytes, ws[i] taking member i's.
	WriteGroup(ws []io.Writer) error
}

// comparableGroup reports whether g can identify its members: a non-nil
// value that can be compared (and so used as a map key) without a panic,
// which a comparable type holding an uncomparable value in an interface
// field cannot (TestGroupErrors).
func comparableGroup(g Group) bool {
	return g != nil && reflect.ValueOf(g).Comparable()
}

// Member is the source of one tensor of a [Group]: the Index-th writer
// handed to its WriteGroup. The members of a group must lie in the same
// file and number 0, 1, … without gaps or repeats.
type Member struct {
	Group Group
	Index int
}

// errMemberAlone is returned by Member.WriteTo: a member is written by
// its group, never on its own.
var errMemberAlone = errors.New("a group member is written by its group, not on its own")

// WriteTo fails: [WriteFile] and [WriteDir] write a member through its
// group. It exists so that a Member can stand in a [TensorSpec].
func (m Member) WriteTo(io.Writer) (int64, error) { return 0, errMemberAlone }

// fileTask is one unit of work of a file: a single tensor, or all the
// members of a group (spec indices ordered by member index).
type fileTask struct {
	single int
	group  Group
	idx    []int
}

// tasks lists the work of j's specs in the order the caller gave them; a
// group is one task at the place of its first member. Members that do
// not form a complete group are an error naming the tensor.
func (j *fileJob) tasks() ([]fileTask, error) {
	var out []fileTask
	at := map[Group]int{}
	for i, s := range j.specs {
		m, ok := s.Src.(Member)
		if !ok {
			out = append(out, fileTask{single: i})
			continue
		}
		if m.Group == nil || m.Index < 0 || m.Index >= len(j.specs) {
			return nil, &Error{File: j.path, Tensor: s.Name, Off: -1, Err: ErrSourceSize,
				Detail: fmt.Sprintf("group member index %d out of range", m.Index)}
		}
		if !comparableGroup(m.Group) {
			return nil, &Error{File: j.path, Tensor: s.Name, Off: -1, Err: ErrSourceSize,
				Detail: fmt.Sprintf("group of type %T is not comparable (use a pointer)", m.Group)}
		}
		k, seen := at[m.Group]
		if !seen {
			k = len(out)
			at[m.Group] = k
			out = append(out, fileTask{single: -1, group: m.Group})
		}
		t := &out[k]
		for len(t.idx) <= m.Index {
			t.idx = append(t.idx, -1)
		}
		if t.idx[m.Index] >= 0 {
			return nil, &Error{File: j.path, Tensor: s.Name, Off: -1, Err: ErrSourceSize,
				Detail: fmt.Sprintf("two tensors are member %d of one group", m.Index)}
		}
		t.idx[m.Index] = i
	}
	for _, t := range out {
		for k, i := range t.idx {
			if i < 0 {
				return nil, &Error{File: j.path, Off: -1, Err: ErrSourceSize,
					Detail: fmt.Sprintf("a group lacks member %d (members must be in the same file)", k)}
			}
		}
	}
	return out, nil
}

// writeGroup writes the members of a group in one WriteGroup call and
// checks each tensor's size.
func (j *fileJob) writeGroup(ctx context.Context, t fileTask, opt *WriteOptions) error {
	ws := make([]io.Writer, len(t.idx))
	tws := make([]*tensorWriter, len(t.idx))
	for k, i := range t.idx {
		tws[k] = j.newTensorWriter(ctx, i, opt)
		ws[k] = tws[k]
	}
	err := t.group.WriteGroup(ws)
	for k, i := range t.idx {
		if e := j.finish(tws[k], i, err); e != nil {
			return e
		}
	}
	for k, i := range t.idx {
		tws[k].digest(j.specs[i].Name, opt.Digest)
	}
	return nil
}
