package speed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
)

// TestParseMs checks the token-count lists bench accepts and refuses.
func TestParseMs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"1", []int{1}},
		{"1,16, 64,,4096", []int{1, 16, 64, 4096}},
		{"1048576", []int{MaxTokens}},
		{"", nil},
		{",", nil},
		{"0", nil},
		{"-1", nil},
		{"1,x", nil},
		{"1048577", nil},
		{"1.5", nil},
		{"1-4", []int{1, 2, 3, 4}},
		{"1-2, 8 ,16-16", []int{1, 2, 8, 16}},
		{"4-1", nil},
		{"-3", nil},
		{"1-", nil},
		{"1-x", nil},
		{"1-5000", nil},
	} {
		got, err := ParseMs(tc.in)
		if tc.want == nil {
			if !errors.Is(err, ErrParse) {
				t.Errorf("ParseMs(%q) = %v, %v; want ErrParse", tc.in, got, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseMs(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// FuzzParseMs checks that ParseMs never panics and returns only token
// counts in range, as many as the input has numbers.
func FuzzParseMs(f *testing.F) {
	for _, s := range []string{"1,16,64", "", "0", "1,,2", " 7 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ms, err := ParseMs(s)
		if err != nil {
			return
		}
		if len(ms) == 0 || len(ms) > maxListed {
			t.Fatalf("%q: %d token counts", s, len(ms))
		}
		for _, m := range ms {
			if m < 1 || m > MaxTokens {
				t.Fatalf("%q: token count %d out of range", s, m)
			}
		}
	})
}

// TestParseDType checks the element types a measurement takes.
func TestParseDType(t *testing.T) {
	for in, want := range map[string]checkpoint.DType{"bf16": checkpoint.BF16, "BF16": checkpoint.BF16, "f16": checkpoint.F16, "fp16": checkpoint.F16} {
		if got, err := ParseDType(in); err != nil || got != want {
			t.Errorf("ParseDType(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "f32", "int8", "bf"} {
		if _, err := ParseDType(in); !errors.Is(err, ErrParse) {
			t.Errorf("ParseDType(%q) = %v, want ErrParse", in, err)
		}
	}
}

// TestParseOutput checks the output types a measurement of each data
// type takes: float32, or its own type.
func TestParseOutput(t *testing.T) {
	for _, c := range []struct {
		in   string
		dt   checkpoint.DType
		want checkpoint.DType
	}{
		{"f32", checkpoint.BF16, checkpoint.F32}, {"FP32", checkpoint.F16, checkpoint.F32},
		{"bf16", checkpoint.BF16, checkpoint.BF16}, {"BF16", checkpoint.BF16, checkpoint.BF16},
		{"f16", checkpoint.F16, checkpoint.F16}, {"fp16", checkpoint.F16, checkpoint.F16},
	} {
		if got, err := ParseOutput(c.in, c.dt); err != nil || got != c.want {
			t.Errorf("ParseOutput(%q, %v) = %q, %v; want %q", c.in, c.dt, got, err, c.want)
		}
	}
	for _, c := range []struct {
		in string
		dt checkpoint.DType
	}{{"f16", checkpoint.BF16}, {"bf16", checkpoint.F16}, {"", checkpoint.BF16}, {"int8", checkpoint.BF16}, {"f64", checkpoint.F16}} {
		if _, err := ParseOutput(c.in, c.dt); !errors.Is(err, ErrParse) {
			t.Errorf("ParseOutput(%q, %v) = %v, want ErrParse", c.in, c.dt, err)
		}
	}
}

// TestReportPolicyOnePlace checks that the policy file and the Markdown
// document carry the policy Report.Policy derives, and that it is the
// rows' policy at the report's threshold.
func TestReportPolicyOnePlace(t *testing.T) {
	rep := sampleReport()
	want := NewPolicy(rep, DerivePolicy(rep.Shapes, rep.Rows, rep.Method.MinSpeedup))
	if got := rep.Policy(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Policy() = %+v, want %+v", got, want)
	}
	dir := t.TempDir()
	d := Documents{Policy: filepath.Join(dir, "p.json"), Markdown: filepath.Join(dir, "r.md")}
	if err := d.Write(context.Background(), rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(d.Policy)
	if err != nil {
		t.Fatal(err)
	}
	var got Policy
	if err := json.Unmarshal(b, &got); err != nil || !reflect.DeepEqual(&got, want) {
		t.Errorf("policy file = %+v (%v), want %+v", got, err, want)
	}
	md, err := os.ReadFile(d.Markdown)
	if err != nil {
		t.Fatal(err)
	}
	ranges := 0
	for _, e := range want.Entries {
		for _, r := range e.Sparse {
			ranges++
			line := fmt.Sprintf("M %d–%d: %s (%.2fx)", r.MinM, r.MaxM, r.Backend, r.Speedup)
			if !strings.Contains(string(md), line) {
				t.Errorf("the Markdown document lacks the policy's range %q", line)
			}
		}
	}
	if ranges == 0 {
		t.Fatal("the sample report's policy has no sparse range to look for")
	}
}
