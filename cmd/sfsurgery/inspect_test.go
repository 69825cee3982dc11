package main

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// TestInspectJSONMetadata checks that inspect --json gives metadata
// values holding JSON objects as objects and other values as strings,
// on the output of prune in every format.
func TestInspectJSONMetadata(t *testing.T) {
	for _, format := range []string{"ampere", "bitmask", "dense"} {
		out := filepath.Join(t.TempDir(), format)
		if code, _, errs := sfs(t, "prune", testdataModel, "-o", out, "--format", format, "-q"); code != exitOK {
			t.Fatalf("prune --format %s: exit %d: %s", format, code, errs)
		}
		code, stdout, errs := sfs(t, "inspect", "--json", out)
		if code != exitOK {
			t.Fatalf("inspect --json %s: exit %d: %s", format, code, errs)
		}
		var got struct {
			Metadata map[string]any `json:"metadata"`
		}
		if err := json.Unmarshal([]byte(stdout), &got); err != nil {
			t.Fatalf("%s: %v\n%s", format, err, stdout)
		}
		rec, ok := got.Metadata["sfsurgery"].(map[string]any)
		if !ok {
			t.Fatalf("%s: metadata.sfsurgery is %T, want an object:\n%s", format, got.Metadata["sfsurgery"], stdout)
		}
		if rec["format"] != format || rec["version"] == nil {
			t.Errorf("%s: metadata.sfsurgery = %v, want its format and version", format, rec)
		}
		if v, ok := got.Metadata["format"].(string); !ok || v != "pt" {
			t.Errorf("%s: metadata.format = %#v, want the string \"pt\"", format, got.Metadata["format"])
		}
	}
}

func TestMetadataJSON(t *testing.T) {
	md := map[string]string{
		"obj":       `{"a": [1, 2], "b": {"c": null}}`,
		"spaced":    " \n{\"k\": 1} ",
		"broken":    `{"a": `,
		"array":     `[1, 2]`,
		"number":    `12`,
		"text":      "pt",
		"two":       `{} {}`,
		"empty":     "",
		"quoted":    `"x"`,
		"utf8 junk": "\xff{",
	}
	want := map[string]string{
		"obj":       `{"a":[1,2],"b":{"c":null}}`,
		"spaced":    `{"k":1}`,
		"broken":    `"{\"a\": "`,
		"array":     `"[1, 2]"`,
		"number":    `"12"`,
		"text":      `"pt"`,
		"two":       `"{} {}"`,
		"empty":     `""`,
		"quoted":    `"\"x\""`,
		"utf8 junk": `"\ufffd{"`,
	}
	b, err := json.Marshal(metadataJSON(md))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for k, w := range want {
		if string(got[k]) != w {
			t.Errorf("%q: %s, want %s", k, got[k], w)
		}
	}
}
