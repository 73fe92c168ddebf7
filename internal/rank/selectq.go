package rank

import (
	"math"
	"math/bits"
	"slices"
)

// Percentiles returns Percentile(sorted values, p) for each p of ps (in
// ascending order), without sorting values: it reorders them in place by
// selection, O(n) for each p instead of a sort's O(n log n), and the
// results equal what a sort gives (bit for bit but for the sign of a zero,
// which a sort does not order either). Values must hold no NaN.
func Percentiles(values []float64, ps []float64) []float64 {
	out := make([]float64, len(ps))
	n := len(values)
	if n == 0 {
		for i := range out {
			out[i] = math.NaN()
		}
		return out
	}
	from := 0 // values[:from] hold the order statistics below from, placed
	for i, p := range ps {
		if n == 1 {
			out[i] = values[0]
			continue
		}
		h := p * float64(n-1)
		lo := int(math.Floor(h))
		if lo >= n-1 {
			out[i] = slices.Max(values[from:])
			continue
		}
		if lo >= from {
			selectKth(values[from:], lo-from)
		}
		// Past the selection, values[lo+1:] are all at least values[lo]:
		// the next order statistic is their least.
		next := slices.Min(values[lo+1:])
		out[i] = values[lo] + (h-float64(lo))*(next-values[lo])
		from = lo + 1
	}
	return out
}

// selectKth reorders v so that v[k] is the value a sort would put there,
// with no larger value before it and no smaller one after. It is
// quickselect with a median-of-three pivot, falling back to a sort past
// 2·log2(n) rounds so that no input makes it quadratic.
func selectKth(v []float64, k int) {
	budget := 2 * bits.Len(uint(len(v)))
	lo, hi := 0, len(v)-1
	for hi > lo {
		if budget == 0 {
			slices.Sort(v[lo : hi+1])
			return
		}
		budget--
		mid := lo + (hi-lo)/2
		if v[mid] < v[lo] {
			v[mid], v[lo] = v[lo], v[mid]
		}
		if v[hi] < v[lo] {
			v[hi], v[lo] = v[lo], v[hi]
		}
		if v[hi] < v[mid] {
			v[hi], v[mid] = v[mid], v[hi]
		}
		pivot := v[mid]
		// Hoare partition: v[lo..j] ≤ pivot ≤ v[j+1..hi].
		i, j := lo-1, hi+1
		for {
			for i++; v[i] < pivot; i++ {
			}
			for j--; v[j] > pivot; j-- {
			}
			if i >= j {
				break
			}
			v[i], v[j] = v[j], v[i]
		}
		if k <= j {
			hi = j
		} else {
			lo = j + 1
		}
	}
}
