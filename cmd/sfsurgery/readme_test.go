package main

import (
	"bytes"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

var update = flag.Bool("update", false, "rewrite the generated files: the command list in README.md, the Python package's golden launch document")

const (
	readmePath  = "../../README.md"
	readmeBegin = "<!-- commands: generated from the command tree; go test ./cmd/sfsurgery -run TestREADMECommands -update -->\n"
	readmeEnd   = "<!-- end of generated commands -->\n"
	usageWidth  = 100
)

// TestREADMECommands holds the README's command list to the command
// tree: every visible command and flag. -update rewrites it.
func TestREADMECommands(t *testing.T) {
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := bytes.Cut(readme, []byte(readmeBegin))
	if !ok {
		t.Fatalf("%s: no line %q", readmePath, readmeBegin)
	}
	block, after, ok := bytes.Cut(rest, []byte(readmeEnd))
	if !ok {
		t.Fatalf("%s: no line %q after the generated command list", readmePath, readmeEnd)
	}
	want := "\n```\n" + usageLines(newRootCmd(), usageWidth) + "```\n\n"
	if string(block) == want {
		return
	}
	if *update {
		out := slices.Concat(before, []byte(readmeBegin), []byte(want), []byte(readmeEnd), after)
		if err := os.WriteFile(readmePath, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: the command list differs from the command tree (go test ./cmd/sfsurgery -run TestREADMECommands -update rewrites it):\nhave:%s\nwant:%s", readmePath, block, want)
}

func TestUsageLines(t *testing.T) {
	root := &cobra.Command{Use: "tool", Version: "v1"}
	a := &cobra.Command{Use: "a <x>", RunE: func(*cobra.Command, []string) error { return nil }}
	a.Flags().StringP("output", "o", "", "output path")
	a.Flags().Bool("json", false, "JSON")
	a.Flags().StringArray("targets", nil, "repeatable")
	a.Flags().Int("workers", 1, "workers")
	a.Flags().Float64("gemm-share", 0.7, "share")
	a.Flags().String("device", "cpu", "device")
	a.Flags().String("max-shard-size", "", "split into `SIZE` shards")
	a.Flags().Bool("secret", false, "hidden")
	_ = a.Flags().MarkHidden("secret")
	_ = a.RegisterFlagCompletionFunc("device", cobra.FixedCompletions([]string{"cpu", "cuda"}, cobra.ShellCompDirectiveNoFileComp))
	long := &cobra.Command{Use: "longer", RunE: a.RunE}
	long.Flags().String("a-very-long-flag-name", "", "")
	long.Flags().String("another-very-long-flag-name", "", "")
	long.Flags().String("yet-another-very-long-flag-name", "", "")
	hidden := &cobra.Command{Use: "hidden", Hidden: true, RunE: a.RunE}
	root.AddCommand(a, long, hidden)
	want := "" +
		"tool --version\n" +
		"tool a      <x> [-o|--output OUTPUT] [--json] [--targets TARGETS]... [--workers N]\n" +
		"            [--gemm-share SHARE] [--device cpu|cuda] [--max-shard-size SIZE]\n" +
		"tool completion bash [--no-descriptions]\n" +
		"tool completion fish [--no-descriptions]\n" +
		"tool completion powershell [--no-descriptions]\n" +
		"tool completion zsh [--no-descriptions]\n" +
		"tool longer [--a-very-long-flag-name NAME] [--another-very-long-flag-name NAME]\n" +
		"            [--yet-another-very-long-flag-name NAME]\n"
	if got := usageLines(root, 90); got != want {
		t.Errorf("usageLines:\n%s\nwant:\n%s", got, want)
	}
}

// usageLines renders the command tree of root as one usage line per
// runnable, visible command (cobra's completion command included, help
// left out), each followed by its visible flags, wrapped at width
// columns with continuation lines aligned after the command's name.
func usageLines(root *cobra.Command, width int) string {
	root.InitDefaultVersionFlag()
	root.InitDefaultCompletionCmd()
	var b strings.Builder
	if root.Flags().Lookup("version") != nil {
		b.WriteString(root.Name() + " --version\n")
	}
	var cmds []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			if sub.Runnable() {
				cmds = append(cmds, sub)
			}
			walk(sub)
		}
	}
	walk(root)
	nameWidth := 0
	for _, c := range cmds {
		if c.Parent() == root {
			nameWidth = max(nameWidth, len(c.Name()))
		}
	}
	for _, c := range cmds {
		path := c.CommandPath()
		if c.Parent() == root {
			path = root.Name() + " " + c.Name() + strings.Repeat(" ", nameWidth-len(c.Name()))
		}
		words := strings.Fields(strings.TrimPrefix(c.Use, c.Name()))
		words = append(words, flagWords(c)...)
		writeWrapped(&b, path, words, width)
	}
	return b.String()
}

// flagWords renders c's visible flags in the order they were defined:
// "[--json]", "[-o|--output OUTPUT]", "[--format a|b|c]", "[--targets TARGETS]...".
func flagWords(c *cobra.Command) []string {
	inherited := c.InheritedFlags()
	fs := c.Flags()
	fs.SortFlags = false
	var words []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" || inherited.Lookup(f.Name) != nil {
			return
		}
		name := "--" + f.Name
		if f.Shorthand != "" {
			name = "-" + f.Shorthand + "|" + name
		}
		w := "[" + name
		if v := flagValueName(c, f); v != "" {
			w += " " + v
		}
		w += "]"
		if strings.HasSuffix(f.Value.Type(), "Array") || strings.HasSuffix(f.Value.Type(), "Slice") {
			w += "..."
		}
		words = append(words, w)
	})
	return words
}

// flagValueName names a flag's value: "" for a bool, the name in
// backquotes in its usage, its fixed completions joined by '|', N for an
// integer, else its name's last word in upper case.
func flagValueName(c *cobra.Command, f *pflag.Flag) string {
	typ := f.Value.Type()
	if typ == "bool" {
		return ""
	}
	if strings.Count(f.Usage, "`") >= 2 {
		name, _ := pflag.UnquoteUsage(f)
		return name
	}
	if complete, ok := c.GetFlagCompletionFunc(f.Name); ok {
		if values, _ := complete(c, nil, ""); len(values) > 0 {
			return strings.Join(values, "|")
		}
	}
	if strings.HasPrefix(typ, "int") || strings.HasPrefix(typ, "uint") {
		return "N"
	}
	return strings.ToUpper(f.Name[strings.LastIndex(f.Name, "-")+1:])
}

// writeWrapped writes head followed by words, wrapping before a word that
// would pass width; continuation lines are indented to head's width.
func writeWrapped(b *strings.Builder, head string, words []string, width int) {
	line := head
	indent := strings.Repeat(" ", len(head))
	for _, w := range words {
		if len(line)+1+len(w) > width && line != head && line != indent {
			b.WriteString(strings.TrimRight(line, " ") + "\n")
			line = indent
		}
		line += " " + w
	}
	b.WriteString(strings.TrimRight(line, " ") + "\n")
}
