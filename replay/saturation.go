package replay

import "gonum.org/v1/gonum/stat/distuv"

// saturatedBy reports whether lateness (ns) shows a client slower than
// limitNs: the order statistic that bounds its p99 from below with 95%
// confidence (one-sided, binomial) exceeds the limit. With few requests
// the p99 is the largest lateness, and one hiccup of the host would
// otherwise call the whole run client-saturated; with many, the bound is
// a little below the p99.
func saturatedBy(lateness *durationHist, limitNs int64) bool {
	if lateness.N() == 0 {
		return false
	}
	k := p99LowerRank(int(lateness.N()))
	if k == 0 {
		return false // too few requests to bound the p99 from below
	}
	return lateness.Kth(int64(k)) > limitNs
}

// p99LowerRank is the rank k (1-based) of the order statistic X_(k) with
// P(X_(k) ≤ p99) ≥ 0.95: one more than the largest j with
// P(Binomial(n, 0.99) ≤ j) ≤ 0.05, or 0 when there is none.
func p99LowerRank(n int) int {
	b := distuv.Binomial{N: float64(n), P: 0.99}
	// The CDF rises with j: search for the last j at or under 0.05, so a
	// day's run of millions of requests takes a few dozen evaluations.
	lo, hi := -1, n-1 // CDF(lo) ≤ 0.05 (lo = -1: none yet), CDF(hi+1…) > 0.05 unknown
	if b.CDF(float64(hi)) <= 0.05 {
		return n
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if b.CDF(float64(mid)) <= 0.05 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo + 1
}
