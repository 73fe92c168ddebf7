package replay

import (
	"math/bits"

	"github.com/servetrace/servetrace/trace"
)

// durationHist counts non-negative durations (ns) in log-linear bins:
// exact below 2,048 ns, then 1,024 bins per power of two, so a bin's upper
// edge is within 0.1% of any value in it. A run's lateness summaries take
// fixed memory however many requests it sends.
type durationHist struct {
	counts []int64
	n      int64
	max    int64
}

const (
	histExact    = 2048 // values below are their own bin
	histSubBins  = 1024 // bins per power of two above
	histSubShift = 10   // log2(histSubBins)
)

// histBin is the bin of v ≥ 0.
func histBin(v int64) int {
	if v < histExact {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - histSubShift - 1 // ≥ 1
	m := v >> e                                   // in [1024, 2048)
	return histExact + (e-1)*histSubBins + int(m-histSubBins)
}

// histUpper is the largest value of bin i.
func histUpper(i int) int64 {
	if i < histExact {
		return int64(i)
	}
	e := (i-histExact)/histSubBins + 1
	m := int64((i-histExact)%histSubBins + histSubBins)
	return (m+1)<<e - 1
}

// add counts v; a negative v counts as 0.
func (h *durationHist) add(v int64) {
	v = max(v, 0)
	i := histBin(v)
	if i >= len(h.counts) {
		h.counts = append(h.counts, make([]int64, i+1-len(h.counts))...)
	}
	h.counts[i]++
	h.n++
	h.max = max(h.max, v)
}

// kth returns the k-th smallest value (1-based) to within its bin: the
// bin's upper edge, never above the largest value counted.
func (h *durationHist) kth(k int64) int64 {
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= k {
			return min(histUpper(i), h.max)
		}
	}
	return h.max
}

// summarizeLateness gives nearest-rank p50 and p99 (to the bins' 0.1%) and
// the exact maximum: lateness is a guard rail, not a reported metric.
func summarizeLateness(h *durationHist) trace.LatenessSummary {
	if h.n == 0 {
		return trace.LatenessSummary{}
	}
	at := func(p float64) float64 {
		k := int64(p*float64(h.n) + 0.999999)
		return float64(h.kth(max(1, min(k, h.n)))) / 1e6
	}
	return trace.LatenessSummary{P50Ms: at(0.50), P99Ms: at(0.99), MaxMs: float64(h.max) / 1e6}
}
