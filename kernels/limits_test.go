package kernels

import (
	"strings"
	"testing"

	"github.com/sfsurgery/sfsurgery/kernels/launchplan"
)

// TestKnownLimitsH100 checks launchplan's named limits against the device
// at hand where it is one of them (an H100 or H200 SXM, 132 SMs): plans
// made offline for "h100" are the plans SparseMatmul makes there. It
// skips on other devices and without a GPU.
func TestKnownLimitsH100(t *testing.T) {
	d := openGPU(t)
	info := d.Info()
	if !(strings.Contains(info.Name, "H100") || strings.Contains(info.Name, "H200")) || info.SMs != 132 {
		t.Skipf("%s is not an H100 or H200 SXM", info)
	}
	if got, want := d.Limits(), launchplan.KnownLimits()["h100"]; got != want {
		t.Errorf("%s: Limits() = %+v, launchplan.KnownLimits()[\"h100\"] = %+v", info, got, want)
	}
}
