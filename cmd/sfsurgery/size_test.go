package main

import "testing"

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"5GB", 5e9, true}, {"500MiB", 500 << 20, true}, {"1.5G", 1.5e9, true},
		{"4096", 4096, true}, {" 2 GiB ", 2 << 30, true}, {"10KB", 10000, true},
		{"", 0, false}, {"-1GB", 0, false}, {"0", 0, false}, {"GB", 0, false}, {"5XB", 0, false},
		{"1e30", 0, false},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
