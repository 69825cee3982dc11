package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// pythonGolden is the launch document the Python package's CPU tests parse
// (python/tests/fixtures.py).
var pythonGolden = filepath.Join("..", "..", "python", "tests", "testdata", "launches-tiny-h100.json")

// TestPythonGoldenLaunches holds the Python package's golden launch
// document to what plan writes today for the tiny test checkpoint on H100
// limits, so that the package's parser is tested against the records the
// Go side executes. -update rewrites it.
func TestPythonGoldenLaunches(t *testing.T) {
	code, out, errs := sfs(t, "plan", filepath.Join("..", "..", "testdata", "tiny-llama-bf16"), "--limits", "h100", "--m", "1-4,8,17,64", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// The tool's version depends on the build; the golden says "sfsurgery".
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	doc["tool"] = json.RawMessage(`"sfsurgery"`)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", " ")
	if err := enc.Encode(doc); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(pythonGolden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, err := os.ReadFile(pythonGolden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, buf.Bytes()) {
		t.Errorf("%s differs from what plan writes (go test ./cmd/sfsurgery -run TestPythonGoldenLaunches -update rewrites it)", pythonGolden)
	}
}
