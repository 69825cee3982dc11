package prune24

// Stats sums element magnitudes over what a prune saw: Kept is Σ|x| over
// the elements it kept and Total is Σ|x| over all elements, both as
// float64. An infinite element makes the sums infinite.
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
