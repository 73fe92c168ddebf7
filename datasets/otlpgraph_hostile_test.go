package datasets

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// TestOTLPDuplicateSpans (issue 46, 11): a collector that retries an
// export writes its spans twice (the same trace and span ids). The first
// of each is kept and the rest dropped and counted in a note, whether
// the copy comes while its trace is held or after its root was read.
// Before, a held call followed its own copy (parent_ids naming itself:
// rejected, and the file refused), and a copy read after the root was
// written as a second row of the same request.
func TestOTLPDuplicateSpans(t *testing.T) {
	const t1 = "00000000000000000000000000000001"
	calls := otlpDocJSON(otlpSpanJSON(t1, "a1", "R", "chat", 0, 1000, 11, ""), otlpSpanJSON(t1, "a2", "R", "chat", 2000, 3000, 12, ""))
	root := otlpDocJSON(otlpSpanJSON(t1, "R", "", "invoke_agent", 0, 4000, 0, ""))
	whole := otlpDocJSON(otlpSpanJSON(t1, "a1", "R", "chat", 0, 1000, 11, ""), otlpSpanJSON(t1, "a2", "R", "chat", 2000, 3000, 12, ""),
		otlpSpanJSON(t1, "R", "", "invoke_agent", 0, 4000, 0, ""))
	for _, tc := range []struct {
		name, docs string
		dropped    int
	}{
		{"a retried export while the trace is held", calls + calls + root, 2},
		{"a retried export after the root", whole + whole, 3},
		{"the same span three times in one export", otlpDocJSON(otlpSpanJSON(t1, "a1", "R", "chat", 0, 1000, 11, ""),
			otlpSpanJSON(t1, "a1", "R", "chat", 0, 1000, 11, ""), otlpSpanJSON(t1, "a1", "R", "chat", 0, 1000, 11, "")) + calls + root, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sink memSink
			st, err := Read(context.Background(), strings.NewReader(tc.docs), Options{Name: "t.jsonl", Format: FormatOTLP}, &sink)
			if err != nil {
				t.Fatal(err)
			}
			if len(sink.rows) != 2 || len(sink.rejects) != 0 {
				t.Fatalf("%d rows, rejects %v; want the 2 calls once each", len(sink.rows), sink.rejects)
			}
			first, second := sink.rows[0], sink.rows[1]
			if first.InputTokens != 11 || second.InputTokens != 12 || len(first.ParentIDs) != 0 || !slices.Equal(second.ParentIDs, []string{first.RequestID}) {
				t.Errorf("rows %d (parents %v), %d (parents %v); want 11, then 12 following it", first.InputTokens, first.ParentIDs, second.InputTokens, second.ParentIDs)
			}
			note := fmt.Sprintf("%d spans repeated a trace and span id read before", tc.dropped)
			if !slices.ContainsFunc(st.Notes, func(s string) bool { return strings.Contains(s, note) }) {
				t.Errorf("notes %q; want one saying %q", st.Notes, note)
			}
		})
	}
}

// TestOTLPDuplicateSpansKeepTheHeldCount (issue 46, 11): a span noted
// twice counts once among the spans held, so releasing its trace brings
// the count back to zero. Before, each copy counted and the count, which
// decides when the oldest trace is linked early, only grew.
func TestOTLPDuplicateSpansKeepTheHeldCount(t *testing.T) {
	g := newOTLPGraph()
	sp := otlpSpan{TraceID: "T", SpanID: "S", ParentSpanID: "P"}
	for range 3 {
		g.note(&sp)
	}
	g.take("t")
	if g.spans != 0 {
		t.Errorf("%d spans held after the only trace was released; want 0", g.spans)
	}
}

// TestLongOTLPAgentLinkingNearLinear (issue 46, 11): one trace whose
// planner makes 100,000 calls, each after a tool run, then starts
// 100,000 sub-agents of one call each, links in about linear time, and
// right: each planner call follows the one before after its tool, each
// sub-agent's call follows the planner's last. Before, each sub-agent
// scanned every planner call twice and each call every tool, some
// 3 × 10^10 steps (minutes; a 108 MB export took 71 s).
func TestLongOTLPAgentLinkingNearLinear(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a long check: run by make test-timing")
	}
	const n = 100_000
	tr := &otlpTrace{spans: map[string]otlpSpanInfo{"r": {op: "invoke_agent", start: 0, end: 3*n + 1}}}
	call := func(id, parent string, start int64, in int64) {
		tr.spans[id] = otlpSpanInfo{parent: parent, op: "chat", start: start, end: start + 1}
		tr.held = append(tr.held, heldRequest{spanID: id, endUs: start + 1,
			req: trace.Request{Identity: trace.Identity{RequestID: id}, TS: start, Shape: trace.Shape{InputTokens: in}}})
	}
	for i := range n { // the planner's calls, 1 µs each, and a tool before each
		tr.spans[fmt.Sprintf("t%d", i)] = otlpSpanInfo{parent: "r", op: "execute_tool", start: int64(2 * i), end: int64(2*i + 1)}
		call(fmt.Sprintf("c%d", i), "r", int64(2*i+1), 100)
	}
	for i := range n { // sub-agents, after the planner's last call
		a := fmt.Sprintf("a%d", i)
		tr.spans[a] = otlpSpanInfo{parent: "r", op: "invoke_agent", start: int64(2*n + i), end: int64(2*n + i + 1)}
		call(fmt.Sprintf("s%d", i), a, int64(2*n+i), 200)
	}
	g := newOTLPGraph()
	if _, ok := withinDeadline(t, time.Minute, func() error { g.link(tr); return nil }); !ok {
		return
	}
	wrong, last := 0, ""
	for _, h := range tr.held {
		r := h.req
		var ok bool
		switch r.InputTokens {
		case 100:
			ok = last == "" && len(r.ParentIDs) == 0 || slices.Equal(r.ParentIDs, []string{last}) && r.ToolMs != nil && r.Role == trace.RoleToolFollowUp
			last = r.RequestID
		case 200:
			ok = slices.Equal(r.ParentIDs, []string{"c" + fmt.Sprint(n-1)}) && r.Role == trace.RoleSubAgent
		}
		if !ok {
			if wrong++; wrong == 1 {
				t.Errorf("call %s: parents %v role %q tool %v", r.RequestID, r.ParentIDs, r.Role, r.ToolMs)
			}
		}
	}
	if wrong > 0 {
		t.Errorf("%d of %d calls linked wrong", wrong, len(tr.held))
	}
}

// withinDeadline runs f in a goroutine and fails the test if it does not
// return within d (a hang).
func withinDeadline(t *testing.T, d time.Duration, f func() error) (err error, ok bool) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err, true
	case <-time.After(d):
		t.Errorf("still running after %v", d)
		return nil, false
	}
}
