package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
	"github.com/sfsurgery/sfsurgery/speed"
)

// TestPlanRecords runs plan for the Llama-3-8B shapes on named H100
// limits: a record for every shape and M = 1…64, each the record of
// launchplan's choice for that shape, M and dtype.
func TestPlanRecords(t *testing.T) {
	code, out, errs := sfs(t, "plan", "--shapes", "llama3-8b", "--limits", "h100", "--dtype", "f16", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var l speed.Launches
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatal(err)
	}
	lim := launchplan.KnownLimits()["h100"]
	if l.Schema != speed.LaunchesSchema || l.Limits != lim || l.DType != "F16" || len(l.Shapes) != 4 {
		t.Fatalf("schema %q, limits %+v, dtype %q, %d shapes", l.Schema, l.Limits, l.DType, len(l.Shapes))
	}
	for _, s := range l.Shapes {
		if len(s.Launches) != 64 {
			t.Errorf("%s: %d launches, want 64", s.Label(), len(s.Launches))
		}
		for _, at := range s.Launches {
			p, err := launchplan.Choose(at.M, s.N, s.K, lim, launchplan.Options{})
			if err != nil {
				t.Fatal(err)
			}
			want, err := p.Launch(checkpoint.F16, at.M, s.N, s.K)
			if err != nil {
				t.Fatal(err)
			}
			if at.Launch == nil || !reflect.DeepEqual(*at.Launch, want) || at.Plan != p.String() {
				t.Errorf("%s M=%d: record %+v, want %+v", s.Label(), at.M, at.Launch, want)
			}
		}
	}
	code, text, _ := sfs(t, "plan", "--shapes", "4096x4096", "--limits", "a100", "--m", "1-2")
	if code != exitOK || !strings.Contains(text, "gemv_bf16_t1_s") || strings.Count(text, "\n") != 5 {
		t.Errorf("text: exit %d:\n%s", code, text)
	}
}

// TestPlanErrors checks plan's refusals: one line, exit 2.
func TestPlanErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--shapes", "llama3-8b", "--limits", "h100", "--m", "65"}, "above 64"},
		{[]string{"--shapes", "llama3-8b", "--limits", "v100"}, "--limits"},
		{[]string{"--shapes", "llama3-8b", "--limits", "h100", "--dtype", "f32"}, "--dtype"},
		{[]string{"--limits", "h100"}, "give a checkpoint or --shapes"},
		{[]string{"--shapes", "llama3-8b", "--gpu-name", "NVIDIA H200"}, "--gpu-name names the GPU that --limits describe"},
		{[]string{"--shapes", "llama3-8b", "--limits", `{"sms":132}`}, "--limits: not device limits: want all of"},
	} {
		code, _, errs := sfs(t, append([]string{"plan"}, tc.args...)...)
		if code != exitError || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.want) {
			t.Errorf("plan %v: exit %d, stderr %q; want %q", tc.args, code, errs, tc.want)
		}
	}
}

// TestPlanNeedsGPUOrLimits checks that plan without --limits on a machine
// without a GPU says what to do in one line. It skips where a GPU opens.
func TestPlanNeedsGPUOrLimits(t *testing.T) {
	code, _, errs := sfs(t, "plan", "--shapes", "llama3-8b", "--m", "1")
	if code == exitOK {
		t.Skip("a GPU is present: plan planned for it")
	}
	if code != exitError || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "--limits") {
		t.Errorf("exit %d, stderr %q; want one line naming --limits", code, errs)
	}
}

// TestPlanFrom runs plan --from on a document plan wrote: the same
// records come back; the same document with one record changed is
// refused in one line naming the file, the shape, m and the field, and
// prints nothing.
func TestPlanFrom(t *testing.T) {
	dir := t.TempDir()
	args := []string{"plan", "--shapes", "llama3-8b", "--fuse", "--limits", "h100", "--json"}
	code, out, errs := sfs(t, args...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	file := filepath.Join(dir, "launches.json")
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	code, again, errs := sfs(t, append(args, "--from", file)...)
	if code != exitOK || again != out {
		t.Fatalf("plan --from its own output: exit %d, %s; output equal %v", code, errs, again == out)
	}

	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	grid := doc["shapes"].([]any)[1].(map[string]any)["launches"].([]any)[6].(map[string]any)["launch"].(map[string]any)["grid"].([]any)
	grid[0] = grid[0].(float64) * 2
	b, _ := json.Marshal(doc)
	tampered := filepath.Join(dir, "tampered.json")
	if err := os.WriteFile(tampered, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs = sfs(t, append(args, "--from", tampered)...)
	want := tampered + ": shapes[1] (4096x4096) m = 7: "
	if code != exitError || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, want) ||
		!strings.Contains(errs, "launch.grid is") || !strings.Contains(errs, "plan on this GPU instead") {
		t.Errorf("tampered: exit %d, stdout %d bytes, stderr %q; want one line naming %q and the grid", code, len(out), errs, want)
	}

	// The serving package gives its GPU's limits and name: the same records
	// as the named limits, and a policy's GPU compared with the name.
	given := []string{"plan", "--shapes", "llama3-8b", "--fuse", "--json", "--from", file, "--gpu-name", "NVIDIA H200",
		"--limits", `{"sms":132,"shared_per_block":232448,"shared_per_sm":233472,"warpgroup":true}`}
	code, out, errs = sfs(t, given...)
	var gl, nl speed.Launches
	if code != exitOK || json.Unmarshal([]byte(out), &gl) != nil || json.Unmarshal([]byte(again), &nl) != nil ||
		!reflect.DeepEqual(gl.Shapes, nl.Shapes) || gl.Device != "NVIDIA H200 (given limits)" {
		t.Errorf("given limits: exit %d, %s; device %q, records equal %v", code, errs, gl.Device, reflect.DeepEqual(gl.Shapes, nl.Shapes))
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", file, "--m", "1"}, "--m and --from"},
		{[]string{"--from", filepath.Join(dir, "none.json")}, "none.json"},
		{[]string{"--from", file, "--dtype", "f16"}, "records for BF16, the weights are F16"},
		{[]string{"--from", file, "--limits", "a100"}, "planned for h100"},
	} {
		a := []string{"plan", "--shapes", "llama3-8b", "--fuse", "--json"}
		if !slices.Contains(tc.args, "--limits") {
			a = append(a, "--limits", "h100")
		}
		code, _, errs := sfs(t, append(a, tc.args...)...)
		if code != exitError || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.want) {
			t.Errorf("plan %v: exit %d, stderr %q; want %q", tc.args, code, errs, tc.want)
		}
	}
}
