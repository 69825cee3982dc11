package launchplan

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestParseLimits: names (any case), JSON objects of all four fields, and
// every refusal.
func TestParseLimits(t *testing.T) {
	h200 := KnownLimits()["h200"]
	for _, tc := range []struct {
		in   string
		want Limits
		desc string
	}{
		{"h200", h200, "h200 (named limits)"},
		{"A100", KnownLimits()["a100"], "a100 (named limits)"},
		{`{"sms":132,"shared_per_block":232448,"shared_per_sm":233472,"warpgroup":true}`, h200, "given limits"},
		{` {"warpgroup":false,"sms":58,"shared_per_sm":102400,"shared_per_block":101376} `, KnownLimits()["l4"], "given limits"},
	} {
		got, desc, err := ParseLimits(tc.in)
		if err != nil || got != tc.want || desc != tc.desc {
			t.Errorf("ParseLimits(%q) = %+v, %q, %v; want %+v, %q", tc.in, got, desc, err, tc.want, tc.desc)
		}
	}
	for _, in := range []string{
		"", "v100", "sms=132",
		`{"sms":132,"shared_per_block":232448,"shared_per_sm":233472}`,
		`{"sms":132,"shared_per_block":232448,"shared_per_sm":233472,"warpgroup":true,"x":1}`,
		`{"sms":0,"shared_per_block":232448,"shared_per_sm":233472,"warpgroup":true}`,
		`{"sms":-1,"shared_per_block":232448,"shared_per_sm":233472,"warpgroup":true}`,
		`{"sms":132,"shared_per_block":233473,"shared_per_sm":233472,"warpgroup":true}`,
		`{"sms":132,"shared_per_block":232448,"shared_per_sm":99999999999,"warpgroup":true}`,
		`{"sms":1.5,"shared_per_block":232448,"shared_per_sm":233472,"warpgroup":true}`,
		`{"sms":132,"shared_per_block":232448,"shared_per_sm":233472,"warpgroup":"yes"}`,
		`{"sms":132,"shared_per_block":232448,"shared_per_sm":233472,"warpgroup":true}{}`,
		`{"sms":132`,
	} {
		if _, _, err := ParseLimits(in); !errors.Is(err, ErrLimits) {
			t.Errorf("ParseLimits(%q): %v; want ErrLimits", in, err)
		}
	}
}

// FuzzParseLimits: no input panics; accepted limits are within bounds and
// their JSON reads back as the same limits.
func FuzzParseLimits(f *testing.F) {
	f.Add("h100")
	f.Add(`{"sms":132,"shared_per_block":232448,"shared_per_sm":233472,"warpgroup":true}`)
	f.Fuzz(func(t *testing.T, s string) {
		lim, _, err := ParseLimits(s)
		if err != nil {
			if !errors.Is(err, ErrLimits) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q: want one line wrapping ErrLimits", err)
			}
			return
		}
		if lim.SMs < 1 || lim.SMs > maxSMs || lim.SharedPerBlock < 1 || lim.SharedPerBlock > lim.SharedPerSM || lim.SharedPerSM > maxSharedPerSM {
			t.Fatalf("accepted %+v", lim)
		}
		b, _ := json.Marshal(lim)
		if back, _, err := ParseLimits(string(b)); err != nil || back != lim {
			t.Fatalf("%s reads back as %+v, %v", b, back, err)
		}
	})
}
