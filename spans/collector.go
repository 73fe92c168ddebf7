package spans

import (
	"context"
	"encoding/hex"
	"io"
	"sort"
	"sync"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/servetrace/servetrace/internal/traceid"
	"github.com/servetrace/servetrace/trace"
)

// Counts says what became of the spans a collector was given.
type Counts = trace.SpanCounts

// Collector keeps the request spans of one run: those whose trace id
// starts with the run's half (traceid.Run), at most one per trace id and
// at most limit in all, so what it holds is bounded by the requests the
// run sent whatever a server or an attacker exports to it. It is safe for
// concurrent use.
type Collector struct {
	run   [8]byte
	limit int

	mu      sync.Mutex
	sink    io.Writer // the kept spans as OTLP/JSON lines; nil: not written
	sinkErr error     // the sink's first write error
	kept    map[traceid.ID]trace.ServerPhases
	counts  Counts
	changed chan struct{} // closed and replaced when a span is kept
}

// NewCollector returns a collector of run runID's spans, holding at most
// limit (at least 1).
func NewCollector(runID string, limit int) *Collector {
	return &Collector{run: traceid.Run(runID), limit: max(limit, 1), kept: map[traceid.ID]trace.ServerPhases{},
		changed: make(chan struct{}), counts: Counts{Invalid: map[string]int64{}}}
}

// WriteKept makes the collector write every span it keeps to w, an
// OTLP/JSON line per export (the kept spans only, under their resource
// and scope), as the collector's file exporter writes them, so the spans
// themselves stay with the run. Writes happen under the collector's lock.
func (c *Collector) WriteKept(w io.Writer) {
	c.mu.Lock()
	c.sink = w
	c.mu.Unlock()
}

// Err returns the first error writing the kept spans, if any.
func (c *Collector) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sinkErr
}

// SetLimit changes how many spans the collector may hold (the requests
// a run sent, once known).
func (c *Collector) SetLimit(limit int) {
	c.mu.Lock()
	c.limit = max(limit, 1)
	c.mu.Unlock()
}

// Add takes the spans of one OTLP export.
func (c *Collector) Add(req *coltracepb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	before := c.counts.Kept
	var keptMsg coltracepb.ExportTraceServiceRequest
	for _, rs := range req.GetResourceSpans() {
		var keptRS *tracepb.ResourceSpans
		for _, ss := range rs.GetScopeSpans() {
			var keptSS *tracepb.ScopeSpans
			for _, sp := range ss.GetSpans() {
				if !c.keep(sp) {
					continue
				}
				if c.sink == nil {
					continue
				}
				if keptSS == nil {
					keptSS = &tracepb.ScopeSpans{Scope: ss.GetScope(), SchemaUrl: ss.GetSchemaUrl()}
					if keptRS == nil {
						keptRS = &tracepb.ResourceSpans{Resource: rs.GetResource(), SchemaUrl: rs.GetSchemaUrl()}
						keptMsg.ResourceSpans = append(keptMsg.ResourceSpans, keptRS)
					}
					keptRS.ScopeSpans = append(keptRS.ScopeSpans, keptSS)
				}
				keptSS.Spans = append(keptSS.Spans, sp)
			}
		}
	}
	if c.counts.Kept == before {
		return
	}
	if c.sink != nil && c.sinkErr == nil {
		line, err := marshalJSON(&keptMsg)
		if err == nil {
			_, err = c.sink.Write(line)
		}
		c.sinkErr = err
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// keep counts one span and keeps its phases if it is a request span of
// the run, valid, not a second one for its request, and within the limit.
// c.mu is held.
func (c *Collector) keep(sp *tracepb.Span) bool {
	c.counts.Spans++
	if !isRequestSpan(sp) {
		c.counts.NotRequests++
		return false
	}
	raw := sp.GetTraceId()
	if len(raw) != 16 || [8]byte(raw[:8]) != c.run {
		c.counts.OtherRuns++
		return false
	}
	id := traceid.ID(raw)
	if _, dup := c.kept[id]; dup {
		c.counts.Duplicates++
		return false
	}
	p, bad := phasesOf(sp, hex.EncodeToString(raw))
	if bad != "" {
		c.counts.Invalid[clipKey(bad)]++
		return false
	}
	if len(c.kept) >= c.limit {
		c.counts.OverLimit++
		return false
	}
	c.kept[id] = p
	c.counts.Kept++
	return true
}

// clipKey bounds a reason kept as a map key, so reasons cannot grow the
// counts without bound.
func clipKey(s string) string {
	if len(s) > 80 {
		return s[:80]
	}
	return s
}

// Counts returns what became of the spans so far.
func (c *Collector) Counts() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.counts
	out.Invalid = make(map[string]int64, len(c.counts.Invalid))
	for k, v := range c.counts.Invalid {
		out.Invalid[k] = v
	}
	return out
}

// Phases returns the kept rows, ordered by trace id.
func (c *Collector) Phases() []trace.ServerPhases {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]trace.ServerPhases, 0, len(c.kept))
	for _, p := range c.kept {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TraceID < out[j].TraceID })
	return out
}

// WaitFor blocks until the collector holds the spans of n requests, or
// ctx ends; it reports whether n were reached. Engines export spans in
// batches seconds after a request ends (vLLM's BatchSpanProcessor), so a
// run waits a while for the last ones.
func (c *Collector) WaitFor(ctx context.Context, n int) bool {
	for {
		c.mu.Lock()
		have, ch := len(c.kept), c.changed
		c.mu.Unlock()
		if have >= n {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}
