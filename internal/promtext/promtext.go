// Package promtext writes and reads Prometheus text exposition (version
// 0.0.4): it writes counters, gauges and fixed-bucket histograms with no
// client library, and reads any exposition line by line (read.go), the
// one reader every scrape servetrace takes goes through.
package promtext

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Histogram counts observations in fixed buckets (upper bounds, ascending).
// It is not safe for concurrent use; guard it with the owner's lock.
type Histogram struct {
	bounds []float64
	counts []uint64 // per bucket; the last is +Inf
	sum    float64
	n      uint64
}

// NewHistogram returns a histogram with the given ascending upper bounds.
func NewHistogram(bounds ...float64) Histogram {
	return Histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

// Observe adds one observation.
func (h *Histogram) Observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v)
	h.counts[i]++
	h.sum += v
	h.n++
}

// Clone returns an independent copy.
func (h *Histogram) Clone() Histogram {
	c := *h
	c.counts = slices.Clone(h.counts)
	return c
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 { return h.n }

// Labels renders label pairs as `k="v",...` in the given order; values are
// quoted as Go quotes strings, which Prometheus accepts for printable text.
func Labels(kv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", kv[i], kv[i+1])
	}
	return b.String()
}

// WriteHeader writes the HELP and TYPE lines of a metric family.
func WriteHeader(w io.Writer, name, typ, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// WriteSample writes one sample line.
func WriteSample(w io.Writer, name, labels string, v float64) {
	if labels == "" {
		fmt.Fprintf(w, "%s %g\n", name, v)
		return
	}
	fmt.Fprintf(w, "%s{%s} %g\n", name, labels, v)
}

// Write writes the histogram's samples (not its header) with the labels.
func (h *Histogram) Write(w io.Writer, name, labels string) {
	sep := ""
	if labels != "" {
		sep = ","
	}
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i]
		fmt.Fprintf(w, "%s_bucket{%s%sle=\"%g\"} %d\n", name, labels, sep, b, cum)
	}
	fmt.Fprintf(w, "%s_bucket{%s%sle=\"+Inf\"} %d\n", name, labels, sep, h.n)
	WriteSample(w, name+"_sum", labels, h.sum)
	WriteSample(w, name+"_count", labels, float64(h.n))
}
