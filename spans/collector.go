package spans

import (
	"context"
	"encoding/hex"
	"io"
	"sort"
	"sync"

	"github.com/servetrace/servetrace/internal/traceid"
	"github.com/servetrace/servetrace/trace"
)

// Counts says what became of the spans a collector was given.
type Counts = trace.SpanCounts

// MaxKeptFileBytes bounds what a collector writes of the spans it keeps
// (WriteKept): past it, a kept span still gives its phases but is not
// written, and is counted (Unwritten).
const MaxKeptFileBytes = 256 << 20

// Collector keeps the request spans of one run: those whose trace id is
// the id of a request the run sent (Expect), at most one per request and
// at most limit in all, so what it holds is bounded by the requests the
// run sent whatever a server or an attacker exports to it: the run's half
// of the trace id is in every request it sends, but a request's half
// cannot be made up. It is safe for concurrent use.
type Collector struct {
	runID string
	run   [8]byte
	limit int

	// expected holds the request halves of the trace ids of the requests
	// the run sent, under its own lock: the run adds to it as it sends.
	expMu    sync.Mutex
	expected map[[8]byte]struct{}

	mu        sync.Mutex
	sink      io.Writer // the kept spans as OTLP/JSON lines; nil: not written
	sinkErr   error     // the sink's first write error
	written   int64     // bytes written to sink
	maxWrite  int64     // MaxKeptFileBytes; tests lower it
	unwritten int64     // kept spans not written: MaxKeptFileBytes reached
	dropped   int64     // attributes, events and links of kept spans not kept
	kept      map[traceid.ID]trace.ServerPhases
	counts    Counts
	changed   chan struct{} // closed and replaced when a span is kept
}

// NewCollector returns a collector of run runID's spans, holding at most
// limit (at least 1). It keeps no span until the requests they belong to
// are named (Expect).
func NewCollector(runID string, limit int) *Collector {
	return &Collector{runID: runID, run: traceid.Run(runID), limit: max(limit, 1), kept: map[traceid.ID]trace.ServerPhases{},
		expected: map[[8]byte]struct{}{}, maxWrite: MaxKeptFileBytes, changed: make(chan struct{}), counts: Counts{Invalid: map[string]int64{}}}
}

// Expect names a request the run sent (its workload id, as its
// traceparent names it): its span may be kept. At most limit requests are
// held.
func (c *Collector) Expect(requestID string) {
	id := traceid.For(c.runID, requestID)
	c.expMu.Lock()
	if len(c.expected) < c.limit {
		c.expected[[8]byte(id[8:])] = struct{}{}
	}
	c.expMu.Unlock()
}

// expects reports whether id names a request the run sent.
func (c *Collector) expects(id traceid.ID) bool {
	c.expMu.Lock()
	_, ok := c.expected[[8]byte(id[8:])]
	c.expMu.Unlock()
	return ok
}

// WriteKept makes the collector write every span it keeps to w, an
// OTLP/JSON line each (keptLine), as the collector's file exporter writes
// exports, up to MaxKeptFileBytes. Writes happen under the collector's
// lock.
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

// Unwritten returns how many kept spans were not written because the
// kept spans' file reached MaxKeptFileBytes.
func (c *Collector) Unwritten() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unwritten
}

// Dropped returns how many attributes, events and links of the kept
// spans were not kept (nor written): only llm_request's own attributes
// are.
func (c *Collector) Dropped() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// addProto takes the spans of one protobuf export; addJSON of one
// OTLP/JSON export. Each returns how many spans the export held; one
// that does not parse is an error, its spans before the fault taken.
func (c *Collector) addProto(b []byte) (int64, error) { return c.add(b, walkProto) }
func (c *Collector) addJSON(b []byte) (int64, error)  { return c.add(b, walkJSON) }

// add walks one export's spans, judging each as it is read.
func (c *Collector) add(b []byte, walk func([]byte, func(*spanRecord)) error) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept, spans := c.counts.Kept, c.counts.Spans
	err := walk(b, c.keep)
	if c.counts.Kept != kept {
		close(c.changed)
		c.changed = make(chan struct{})
	}
	return c.counts.Spans - spans, err
}

// keep counts one span and keeps its phases if it is a request span of a
// request the run sent, valid, not a second one for its request, and
// within the limit. c.mu is held.
func (c *Collector) keep(rec *spanRecord) {
	c.counts.Spans++
	if !rec.isRequestSpan() {
		c.counts.NotRequests++
		return
	}
	raw := rec.traceID.bytes()
	if len(raw) != 16 || [8]byte(raw[:8]) != c.run {
		c.counts.OtherRuns++
		return
	}
	id := traceid.ID(raw)
	if !c.expects(id) {
		c.counts.UnknownRequests++
		return
	}
	if _, dup := c.kept[id]; dup {
		c.counts.Duplicates++
		return
	}
	p, bad := rec.phases(hex.EncodeToString(raw))
	if bad != "" {
		c.countInvalid(bad)
		return
	}
	if len(c.kept) >= c.limit {
		c.counts.OverLimit++
		return
	}
	c.kept[id] = p
	c.counts.Kept++
	c.dropped += rec.dropped
	c.write(rec)
}

// write writes a kept span to the sink, if any, within MaxKeptFileBytes.
// c.mu is held.
func (c *Collector) write(rec *spanRecord) {
	if c.sink == nil || c.sinkErr != nil {
		return
	}
	line, err := keptLine(rec)
	if err == nil && c.written+int64(len(line)) > c.maxWrite {
		c.unwritten++
		return
	}
	if err == nil {
		_, err = c.sink.Write(line)
	}
	c.written += int64(len(line))
	c.sinkErr = err
}

// clipKey bounds a reason kept as a map key, so reasons cannot grow the
// counts without bound.
// maxInvalidReasons bounds the distinct reasons Counts.Invalid holds: a
// reason may quote the value at fault, so a sender could otherwise make
// one key per span; the rest are counted as otherReasons.
const maxInvalidReasons = 32

// otherReasons counts invalid spans past maxInvalidReasons reasons.
const otherReasons = "(other reasons)"

// countInvalid counts a span dropped for reason. c.mu is held.
func (c *Collector) countInvalid(reason string) {
	k := clipKey(reason)
	if _, ok := c.counts.Invalid[k]; !ok && len(c.counts.Invalid) >= maxInvalidReasons {
		k = otherReasons
	}
	c.counts.Invalid[k]++
}

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
