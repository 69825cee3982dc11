package main

import (
	"runtime/debug"
	"testing"
)

func TestBuildVersion(t *testing.T) {
	const rev = "a3257d2e1f0c9b8a7d6e5f4a3b2c1d0e9f8a7b6c"
	vcs := func(rev, modified string) []debug.BuildSetting {
		s := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}}
		if rev != "" {
			s = append(s, debug.BuildSetting{Key: "vcs.revision", Value: rev})
		}
		if modified != "" {
			s = append(s, debug.BuildSetting{Key: "vcs.modified", Value: modified})
		}
		return s
	}
	tests := []struct {
		name     string
		version  string
		settings []debug.BuildSetting
		want     string
	}{
		{"tagged module", "v1.2.3", vcs(rev, "false"), "v1.2.3"},
		{"pseudo-version", "v0.0.0-20260102030405-a3257d2e1f0c+dirty", vcs(rev, "true"), "v0.0.0-20260102030405-a3257d2e1f0c+dirty"},
		{"devel, clean tree", "(devel)", vcs(rev, "false"), "a3257d2e1f0c"},
		{"devel, modified tree", "(devel)", vcs(rev, "true"), "a3257d2e1f0c-dirty"},
		{"no version, revision", "", vcs(rev, ""), "a3257d2e1f0c"},
		{"short revision", "(devel)", vcs("abc123", "true"), "abc123-dirty"},
		{"devel, no VCS", "(devel)", nil, "devel"},
		{"modified but no revision", "(devel)", vcs("", "true"), "devel"},
		{"nothing", "", nil, "devel"},
	}
	for _, tt := range tests {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/sfsurgery/sfsurgery", Version: tt.version}, Settings: tt.settings}
		if got := buildVersion(bi); got != tt.want {
			t.Errorf("%s: buildVersion = %q, want %q", tt.name, got, tt.want)
		}
	}
	if got := buildVersion(nil); got != "devel" {
		t.Errorf("buildVersion(nil) = %q, want devel", got)
	}
}
