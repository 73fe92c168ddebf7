package replay

import (
	"github.com/servetrace/servetrace/internal/loghist"
	"github.com/servetrace/servetrace/trace"
)

// durationHist counts durations (ns) in fixed memory (loghist: within 0.1%),
// so a run's lateness summaries do not grow with the requests it sends.
type durationHist = loghist.Hist

// summarizeLateness gives nearest-rank p50 and p99 (to the bins' 0.1%) and
// the exact maximum: lateness is a guard rail, not a reported metric.
func summarizeLateness(h *durationHist) trace.LatenessSummary {
	n := h.N()
	if n == 0 {
		return trace.LatenessSummary{}
	}
	at := func(p float64) float64 {
		k := int64(p*float64(n) + 0.999999)
		return float64(h.Kth(max(1, min(k, n)))) / 1e6
	}
	return trace.LatenessSummary{P50Ms: at(0.50), P99Ms: at(0.99), MaxMs: float64(h.Max()) / 1e6}
}
