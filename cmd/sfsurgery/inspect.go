package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/spf13/cobra"
)

func newInspectCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect <checkpoint>",
		Short: "Show what a checkpoint holds (reads headers only)",
		Long: `inspect prints a checkpoint's architecture (from config.json), shards,
tensor count, total bytes and a table of tensors. The checkpoint is a
.safetensors file, a model.safetensors.index.json, a model directory, or
a Hugging Face model id (org/name[@revision]) in the local cache. Only the
headers are read, so it is instant on any size of model. With --json,
metadata values that hold JSON objects are given as objects.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeCheckpoint,
		RunE: func(cmd *cobra.Command, args []string) error {
			ck, err := checkpoint.Open(args[0])
			if err != nil {
				return err
			}
			defer ck.Close()
			info := describe(ck)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			}
			return printInspect(cmd.OutOrStdout(), info)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print machine-readable JSON")
	return cmd
}

// inspectInfo is the JSON form of inspect's output.
type inspectInfo struct {
	Path         string                     `json:"path"`
	Architecture string                     `json:"architecture,omitempty"`
	Shards       []string                   `json:"shards"`
	TensorCount  int                        `json:"tensor_count"`
	TotalBytes   int64                      `json:"total_bytes"`
	Metadata     map[string]json.RawMessage `json:"metadata,omitempty"`
	Warnings     []string                   `json:"warnings,omitempty"`
	Tensors      []tensorRow                `json:"tensors"`
}

type tensorRow struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	Bytes int64   `json:"bytes"`
	Shard string  `json:"shard"`
}

func describe(ck *checkpoint.Checkpoint) inspectInfo {
	info := inspectInfo{
		Path:         ck.Path,
		Architecture: ck.Architecture(),
		Warnings:     ck.Warnings,
		TotalBytes:   ck.TotalSize(),
		Shards:       []string{},
		Tensors:      []tensorRow{},
	}
	for _, s := range ck.Shards {
		info.Shards = append(info.Shards, filepath.Base(s.Path()))
		if info.Metadata == nil && len(s.Metadata) > 0 {
			info.Metadata = metadataJSON(s.Metadata)
		}
	}
	for _, name := range ck.Names() {
		f, t, _ := ck.Lookup(name)
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		info.Tensors = append(info.Tensors, tensorRow{
			Name: name, DType: string(t.DType), Shape: shape, Bytes: t.Size(),
			Shard: filepath.Base(f.Path()),
		})
	}
	info.TensorCount = len(info.Tensors)
	return info
}

// metadataJSON returns a shard's __metadata__ for the JSON output: a
// value that holds a JSON object (sfsurgery's record, a
// quantization_config) as that object, every other value as a string.
func metadataJSON(md map[string]string) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(md))
	for k, v := range md {
		if isJSONObject(v) {
			out[k] = json.RawMessage(v)
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			continue // a string always marshals
		}
		out[k] = b
	}
	return out
}

// isJSONObject reports whether s is one valid JSON object.
func isJSONObject(s string) bool {
	t := strings.TrimSpace(s)
	return strings.HasPrefix(t, "{") && json.Valid([]byte(t))
}

func printInspect(w io.Writer, info inspectInfo) error {
	arch := info.Architecture
	if arch == "" {
		arch = "unknown (no config.json)"
	}
	fmt.Fprintf(w, "checkpoint:   %s\n", info.Path)
	fmt.Fprintf(w, "architecture: %s\n", arch)
	fmt.Fprintf(w, "shards:       %d\n", len(info.Shards))
	fmt.Fprintf(w, "tensors:      %d\n", info.TensorCount)
	fmt.Fprintf(w, "total bytes:  %d (%s)\n", info.TotalBytes, humanBytes(info.TotalBytes))
	for _, warn := range info.Warnings {
		fmt.Fprintf(w, "warning:      %s\n", warn)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDTYPE\tSHAPE\tBYTES\tSHARD")
	for _, t := range info.Tensors {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%s\n", t.Name, t.DType, t.Shape, t.Bytes, t.Shard)
	}
	return tw.Flush()
}

// humanBytes formats n with a binary unit.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// completeCheckpoint completes checkpoint arguments: .safetensors and
// .json files, and directories.
func completeCheckpoint(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return []string{"safetensors", "json"}, cobra.ShellCompDirectiveFilterFileExt
}
