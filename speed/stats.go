package speed

import (
	"slices"
	"time"
)

// Summary is the spread of repeated timings.
type Summary struct {
	Median, Min, Max time.Duration
	Runs             int
	// Batch is the runs each timed replay of a CUDA graph held (the
	// times are per run); 1 or 0: every run timed on its own.
	Batch int
	// Note says why runs meant for a graph were timed one by one.
	Note string
}

// Summarize returns the median (the mean of the two middle values for an
// even count), minimum and maximum of ts; the zero Summary for none.
func Summarize(ts []time.Duration) Summary {
	if len(ts) == 0 {
		return Summary{}
	}
	s := slices.Clone(ts)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Summary{Median: med, Min: s[0], Max: s[n-1], Runs: n}
}

// us converts a duration to microseconds.
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
