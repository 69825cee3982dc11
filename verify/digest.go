package verify

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// digestTensor is one tensor of the checkpoint to hash and the digest
// the prune report records for it ("" when it records none).
type digestTensor struct {
	file   *checkpoint.File
	info   checkpoint.TensorInfo
	want   string
	listed bool
}

// digestPlan lists every tensor of every shard of ck against the report's
// digests, and the names the report lists that ck lacks.
func digestPlan(ck *checkpoint.Checkpoint, want map[string]string) (tensors []digestTensor, missing []string) {
	seen := map[string]bool{}
	for _, f := range ck.Shards {
		for _, t := range f.Tensors {
			d, ok := want[t.Name]
			tensors = append(tensors, digestTensor{file: f, info: t, want: d, listed: ok})
			seen[t.Name] = true
		}
	}
	for name := range want {
		if !seen[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	return tensors, missing
}

// check hashes the tensor's bytes as they lie in its file and compares
// them with the report. It returns the check's outcome as a Result, and
// an error when the file cannot be read or ctx is done.
func (d digestTensor) check(ctx context.Context, progress func(int64)) (Result, error) {
	res := Result{Tensor: d.info.Name, Format: "digest"}
	shard := filepath.Base(d.file.Path())
	if !d.listed {
		res.add(CheckDigest, fmt.Errorf("shard %s: the tensor is not in the prune report's sha256 list", shard))
		res.finish()
		return res, nil
	}
	got, err := hashTensor(ctx, d.file, d.info, progress)
	if err != nil {
		return res, err
	}
	if !strings.EqualFold(got, d.want) {
		res.add(CheckDigest, fmt.Errorf("shard %s: SHA-256 %s differs from the prune report's %s", shard, got, d.want))
	} else {
		res.add(CheckDigest, nil)
	}
	res.finish()
	return res, nil
}

// hashTensor returns the lower-case hex SHA-256 of tensor t's bytes in f
// ([DataOffset+Begin, DataOffset+End)), read in chunks by
// checkpoint.SHA256, which checks ctx between them; progress is told of
// each chunk.
func hashTensor(ctx context.Context, f *checkpoint.File, t checkpoint.TensorInfo, progress func(int64)) (string, error) {
	sum, err := checkpoint.SHA256(ctx, countingReader{f, progress}, f.DataOffset+t.Begin, t.Size())
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("%s: tensor %q: reading for its digest: %w", f.Path(), t.Name, err)
	}
	return hex.EncodeToString(sum[:]), nil
}

// countingReader tells progress of every byte read through it.
type countingReader struct {
	r        io.ReaderAt
	progress func(int64)
}

// ReadAt reads from r and counts what it read.
func (c countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	if c.progress != nil && n > 0 {
		c.progress(int64(n))
	}
	return n, err
}

// digestResults turns the per-tensor outcomes into the report's results:
// every failure, a failure for each tensor the report lists that the
// checkpoint lacks, and one passing result for all the others.
func digestResults(outcomes []Result, missing []string) []Result {
	var out []Result
	passed := 0
	for _, r := range outcomes {
		if r.OK {
			passed++
		} else {
			out = append(out, r)
		}
	}
	for _, name := range missing {
		r := Result{Tensor: name, Format: "digest"}
		r.add(CheckDigest, fmt.Errorf("the prune report lists a digest for it but no shard of the checkpoint holds it"))
		r.finish()
		out = append(out, r)
	}
	if len(out) == 0 {
		r := Result{Tensor: fmt.Sprintf("(all %d tensor digests)", passed), Format: "digest"}
		r.add(CheckDigest, nil)
		r.finish()
		out = append(out, r)
	}
	return out
}
