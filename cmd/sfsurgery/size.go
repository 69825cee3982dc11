package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sfsurgery/sfsurgery/surgery"
)

// parseSize reads a byte size such as "5GB", "500MiB", "1.5G" or "4096":
// decimal units (KB, MB, GB, TB; K, M, G, T) and binary ones (KiB, MiB,
// GiB, TiB), as Hugging Face's max_shard_size does.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mul    float64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"B", 1},
	}
	mul := 1.0
	for _, u := range units {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mul = strings.TrimSpace(rest), u.mul
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 || v*mul >= 1<<62 {
		return 0, fmt.Errorf("size %q: want a positive size such as 5GB or 500MiB", s)
	}
	return int64(v * mul), nil
}

// reshard applies --max-shard-size to a plan, when given.
func reshard(p *surgery.Plan, size string) error {
	if size == "" {
		return nil
	}
	n, err := parseSize(size)
	if err != nil {
		return fmt.Errorf("--max-shard-size: %w", err)
	}
	return p.Reshard(n)
}
