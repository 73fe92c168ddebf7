package replay

import "testing"

// TestSaturationNeedsMoreThanOneHiccup: the order-statistic rule against
// hand-computed ranks and samples with one and with several late requests.
func TestSaturationNeedsMoreThanOneHiccup(t *testing.T) {
	// P(Bin(29, 0.99) ≤ 27) = 1 − 0.99^29 − 29·0.99^28·0.01 = 0.0344 ≤ 0.05,
	// P(≤ 28) = 0.253: the bound is X_(28), the second largest.
	for _, c := range []struct{ n, want int }{{29, 28}, {5, 5}, {1, 1}, {100, 97}} {
		if got := p99LowerRank(c.n); got != c.want {
			t.Errorf("p99LowerRank(%d) = %d, want %d", c.n, got, c.want)
		}
	}
	const ms = int64(1e6)
	sample := func(n, late int) *durationHist {
		var h durationHist
		for i := range n {
			if i < late {
				h.Add(8 * ms)
			} else {
				h.Add(ms / 10)
			}
		}
		return &h
	}
	for _, c := range []struct {
		n, late int
		want    bool
	}{
		{29, 1, false}, // one hiccup in a short step
		{29, 2, true},  // the second largest is late too
		{384, 3, false},
		{384, 12, true}, // 3% late: beyond any p99
		{1, 1, true},
		{0, 0, false},
	} {
		if got := saturatedBy(sample(c.n, c.late), 5*ms); got != c.want {
			t.Errorf("%d of %d requests 8 ms late: saturated %v, want %v", c.late, c.n, got, c.want)
		}
	}
}
