// Package loghist counts non-negative integers (nanoseconds, tokens) in
// log-linear bins of bounded relative width, so order statistics of any
// number of values take fixed memory: replay's lateness summaries and the
// streamed analysis of runs too long to hold use it.
package loghist

import (
	"math"
	"math/bits"
)

// Hist counts values in bins: exact below 2,048, then 1,024 bins per power
// of two, so a bin's upper edge is within RelErr of any value in it. The
// zero value is empty and ready to use.
type Hist struct {
	counts []int64
	n      int64
	max    int64
}

// RelErr bounds the relative error of an order statistic read from a
// Hist: the upper edge of a bin over its smallest value, less one.
const RelErr = 1.0 / subBins

const (
	exact    = 2048 // values below are their own bin
	subBins  = 1024 // bins per power of two above
	subShift = 10   // log2(subBins)
)

// Bin is the bin of v ≥ 0.
func Bin(v int64) int {
	if v < exact {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - subShift - 1 // ≥ 1
	m := v >> e                               // in [1024, 2048)
	return exact + (e-1)*subBins + int(m-subBins)
}

// Upper is the largest value of bin i.
func Upper(i int) int64 {
	if i < exact {
		return int64(i)
	}
	e := (i-exact)/subBins + 1
	m := int64((i-exact)%subBins + subBins)
	return (m+1)<<e - 1
}

// Add counts v; a negative v counts as 0.
func (h *Hist) Add(v int64) { h.AddN(v, 1) }

// AddN counts v c times; a negative v counts as 0.
func (h *Hist) AddN(v int64, c int64) {
	v = max(v, 0)
	i := Bin(v)
	if i >= len(h.counts) {
		h.counts = append(h.counts, make([]int64, i+1-len(h.counts))...)
	}
	h.counts[i] += c
	h.n += c
	h.max = max(h.max, v)
}

// Merge adds o's counts to h.
func (h *Hist) Merge(o *Hist) {
	if len(o.counts) > len(h.counts) {
		h.counts = append(h.counts, make([]int64, len(o.counts)-len(h.counts))...)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// N is how many values were counted.
func (h *Hist) N() int64 { return h.n }

// Max is the largest value counted, exactly (0 when empty).
func (h *Hist) Max() int64 { return h.max }

// Kth returns the k-th smallest value (1-based) to within its bin: the
// bin's upper edge, never above the largest value counted.
func (h *Hist) Kth(k int64) int64 {
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= k {
			return min(Upper(i), h.max)
		}
	}
	return h.max
}

// AtOrBelow counts the values in the bins up to and including v's: the
// values at or below v, give or take those sharing v's bin.
func (h *Hist) AtOrBelow(v int64) int64 {
	last := min(Bin(max(v, 0)), len(h.counts)-1)
	var seen int64
	for _, c := range h.counts[:last+1] {
		seen += c
	}
	return seen
}

// Quantile is the p-quantile (0 ≤ p ≤ 1) by linear interpolation between
// order statistics, Hyndman–Fan type 7 as internal/rank computes it on a
// sorted sample, each order statistic read to within its bin. It returns
// NaN for an empty Hist.
func (h *Hist) Quantile(p float64) float64 {
	if h.n == 0 {
		return math.NaN()
	}
	pos := p * float64(h.n-1) // 0-based
	lo := int64(math.Floor(pos))
	if lo >= h.n-1 {
		return float64(h.max)
	}
	a, b := float64(h.Kth(lo+1)), float64(h.Kth(lo+2))
	return a + (pos-float64(lo))*(b-a)
}
