package format

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// ErrNoReport is returned by ReadReport for a checkpoint without a prune
// report (sfsurgery.json in a directory, NAME.sfsurgery.json beside a
// single file).
var ErrNoReport = errors.New("no prune report")

// Report is the outcome of a prune, written as JSON beside the output.
type Report struct {
	Tool    string `json:"tool"`
	Version string `json:"version"`
	Input   string `json:"input"`
	Output  string `json:"output"`
	Format  Format `json:"format"`
	Rule    string `json:"rule"`
	// Method is what decided the weights kept: Magnitude (Rule), or the
	// calibrated method whose decisions Decisions describes.
	Method Method `json:"method"`
	// Decisions describes the calibration's decisions file; nil for the
	// magnitude rule.
	Decisions *Decisions `json:"decisions,omitempty"`
	// Pruned and Skipped count targets.
	Pruned  int `json:"pruned"`
	Skipped int `json:"skipped"`
	// BytesIn and BytesOut are the sizes of the input's and the output's
	// tensors (headers excluded).
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// KeptFraction is Σ|kept| / Σ|all| over every pruned weight.
	KeptFraction float64 `json:"kept_magnitude_fraction"`
	// Worst is the pruned weight with the smallest kept fraction.
	Worst   *TensorReport  `json:"worst,omitempty"`
	Tensors []TensorReport `json:"tensors"`
	// NotPruned lists the projection-like tensors that were not targets
	// and were copied unchanged, with the reason.
	NotPruned []NotPruned `json:"not_pruned"`
	// Warnings are what prune noticed about its input and left as it
	// was (the lines inspect prints, and files carried over unpruned).
	Warnings []string `json:"warnings,omitempty"`
	// SHA256 maps the name of every tensor of the output to the SHA-256
	// of its bytes in the output (hex), so that verify can tell any
	// changed byte without the original.
	SHA256 map[string]string `json:"sha256"`
}

// ReadReport reads the prune report of the checkpoint ck: sfsurgery.json
// in its directory, or NAME.sfsurgery.json beside a single file. It fails
// with an error wrapping ErrNoReport when there is none.
func ReadReport(ck *checkpoint.Checkpoint) (*Report, error) {
	path := filepath.Join(ck.Dir, ReportName)
	if !ck.IsDir() {
		path = ReportPath(ck.Path, true)
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrNoReport)
	}
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// TensorReport is the outcome for one target.
type TensorReport struct {
	Target
	// KeptFraction is Σ|w| of the original over the places kept, over
	// Σ|w| of the original.
	KeptFraction float64 `json:"kept_magnitude_fraction,omitempty"`
	// MaskSHA256 is, for a target pruned by a calibration's decisions,
	// the SHA-256 (hex) of its mask's bytes exactly as in the decisions
	// file, so that verify can check the mask of the output against the
	// decisions without the file.
	MaskSHA256 string `json:"mask_sha256,omitempty"`
	// ZeroKeptGroups counts the groups where the decisions keep a zero
	// above a pruned place. An output stores values, not a mask, and the
	// mask it shows keeps a group's nonzeros and its lowest-index zeros
	// (prune24.MaskOf), so there it differs from the decisions';
	// WrittenMaskSHA256 is then the SHA-256 of the mask the output shows.
	// Both are empty when the output shows the decisions' mask.
	ZeroKeptGroups    int64  `json:"zero_kept_groups,omitempty"`
	WrittenMaskSHA256 string `json:"written_mask_sha256,omitempty"`
}

// Decisions is what the report records of the calibration's decisions
// file that chose the weights kept (docs/formats.md §7).
type Decisions struct {
	// File is the decisions file's absolute path, SHA256 the SHA-256
	// (hex) of its bytes.
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
	// Model is the model as the calibration was given it, Tool the
	// calibration's tool and version.
	Model string `json:"model"`
	Tool  string `json:"tool"`
	// Text is the calibration text, Samples × Seqlen the tokens of it
	// the calibration ran, Seed the seed of their windows, Params the
	// method's parameters.
	Text    CalibrationText    `json:"text"`
	Samples int                `json:"samples"`
	Seqlen  int                `json:"seqlen"`
	Seed    int64              `json:"seed"`
	Params  map[string]float64 `json:"params"`
}

// CalibrationText identifies the text a calibration read.
type CalibrationText struct {
	// File is the text file's name, SHA256 the SHA-256 (hex) of its
	// bytes, Kind "plain" or "jsonl".
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
	Kind   string `json:"kind"`
}

// Target is what prune does to one target weight.
type Target struct {
	Name  string           `json:"name"`
	Shard string           `json:"shard"`
	DType checkpoint.DType `json:"dtype"`
	Shape []int64          `json:"shape"`
	// Rule is the pattern applied, "2:4" or "1:2"; empty when skipped.
	Rule string `json:"rule,omitempty"`
	// Skip says why the tensor was left unchanged; empty when pruned.
	Skip string `json:"skip,omitempty"`
	// Outputs are the names of the tensors written for it.
	Outputs []string `json:"outputs"`
}

// NotPruned is a tensor of the input that looks like a projection weight
// but is not a target, and so is copied unchanged.
type NotPruned struct {
	Name  string           `json:"name"`
	DType checkpoint.DType `json:"dtype"`
	Shape []int64          `json:"shape"`
	// Reason says why it is not a target: not matched by the targets,
	// excluded by --ignore, outside --scope, and for a 3-D tensor that
	// the formats store matrices only.
	Reason string `json:"reason"`
}

// ReportName is the prune report's file name inside an output directory.
const ReportName = "sfsurgery.json"

// ReportPath returns where the per-tensor report of an output goes:
// sfsurgery.json inside an output directory, or beside a single output
// file.
func ReportPath(out string, single bool) string {
	if single {
		return strings.TrimSuffix(out, ".safetensors") + ".sfsurgery.json"
	}
	return filepath.Join(out, ReportName)
}
