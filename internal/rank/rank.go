// Package rank computes rank statistics shared by the fitter and the
// analysis: average ranks with ties, and Spearman's rank correlation.
package rank

import (
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
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case x[a] < x[b]:
			return -1
		case x[a] > x[b]:
			return 1
		}
		return 0
	})
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
