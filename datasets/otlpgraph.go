package datasets

import (
	"cmp"
	"slices"
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
type otlpGraph struct {
	traces map[string]*otlpTrace
	// order lists trace ids oldest first from head on; an id no longer
	// held (or held anew, later) is skipped when met.
	order []string
	head  int
	spans int // spans held over all traces
	// linked counts the calls written with parents; early the traces
	// linked before their root span was read.
	linked, early int64
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
// root, which completes it.
func (g *otlpGraph) note(sp *otlpSpan) (root bool) {
	if sp.TraceID == "" || sp.SpanID == "" {
		return false
	}
	id := strings.ToLower(sp.TraceID)
	t := g.traces[id]
	if t == nil {
		t = &otlpTrace{spans: map[string]otlpSpanInfo{}}
		g.traces[id] = t
		g.order = append(g.order, id)
	}
	op, _, _ := sp.Attributes.str("gen_ai.operation.name")
	t.spans[strings.ToLower(sp.SpanID)] = otlpSpanInfo{parent: strings.ToLower(sp.ParentSpanID), op: op,
		start: int64(min(sp.Start.v/1000, 1<<62)), end: int64(min(sp.End.v/1000, 1<<62))}
	g.spans++
	return sp.ParentSpanID == ""
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

// agentOf returns the span id of the nearest invoke_agent span above
// span (itself excluded), or "" for none.
func (t *otlpTrace) agentOf(span string) string {
	seen := 0
	for id := t.spans[span].parent; id != "" && seen < 1024; seen++ {
		s, ok := t.spans[id]
		if !ok {
			return ""
		}
		if s.op == "invoke_agent" {
			return id
		}
		id = s.parent
	}
	return ""
}

// link sets the parents, roles and waits of t's model calls.
func (g *otlpGraph) link(t *otlpTrace) {
	if len(t.held) < 2 {
		return
	}
	slices.SortStableFunc(t.held, func(a, b heldRequest) int { return cmp.Compare(a.req.TS, b.req.TS) })
	byAgent := map[string][]int{} // agent span → its calls, in time order
	for i, h := range t.held {
		a := t.agentOf(h.spanID)
		byAgent[a] = append(byAgent[a], i)
	}
	// tools[agent] are the starts of the agent's tool runs.
	tools := map[string][]int64{}
	for id, s := range t.spans {
		if s.op == "execute_tool" {
			a := t.agentOf(id)
			tools[a] = append(tools[a], s.start)
		}
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
	subAgent, joins := make([]bool, len(t.held)), make([]bool, len(t.held))
	for _, id := range agents {
		s := t.spans[id]
		calls, up := byAgent[id], t.agentOf(id)
		if len(calls) == 0 || up == id {
			continue
		}
		// The run it answers to: the nearest agent above with calls of its
		// own (an orchestrator that only dispatches has none).
		for hops := 0; len(byAgent[up]) == 0 && up != "" && hops < 64; hops++ {
			up = t.agentOf(up)
		}
		outer := byAgent[up]
		if len(outer) == 0 {
			continue
		}
		// Its first call follows the outer run's last call ended by its
		// start, or, where that had none yet, the one above it.
		for a, hops := up, 0; hops < 64; hops++ {
			if p := lastEndedBy(t.held, byAgent[a], s.start); p >= 0 {
				parents[calls[0]] = append(parents[calls[0]], p)
				subAgent[calls[0]] = true
				break
			}
			if a == "" {
				break
			}
			a = t.agentOf(a)
		}
		// The outer agent's first call after it ended joins its last call.
		for _, c := range outer {
			if t.held[c].req.TS >= s.end {
				parents[c] = append(parents[c], calls[len(calls)-1])
				joins[c] = true
				break
			}
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
		if slices.ContainsFunc(tools[t.agentOf(h.spanID)], func(s int64) bool { return s >= lastEnd && s <= h.req.TS }) {
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

// lastEndedBy returns the index, among calls, of the last call ended by
// at, or -1.
func lastEndedBy(held []heldRequest, calls []int, at int64) int {
	best := -1
	for _, c := range calls {
		if held[c].endUs >= 0 && held[c].endUs <= at {
			best = c
		}
	}
	return best
}
