// Package rank computes rank and order statistics shared by the fitter and
// the analysis: average ranks with ties, Spearman's rank correlation, the
// type-7 percentile of sorted data (and of unsorted data, by selection) and
// the two-sample Kolmogorov–Smirnov distance.
package rank

import (
	"cmp"
	"math"
	"slices"

	"gonum.org/v1/gonum/stat"
)

// Average returns the 1-based ranks of x, ties sharing their average rank.
func Average(x []float64) []float64 {
	idx := make([]int, len(x))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(x[a], x[b]) })
	r := make([]float64, len(x))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && x[idx[j+1]] == x[idx[i]] {
			j++
		}
		avg := float64(i+j)/2 + 1
		for k := i; k <= j; k++ {
			r[idx[k]] = avg
		}
		i = j + 1
	}
	return r
}

// Spearman is the rank correlation of paired samples (average ranks for
// ties); 0 where it is undefined (a constant sample).
func Spearman(x, y []float64) float64 {
	c := stat.Correlation(Average(x), Average(y), nil)
	if math.IsNaN(c) {
		return 0
	}
	return c
}

// Percentile returns the p-quantile (0 ≤ p ≤ 1) of sorted data by linear
// interpolation between order statistics: Hyndman–Fan type 7, numpy's and
// R's default (on [1 2 3 4] the median is 2.5). It returns NaN for no data.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if n == 1 {
		return sorted[0]
	}
	h := p * float64(n-1)
	lo := int(math.Floor(h))
	if lo >= n-1 {
		return sorted[n-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// KS is the two-sample Kolmogorov–Smirnov distance: the largest gap between
// the empirical CDFs of a and b, compared after each distinct value (ties
// exact). The inputs are not modified; it is 0 when either is empty.
func KS[T cmp.Ordered](a, b []T) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	var i, j int
	d := 0.0
	// Once one side is exhausted its CDF is 1 and the gap only shrinks.
	for i < len(a) && j < len(b) {
		v := min(a[i], b[j])
		for i < len(a) && a[i] == v {
			i++
		}
		for j < len(b) && b[j] == v {
			j++
		}
		d = max(d, math.Abs(float64(i)/float64(len(a))-float64(j)/float64(len(b))))
	}
	return d
}
