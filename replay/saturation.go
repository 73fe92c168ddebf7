package replay

import (
	"slices"

	"gonum.org/v1/gonum/stat/distuv"
)

// saturatedBy reports whether lateness (ns) shows a client slower than
// limitNs: the order statistic that bounds its p99 from below with 95%
// confidence (one-sided, binomial) exceeds the limit. With few requests
// the p99 is the largest lateness, and one hiccup of the host would
// otherwise call the whole run client-saturated; with many, the bound is
// a little below the p99.
func saturatedBy(lateness []int64, limitNs int64) bool {
	n := len(lateness)
	if n == 0 {
		return false
	}
	k := p99LowerRank(n)
	if k == 0 {
		return false // too few requests to bound the p99 from below
	}
	s := slices.Clone(lateness)
	slices.Sort(s)
	return s[k-1] > limitNs
}

// p99LowerRank is the rank k (1-based) of the order statistic X_(k) with
// P(X_(k) ≤ p99) ≥ 0.95: one more than the largest j with
// P(Binomial(n, 0.99) ≤ j) ≤ 0.05, or 0 when there is none.
func p99LowerRank(n int) int {
	b := distuv.Binomial{N: float64(n), P: 0.99}
	k := 0
	for j := n - 1; j >= 0; j-- {
		if b.CDF(float64(j)) <= 0.05 {
			k = j + 1
			break
		}
	}
	return k
}
