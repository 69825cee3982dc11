package speed

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestReadReport reads a report back as written, and refuses what is not
// one report of this schema: another schema, a truncated file, anything
// after the document (a log line appended by a script), not JSON.
func TestReadReport(t *testing.T) {
	want := sampleReport()
	b, err := json.MarshalIndent(want, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadReport(bytes.NewReader(append(b, '\n')))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
	other := strings.Replace(string(b), ReportSchema, "sfsurgery-bench/0", 1)
	for name, in := range map[string]string{
		"schema":   other,
		"truncate": string(b[:len(b)/2]),
		"trailing": string(b) + "\n[13.8 s, exit 0] sfsurgery bench --json\n",
		"second":   string(b) + string(b),
		"empty":    "",
		"text":     "GPU NVIDIA H100\n",
	} {
		if _, err := ReadReport(strings.NewReader(in)); !errors.Is(err, ErrReport) {
			t.Errorf("%s: %v, want ErrReport", name, err)
		}
	}
}

// TestDocsReports reads every report committed in docs/ (the raw JSON
// beside each bench document), so that a malformed one cannot land.
func TestDocsReports(t *testing.T) {
	paths, err := filepath.Glob("../docs/*.json")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var head struct {
			Schema string `json:"schema"`
		}
		if err := json.Unmarshal(b, &head); err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if !strings.HasPrefix(head.Schema, "sfsurgery-bench/") {
			// Policies (PolicySchema) and the documents of the Python scripts (serving,
			// quality, host cost per call), which python/tests check.
			continue
		}
		rep, err := ReadReport(bytes.NewReader(b))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if len(rep.Rows) == 0 || len(rep.Shapes) == 0 {
			t.Errorf("%s: %d rows, %d shapes", p, len(rep.Rows), len(rep.Shapes))
		}
		n++
	}
	if n == 0 {
		t.Skip("no reports in ../docs")
	}
}

// FuzzReadReport: any input is read or refused with ErrReport, without a
// panic, and a report it reads survives a round trip.
func FuzzReadReport(f *testing.F) {
	b, err := json.Marshal(sampleReport())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"schema":"sfsurgery-bench/1","rows":[{"m":1}]}`))
	f.Add([]byte(`{"schema":"sfsurgery-bench/1"} x`))
	f.Fuzz(func(t *testing.T, in []byte) {
		rep, err := ReadReport(bytes.NewReader(in))
		if err != nil {
			if !errors.Is(err, ErrReport) {
				t.Fatalf("error %v is not ErrReport", err)
			}
			return
		}
		out, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ReadReport(bytes.NewReader(out)); err != nil {
			t.Fatalf("re-reading %s: %v", out, err)
		}
	})
}
