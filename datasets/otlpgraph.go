package datasets

import (
	"cmp"
	"slices"
	"sort"
	"strings"

	"github.com/servetrace/servetrace/trace"
)

// otlpGraph turns the GenAI agent spans of an OTLP export into the agent
// graph (trace.Request.ParentIDs), following the semantic conventions'
// agent spans (gen-ai-agent-spans.md: invoke_agent around an agent's
// run, execute_tool around a tool's, chat around a model call, nested by
// parentSpanId). Within one agent's run its model calls form a chain, a
// call after a tool's run is a tool follow-up (tool_ms the wait), a
// sub-agent's first call follows the parent agent's call before it
// started, and the parent's first call after a sub-agent ended joins it.
//
// A trace's model calls are held until its root span (the one without a
// parent, which ends last and so is exported last) is read, or until the
// input ends, or until more than maxHeldSpans spans are held, when the
// oldest trace is linked with what is known of it.
//
// A span whose trace and span ids were read before (a collector's
// retried export writes its spans twice) is dropped, the first kept:
// those of traces held are found in them, those of the latest
// maxHeldSpans spans of traces released in released.
type otlpGraph struct {
	traces map[string]*otlpTrace
	// order lists trace ids oldest first from head on; an id no longer
	// held (or held anew, later) is skipped when met.
	order []string
	head  int
	spans int // spans held over all traces
	// released remembers the spans of traces already linked and written.
	released spanMemory
	// linked counts the calls written with parents; early the traces
	// linked before their root span was read; duplicates the spans
	// dropped as repeats.
	linked, early, duplicates int64
}

// spanMemory is a set of the latest span keys added, at most
// maxHeldSpans: a ring of keys and their set.
type spanMemory struct {
	ring []uint64
	next int
	set  map[uint64]struct{}
}

// add remembers key, forgetting the oldest once full.
func (m *spanMemory) add(key uint64) {
	if m.set == nil {
		m.set = map[uint64]struct{}{}
	}
	if _, ok := m.set[key]; ok {
		return
	}
	if len(m.ring) < maxHeldSpans {
		m.ring = append(m.ring, key)
	} else {
		delete(m.set, m.ring[m.next])
		m.ring[m.next] = key
		m.next = (m.next + 1) % maxHeldSpans
	}
	m.set[key] = struct{}{}
}

func (m *spanMemory) has(key uint64) bool {
	_, ok := m.set[key]
	return ok
}

// spanKey is a 64-bit FNV-1a hash of a span's trace and span ids (lower
// case), the key a released span is remembered by.
func spanKey(traceID, spanID string) uint64 {
	h := uint64(14695981039346656037)
	for _, s := range [...]string{traceID, "/", spanID} {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * 1099511628211
		}
	}
	return h
}

// otlpTrace is what is held of one trace.
type otlpTrace struct {
	spans map[string]otlpSpanInfo
	held  []heldRequest
}

// otlpSpanInfo is what linking needs of any span of a trace.
type otlpSpanInfo struct {
	parent     string
	op         string
	start, end int64 // µs
}

// heldRequest is a converted model call waiting for its trace's end.
type heldRequest struct {
	req    trace.Request
	endUs  int64
	spanID string
	line   int64
	logged bool
}

// maxHeldSpans bounds the spans held for linking.
const maxHeldSpans = 1 << 20

func newOTLPGraph() *otlpGraph { return &otlpGraph{traces: map[string]*otlpTrace{}} }

// note records a span of a trace; it reports whether it was the trace's
// root, which completes it, or a repeat of a span read before, which is
// to be dropped (and is counted).
func (g *otlpGraph) note(sp *otlpSpan) (root, repeat bool) {
	if sp.TraceID == "" || sp.SpanID == "" {
		return false, false
	}
	id, spanID := strings.ToLower(sp.TraceID), strings.ToLower(sp.SpanID)
	t := g.traces[id]
	if _, held := t.spanInfo(spanID); held || g.released.has(spanKey(id, spanID)) {
		g.duplicates++
		return false, true
	}
	if t == nil {
		t = &otlpTrace{spans: map[string]otlpSpanInfo{}}
		g.traces[id] = t
		g.order = append(g.order, id)
	}
	op, _, _ := sp.Attributes.str("gen_ai.operation.name")
	t.spans[spanID] = otlpSpanInfo{parent: strings.ToLower(sp.ParentSpanID), op: op,
		start: int64(min(sp.Start.v/1000, 1<<62)), end: int64(min(sp.End.v/1000, 1<<62))}
	g.spans++
	return sp.ParentSpanID == "", false
}

// spanInfo returns a held span of t (nil: none held).
func (t *otlpTrace) spanInfo(id string) (otlpSpanInfo, bool) {
	if t == nil {
		return otlpSpanInfo{}, false
	}
	s, ok := t.spans[id]
	return s, ok
}

// hold keeps a converted model call of a trace with more spans to come.
func (g *otlpGraph) hold(sp *otlpSpan, h heldRequest) {
	t := g.traces[strings.ToLower(sp.TraceID)]
	h.spanID = strings.ToLower(sp.SpanID)
	t.held = append(t.held, h)
}

// take removes trace id and returns its model calls, linked.
func (g *otlpGraph) take(id string) []heldRequest {
	t := g.traces[id]
	if t == nil {
		return nil
	}
	delete(g.traces, id)
	g.spans -= len(t.spans)
	for span := range t.spans {
		g.released.add(spanKey(id, span))
	}
	if len(g.order)-g.head > 2*len(g.traces)+1024 {
		// Most ids listed are of traces released: keep those still held.
		kept := g.order[:0]
		for _, id := range g.order[g.head:] {
			if _, ok := g.traces[id]; ok {
				kept = append(kept, id)
			}
		}
		g.order, g.head = kept, 0
	}
	g.link(t)
	return t.held
}

// next returns the oldest trace still held, or false.
func (g *otlpGraph) next() (string, bool) {
	for g.head < len(g.order) {
		id := g.order[g.head]
		g.head++
		if g.head > 1024 && g.head > len(g.order)/2 {
			g.order, g.head = append(g.order[:0], g.order[g.head:]...), 0
		}
		if _, ok := g.traces[id]; ok {
			return id, true
		}
	}
	return "", false
}

// oldest returns the oldest trace held while more than maxHeldSpans are.
func (g *otlpGraph) oldest() (string, bool) {
	if g.spans <= maxHeldSpans {
		return "", false
	}
	id, ok := g.next()
	if ok {
		g.early++
	}
	return id, ok
}

// agentIndex finds each span's agent run: the nearest invoke_agent span
// above it (itself excluded), or "" for none (no such span, a parent not
// in the trace, or a cycle of parents). Each span's answer is found once,
// so a trace of n spans takes O(n) to index however deep its nesting.
type agentIndex struct {
	spans map[string]otlpSpanInfo
	memo  map[string]string
}

func newAgentIndex(t *otlpTrace) *agentIndex {
	return &agentIndex{spans: t.spans, memo: make(map[string]string, len(t.spans))}
}

// of returns span's agent run.
func (x *agentIndex) of(span string) string {
	if a, ok := x.memo[span]; ok {
		return a
	}
	// Walk up until an answer is known: every span on the way shares it.
	var path []string
	onPath := map[string]bool{}
	agent, cur := "", span
	for {
		if a, ok := x.memo[cur]; ok {
			agent = a
			break
		}
		path = append(path, cur)
		onPath[cur] = true
		p := x.spans[cur].parent
		ps, ok := x.spans[p]
		if p == "" || !ok || onPath[p] {
			break
		}
		if ps.op == "invoke_agent" {
			agent = p
			break
		}
		cur = p
	}
	for _, id := range path {
		x.memo[id] = agent
	}
	return agent
}

// link sets the parents, roles and waits of t's model calls. Every step
// is a map lookup or a binary search, so a trace of n spans links in
// O(n log n).
func (g *otlpGraph) link(t *otlpTrace) {
	if len(t.held) < 2 {
		return
	}
	slices.SortStableFunc(t.held, func(a, b heldRequest) int { return cmp.Compare(a.req.TS, b.req.TS) })
	agentOf := newAgentIndex(t).of
	byAgent := map[string][]int{} // agent span → its calls, in time order
	for i, h := range t.held {
		a := agentOf(h.spanID)
		byAgent[a] = append(byAgent[a], i)
	}
	// tools[agent] are the starts of the agent's tool runs, in order.
	tools := map[string][]int64{}
	for id, s := range t.spans {
		if s.op == "execute_tool" {
			a := agentOf(id)
			tools[a] = append(tools[a], s.start)
		}
	}
	for _, starts := range tools {
		slices.Sort(starts)
	}
	parents := make([][]int, len(t.held))
	for _, calls := range byAgent {
		for k := 1; k < len(calls); k++ {
			parents[calls[k]] = []int{calls[k-1]}
		}
	}
	// Sub-agents: an agent's run whose own agent is another, taken in
	// order of start (then id), so a call's parents do not depend on the
	// order the spans were read in.
	var agents []string
	for id, s := range t.spans {
		if s.op == "invoke_agent" {
			agents = append(agents, id)
		}
	}
	slices.SortFunc(agents, func(a, b string) int {
		return cmp.Or(cmp.Compare(t.spans[a].start, t.spans[b].start), strings.Compare(a, b))
	})
	ended := endedIndex{held: t.held, byAgent: byAgent, runs: map[string]*runEnds{}}
	subAgent, joins := make([]bool, len(t.held)), make([]bool, len(t.held))
	for _, id := range agents {
		s := t.spans[id]
		calls, up := byAgent[id], agentOf(id)
		if len(calls) == 0 || up == id {
			continue
		}
		// The run it answers to: the nearest agent above with calls of its
		// own (an orchestrator that only dispatches has none).
		for hops := 0; len(byAgent[up]) == 0 && up != "" && hops < 64; hops++ {
			up = agentOf(up)
		}
		outer := byAgent[up]
		if len(outer) == 0 {
			continue
		}
		// Its first call follows the outer run's last call ended by its
		// start, or, where that had none yet, the one above it.
		for a, hops := up, 0; hops < 64; hops++ {
			if p := ended.lastBy(a, s.start); p >= 0 {
				parents[calls[0]] = append(parents[calls[0]], p)
				subAgent[calls[0]] = true
				break
			}
			if a == "" {
				break
			}
			a = agentOf(a)
		}
		// The outer agent's first call after it ended joins its last call.
		if k, _ := slices.BinarySearchFunc(outer, s.end, func(c int, at int64) int { return cmp.Compare(t.held[c].req.TS, at) }); k < len(outer) {
			parents[outer[k]] = append(parents[outer[k]], calls[len(calls)-1])
			joins[outer[k]] = true
		}
	}
	for i := range t.held {
		switch { // a call that joins sub-agents plans, whatever else it is
		case joins[i]:
			t.held[i].req.Role = trace.RolePlanner
		case subAgent[i]:
			t.held[i].req.Role = trace.RoleSubAgent
		}
	}
	for i := range t.held {
		h := &t.held[i]
		if len(parents[i]) == 0 {
			continue
		}
		slices.Sort(parents[i])
		parents[i] = slices.Compact(parents[i])
		if len(parents[i]) > trace.MaxParents { // the latest are kept
			parents[i] = parents[i][len(parents[i])-trace.MaxParents:]
		}
		var lastEnd int64 = -1
		for _, p := range parents[i] {
			h.req.ParentIDs = append(h.req.ParentIDs, t.held[p].req.RequestID)
			lastEnd = max(lastEnd, t.held[p].endUs)
		}
		if lastEnd < 0 || h.req.TS < lastEnd {
			continue // no wait to record
		}
		wait := float64(h.req.TS-lastEnd) / 1000
		if toolRanBetween(tools[agentOf(h.spanID)], lastEnd, h.req.TS) {
			h.req.ToolMs = &wait
			if h.req.Role == "" {
				h.req.Role = trace.RoleToolFollowUp
			}
		} else {
			h.req.ThinkTimeMs = &wait
		}
	}
	// One session per trace (its conversation's, where the first call
	// names one), turns numbered in time order.
	session := t.held[0].req.SessionID
	if session == "" {
		session = t.held[0].req.RequestID // keyed already
	}
	for i := range t.held {
		t.held[i].req.SessionID, t.held[i].req.Turn = session, int32(i)
	}
}

// toolRanBetween reports whether a tool run of starts (sorted) started
// within [from, to].
func toolRanBetween(starts []int64, from, to int64) bool {
	k, _ := slices.BinarySearch(starts, from)
	return k < len(starts) && starts[k] <= to
}

// endedIndex answers, per agent run, which of its calls ended last by a
// time: the run's calls sorted by end, each with the latest (in time
// order) of those ending no later, built on first use.
type endedIndex struct {
	held    []heldRequest
	byAgent map[string][]int
	runs    map[string]*runEnds
}

// runEnds is one run's calls of known end, by end: ends ascending and,
// at each, the latest call (its index in held) among those ending by it.
type runEnds struct {
	ends   []int64
	latest []int
}

// lastBy returns the index in held of the last call (in time order) of
// run that ended by at, or -1.
func (x *endedIndex) lastBy(run string, at int64) int {
	r := x.runs[run]
	if r == nil {
		r = &runEnds{}
		var calls []int
		for _, c := range x.byAgent[run] {
			if x.held[c].endUs >= 0 {
				calls = append(calls, c)
			}
		}
		slices.SortFunc(calls, func(a, b int) int { return cmp.Compare(x.held[a].endUs, x.held[b].endUs) })
		latest := -1
		for _, c := range calls {
			latest = max(latest, c)
			r.ends, r.latest = append(r.ends, x.held[c].endUs), append(r.latest, latest)
		}
		x.runs[run] = r
	}
	k := sort.Search(len(r.ends), func(i int) bool { return r.ends[i] > at }) - 1
	if k < 0 {
		return -1
	}
	return r.latest[k]
}
