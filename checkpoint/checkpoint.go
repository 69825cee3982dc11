package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ConfigName is the file name of a model's configuration.
const ConfigName = "config.json"

// maxWarnings bounds how many tensors missing from the index are listed
// one per line in Checkpoint.Warnings; the rest are counted in one line.
const maxWarnings = 20

// Checkpoint is an open safetensors checkpoint: a single file, or the
// shards of a model directory described by its index. Open one with
// [Open]; the shards stay open, and their data mapped, until Close.
type Checkpoint struct {
	// Path is the path given to Open.
	Path string
	// Dir is the directory holding the weights.
	Dir string
	// Index is the parsed index of a sharded checkpoint, nil otherwise.
	Index *Index
	// Shards are the open weight files, ordered by file name.
	Shards []*File
	// Files are the names of the directory's other regular files
	// (config.json, tokenizer files and so on), sorted: not the weights,
	// not the index, not hidden files, not subdirectories. Nil when
	// Open was given a single .safetensors file.
	Files []string
	// Config is the raw content of config.json, nil when the directory
	// has none or Open was given a single .safetensors file.
	Config []byte
	// Unindexed are the names of the directory's .safetensors files that
	// its index does not name (so their tensors are not part of the
	// checkpoint), sorted.
	Unindexed []string
	// Warnings describe inconsistencies that do not stop the checkpoint
	// from being read, one per line: tensors the index does not list,
	// weight files it does not name, a total_size that differs.
	Warnings []string

	isDir  bool
	byName map[string]location
}

// location is where a tensor lives: Shards[shard].Tensors[tensor].
type location struct{ shard, tensor int }

// Open opens the checkpoint at path, which is one of
//
//   - a .safetensors file (any file not ending in .json), read alone:
//     Dir is its directory, Files and Config are nil;
//   - an index file such as model.safetensors.index.json, whose
//     directory is the model directory;
//   - a model directory holding model.safetensors.index.json, or, without
//     an index, exactly one .safetensors file.
//
// A sharded checkpoint must be consistent: every shard the index names
// exists ([ErrMissingShard]), holds the tensors the index puts in it, and
// no tensor is in two shards ([ErrIndex]). Tensors that the shards hold
// but the index omits are only reported in Warnings. Every error is an
// *[Error] naming the file at fault; on error nothing is left open.
func Open(path string) (*Checkpoint, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, osError(path, err)
	}
	switch {
	case fi.IsDir():
		return openDir(path, path, "")
	case !fi.Mode().IsRegular():
		return nil, &Error{File: path, Off: -1, Err: ErrNotCheckpoint, Detail: "not a regular file or directory"}
	case strings.HasSuffix(path, ".json"):
		return openDir(path, filepath.Dir(path), filepath.Base(path))
	}
	f, err := OpenFile(path)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Path: path, Dir: filepath.Dir(path), Shards: []*File{f}}
	if err := c.locate(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// dirListing is what a model directory holds.
type dirListing struct {
	weights []string // .safetensors files
	others  []string // other regular files
	index   bool     // whether IndexName is there
}

// listDir sorts the visible regular files of dir (following symbolic
// links, as in the Hugging Face cache) into weights and others, leaving
// out the index file indexName.
func listDir(dir, indexName string) (dirListing, error) {
	var l dirListing
	entries, err := os.ReadDir(dir)
	if err != nil {
		return l, osError(dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		mode := e.Type()
		if mode&fs.ModeSymlink != 0 {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				continue // a dangling link is not part of the model
			}
			mode = fi.Mode()
		}
		switch {
		case !mode.IsRegular():
		case name == IndexName:
			l.index = true
		case name == indexName:
		case strings.HasSuffix(name, ".safetensors"):
			l.weights = append(l.weights, name)
		default:
			l.others = append(l.others, name)
		}
	}
	return l, nil
}

// openDir opens the model directory dir, sharded by the index file
// indexName, by IndexName when indexName is "" and dir has one, or
// else made of its only .safetensors file.
func openDir(path, dir, indexName string) (*Checkpoint, error) {
	l, err := listDir(dir, indexName)
	if err != nil {
		return nil, err
	}
	if indexName == "" && l.index {
		indexName = IndexName
	}
	if indexName != IndexName && l.index {
		l.others = append(l.others, IndexName) // another index than the one read
	}
	slices.Sort(l.others)
	c := &Checkpoint{Path: path, Dir: dir, Files: l.others, isDir: true}
	if slices.Contains(l.others, ConfigName) {
		if c.Config, err = os.ReadFile(filepath.Join(dir, ConfigName)); err != nil {
			return nil, osError(filepath.Join(dir, ConfigName), err)
		}
	}
	if indexName != "" {
		err = c.openSharded(filepath.Join(dir, indexName), l.weights)
	} else {
		err = c.openSingle(l.weights)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// openSingle opens the one weight file of a directory without an index.
func (c *Checkpoint) openSingle(weights []string) error {
	switch len(weights) {
	case 0:
		return &Error{File: c.Dir, Off: -1, Err: ErrNotCheckpoint, Detail: "no " + IndexName + " and no .safetensors file"}
	case 1:
	default:
		return &Error{File: c.Dir, Off: -1, Err: ErrNotCheckpoint,
			Detail: fmt.Sprintf("%d .safetensors files and no %s: %s", len(weights), IndexName, nameList(weights))}
	}
	f, err := OpenFile(filepath.Join(c.Dir, weights[0]))
	if err != nil {
		return err
	}
	c.Shards = []*File{f}
	return c.locate()
}

// nameList joins names for an error message, eliding after a few.
func nameList(names []string) string {
	const show = 8
	if len(names) <= show {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:show], ", ") + fmt.Sprintf(" and %d more", len(names)-show)
}

// openSharded reads the index at indexPath, opens the shards it names and
// checks them against it. weights are the directory's .safetensors files.
func (c *Checkpoint) openSharded(indexPath string, weights []string) error {
	b, err := os.ReadFile(indexPath)
	if err != nil {
		return osError(indexPath, err)
	}
	if c.Index, err = ParseIndex(b); err != nil {
		if e, ok := errors.AsType[*Error](err); ok {
			e.File = indexPath
		}
		return err
	}
	// The shards in name order, each with the first tensor mapped to it.
	first := make(map[string]string)
	count := make(map[string]int)
	for name, shard := range c.Index.WeightMap {
		if t, ok := first[shard]; !ok || name < t {
			first[shard] = name
		}
		count[shard]++
	}
	shards := slices.Sorted(maps.Keys(first))
	for _, shard := range shards {
		p := filepath.Join(c.Dir, shard)
		f, err := OpenFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			return &Error{File: p, Tensor: first[shard], Off: -1, Err: ErrMissingShard,
				Detail: fmt.Sprintf("%s puts %d tensors in it", filepath.Base(indexPath), count[shard])}
		}
		if err != nil {
			return err
		}
		c.Shards = append(c.Shards, f)
	}
	if err := c.locate(); err != nil {
		return err
	}
	// Every tensor the index names is in the shard it names.
	for _, name := range slices.Sorted(maps.Keys(c.Index.WeightMap)) {
		shard := c.Index.WeightMap[name]
		if loc, ok := c.byName[name]; !ok || filepath.Base(c.Shards[loc.shard].Path()) != shard {
			detail := "the index puts it in this shard, which does not hold it"
			if ok {
				detail += "; it is in " + filepath.Base(c.Shards[loc.shard].Path())
			}
			return &Error{File: filepath.Join(c.Dir, shard), Tensor: name, Off: -1, Err: ErrIndex, Detail: detail}
		}
	}
	c.warnUnindexed(weights, shards)
	return nil
}

// warnUnindexed adds warnings for tensors and weight files the index
// leaves out, and for a total_size that disagrees with the tensors.
func (c *Checkpoint) warnUnindexed(weights, shards []string) {
	var missing []string
	for _, f := range c.Shards {
		for _, t := range f.Tensors {
			if _, ok := c.Index.WeightMap[t.Name]; !ok {
				missing = append(missing, fmt.Sprintf("tensor %q in %s is not in the index", t.Name, filepath.Base(f.Path())))
			}
		}
	}
	if len(missing) > maxWarnings {
		n := len(missing) - maxWarnings
		missing = append(missing[:maxWarnings], fmt.Sprintf("%d more tensors are not in the index", n))
	}
	c.Warnings = append(c.Warnings, missing...)
	for _, w := range weights {
		if _, found := slices.BinarySearch(shards, w); !found {
			c.Unindexed = append(c.Unindexed, w)
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s is not named by the index and was not read", w))
		}
	}
	if n, ok := c.Index.Metadata["total_size"].(json.Number); ok {
		if v, err := strconv.ParseInt(string(n), 10, 64); err == nil && v != c.TotalSize() {
			c.Warnings = append(c.Warnings, fmt.Sprintf("the index's total_size is %d, the tensors take %d bytes", v, c.TotalSize()))
		}
	}
}

// locate builds the name lookup of all shards, rejecting a tensor that
// is in two of them.
func (c *Checkpoint) locate() error {
	n := 0
	for _, f := range c.Shards {
		n += len(f.Tensors)
	}
	c.byName = make(map[string]location, n)
	for i, f := range c.Shards {
		for j, t := range f.Tensors {
			if prev, dup := c.byName[t.Name]; dup {
				return &Error{File: f.Path(), Tensor: t.Name, Off: -1, Err: ErrIndex,
					Detail: "the tensor is also in " + filepath.Base(c.Shards[prev.shard].Path())}
			}
			c.byName[t.Name] = location{i, j}
		}
	}
	return nil
}

// IsDir reports whether the checkpoint was opened as a model directory
// (from a directory or an index file), so that Files and Config describe
// that directory; it is false for a single .safetensors file.
func (c *Checkpoint) IsDir() bool { return c.isDir }

// Names returns the names of all tensors, sorted.
func (c *Checkpoint) Names() []string {
	return slices.Sorted(maps.Keys(c.byName))
}

// Lookup returns the shard holding the tensor called name and its
// description.
func (c *Checkpoint) Lookup(name string) (*File, TensorInfo, bool) {
	loc, ok := c.byName[name]
	if !ok {
		return nil, TensorInfo{}, false
	}
	f := c.Shards[loc.shard]
	return f, f.Tensors[loc.tensor], true
}

// TotalSize returns the size in bytes of all tensors.
func (c *Checkpoint) TotalSize() int64 {
	var n int64
	for _, f := range c.Shards {
		for _, t := range f.Tensors {
			n += t.Size()
		}
	}
	return n
}

// Architecture returns the model class of config.json: the first of its
// "architectures", else its "model_type", else "" (also when there is no
// config or it does not parse).
func (c *Checkpoint) Architecture() string {
	var cfg struct {
		Architectures []string `json:"architectures"`
		ModelType     string   `json:"model_type"`
	}
	if c.Config == nil || json.Unmarshal(c.Config, &cfg) != nil {
		return ""
	}
	if len(cfg.Architectures) > 0 && cfg.Architectures[0] != "" {
		return cfg.Architectures[0]
	}
	return cfg.ModelType
}

// Close closes all shards. Closing a closed Checkpoint does nothing.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.Shards {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
