package checkpoint

import "fmt"

// Reshard splits tensors, in their order, into shards of at most maxBytes
// tensor bytes each, greedily as Hugging Face transformers does: a tensor
// that would overflow the current shard starts the next one, and a tensor
// larger than maxBytes gets a shard of its own. The members of a [Group]
// are never split: they move as one unit, at the place of the first, of
// their summed size (a unit larger than maxBytes gets a shard of its
// own). The shards are named as [ShardName] names them; their Metadata is
// nil. With maxBytes <= 0, or when everything fits, there is one shard,
// "model.safetensors". A tensor whose size cannot be computed counts as 0
// bytes here; writing it fails later.
func Reshard(tensors []TensorSpec, maxBytes int64) []Shard {
	var groups [][]TensorSpec
	var cur []TensorSpec
	var curBytes int64
	for _, u := range units(tensors) {
		var n int64
		for _, t := range u {
			if m, err := specSize(t); err == nil {
				n += m
			}
		}
		if maxBytes > 0 && len(cur) > 0 && n > maxBytes-curBytes {
			groups = append(groups, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, u...)
		curBytes += n
	}
	if len(cur) > 0 || len(groups) == 0 {
		groups = append(groups, cur)
	}
	shards := make([]Shard, len(groups))
	for i, g := range groups {
		shards[i] = Shard{Name: ShardName(i, len(groups)), Tensors: g}
	}
	return shards
}

// ShardName returns the Hugging Face name of shard i (counting from 0) of
// n: "model.safetensors" when n is 1, else
// "model-00001-of-00003.safetensors" for i = 0, n = 3.
func ShardName(i, n int) string {
	if n == 1 {
		return "model.safetensors"
	}
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, n)
}

// ShardNames returns the names of the n shards of a checkpoint, as
// [ShardName] gives them.
func ShardNames(n int) []string {
	names := make([]string, max(n, 0))
	for i := range names {
		names[i] = ShardName(i, n)
	}
	return names
}

// units splits tensors into the units Reshard places: each tensor alone,
// except that the members of a group form one unit at the place of the
// first of them.
func units(tensors []TensorSpec) [][]TensorSpec {
	var out [][]TensorSpec
	at := map[Group]int{}
	for _, t := range tensors {
		if m, ok := t.Src.(Member); ok && comparableGroup(m.Group) {
			if k, seen := at[m.Group]; seen {
				out[k] = append(out[k], t)
				continue
			}
			at[m.Group] = len(out)
		}
		out = append(out, []TensorSpec{t})
	}
	return out
}
