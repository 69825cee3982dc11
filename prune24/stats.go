package prune24

// Stats sums element magnitudes over what a prune saw: Kept is Σ|x| over
// the elements it kept and Total is Σ|x| over all elements. An infinite
// element makes the sums infinite.
//
// The sums are a report statistic, computed cheaply: every magnitude is
// converted exactly, added up in float32 over at most 16 terms (the
// partial sums of 128 bytes of input), and those partial sums are added
// in float64. For n elements the relative error of either sum is
// therefore below 2^-20·(1+2^-19) + n·2^-53 (at most 1e-6 for n up to
// 2^27). Magnitudes from 2^121 on, which could overflow a float32 sum,
// are added in float64 only.
type Stats struct {
	Kept, Total float64
}

// Fraction returns Kept/Total, the share of the magnitude that survived.
// It returns 1 when Total is 0 (nothing to lose) or when Kept equals Total
// (including both infinite).
func (s Stats) Fraction() float64 {
	if s.Total == 0 || s.Kept == s.Total {
		return 1
	}
	return s.Kept / s.Total
}

// Add adds the sums of t to s, to combine the stats of several prunes.
func (s *Stats) Add(t Stats) {
	s.Kept += t.Kept
	s.Total += t.Total
}
