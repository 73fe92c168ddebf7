package datasets

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestOTLPAgentSpans converts testdata/otlp/agent.jsonl, written by hand
// in the shape of the GenAI agent spans (semantic conventions,
// gen-ai-agent-spans.md; spans exported as they end, the root last): a
// planner agent calls the model, runs a tool, calls again, starts two
// sub-agents and calls a third time; a second trace never exports its
// root. The calls become an agent graph.
func TestOTLPAgentSpans(t *testing.T) {
	f, err := os.Open("testdata/otlp/agent.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sink memSink
	st, err := Read(context.Background(), f, Options{Name: "agent.jsonl", Format: FormatOTLP}, &sink)
	if err != nil {
		t.Fatal(err)
	}
	if len(sink.rows) != 7 || len(sink.rejects) != 0 {
		t.Fatalf("%d rows, rejects %v; want 7 model calls", len(sink.rows), sink.rejects)
	}
	// Rows come out by trace; name them by their input tokens.
	byIn := map[int64]int{}
	for i, r := range sink.rows {
		byIn[r.InputTokens] = i
	}
	name := map[int64]string{900: "c1", 1300: "c2", 1500: "sub", 1700: "c3", 300: "d1", 400: "d2"}
	id := func(in int64) string { return sink.rows[byIn[in]].RequestID }
	var subs []int
	for i, r := range sink.rows {
		if r.InputTokens == 1500 {
			subs = append(subs, i)
		}
	}
	if len(subs) != 2 {
		t.Fatalf("%d sub-agent calls, want 2", len(subs))
	}
	ms := func(v *float64) float64 {
		if v == nil {
			return -1
		}
		return *v
	}
	for _, tc := range []struct {
		in            int64
		parents       []string
		role          string
		toolMs, think float64
	}{
		{900, nil, "", -1, -1},
		{1300, []string{id(900)}, "tool-follow-up", 1100, -1},
		{1700, []string{id(1300), sink.rows[subs[0]].RequestID, sink.rows[subs[1]].RequestID}, "planner", -1, 200},
		{300, nil, "", -1, -1},
		{400, []string{id(300)}, "", -1, 1000},
	} {
		r := sink.rows[byIn[tc.in]]
		got, want := slices.Clone(r.ParentIDs), slices.Clone(tc.parents)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) || r.Role != tc.role || ms(r.ToolMs) != tc.toolMs || ms(r.ThinkTimeMs) != tc.think {
			t.Errorf("%s: parents %v role %q tool %v think %v; want %v %q %v %v", name[tc.in], r.ParentIDs, r.Role, ms(r.ToolMs), ms(r.ThinkTimeMs),
				tc.parents, tc.role, tc.toolMs, tc.think)
		}
	}
	for _, i := range subs {
		r := sink.rows[i]
		if !slices.Equal(r.ParentIDs, []string{id(1300)}) || r.Role != "sub-agent" || r.ThinkTimeMs == nil {
			t.Errorf("sub-agent %d: parents %v role %q think %v; want c2, sub-agent, a wait", i, r.ParentIDs, r.Role, ms(r.ThinkTimeMs))
		}
	}
	sessions := map[string]bool{}
	for _, r := range sink.rows {
		sessions[r.SessionID] = true
	}
	if len(sessions) != 2 || sessions[""] {
		t.Errorf("sessions %v, want one per trace", sessions)
	}
	if !slices.ContainsFunc(st.Notes, func(s string) bool { return strings.Contains(s, "5 model calls follow others of their trace") }) {
		t.Errorf("notes %q; want 5 model calls linked", st.Notes)
	}
}

// otlpSpanJSON is one span of an OTLP/JSON document, for tests: times in
// ms after 2025-03-01, a chat span's usage its input tokens.
func otlpSpanJSON(trace, id, parent, op string, startMs, endMs int64, in int, conversation string) string {
	const t0 = int64(1740787200000)
	attrs := `{"key":"gen_ai.operation.name","value":{"stringValue":"` + op + `"}}`
	if op == "chat" {
		attrs += `,{"key":"gen_ai.usage.input_tokens","value":{"intValue":"` + strconv.Itoa(in) + `"}},{"key":"gen_ai.usage.output_tokens","value":{"intValue":"5"}}`
	}
	if conversation != "" {
		attrs += `,{"key":"gen_ai.conversation.id","value":{"stringValue":"` + conversation + `"}}`
	}
	p := ""
	if parent != "" {
		p = `"parentSpanId":"` + parent + `",`
	}
	return `{"traceId":"` + trace + `","spanId":"` + id + `",` + p + `"name":"` + op + `","startTimeUnixNano":"` + strconv.FormatInt((t0+startMs)*1e6, 10) +
		`","endTimeUnixNano":"` + strconv.FormatInt((t0+endMs)*1e6, 10) + `","attributes":[` + attrs + `]}`
}

func otlpDocJSON(spans ...string) string {
	return `{"resourceSpans":[{"resource":{"attributes":[]},"scopeSpans":[{"spans":[` + strings.Join(spans, ",") + `]}]}]}` + "\n"
}

// TestOTLPAgentSpanCases: a conversation across traces, a trace held past
// the order check's hour, and a call both a sub-agent's first and a join.
func TestOTLPAgentSpanCases(t *testing.T) {
	const t1, t2 = "00000000000000000000000000000001", "00000000000000000000000000000002"
	for _, tc := range []struct {
		name string
		docs string
		// want maps a call (by input tokens) to its parents (by input
		// tokens), turn and role.
		want map[int]struct {
			parents []int
			turn    int32
			role    string
		}
	}{
		{"a conversation across traces",
			otlpDocJSON(otlpSpanJSON(t1, "a1", "r1", "chat", 0, 1000, 11, "conv"), otlpSpanJSON(t1, "a2", "r1", "chat", 2000, 20000, 12, "conv"),
				otlpSpanJSON(t1, "r1", "", "invoke_agent", 0, 20000, 0, "")) +
				otlpDocJSON(otlpSpanJSON(t2, "b1", "r2", "chat", 30000, 31000, 21, "conv"), otlpSpanJSON(t2, "b2", "r2", "chat", 32000, 33000, 22, "conv"),
					otlpSpanJSON(t2, "r2", "", "invoke_agent", 30000, 33000, 0, "")),
			map[int]struct {
				parents []int
				turn    int32
				role    string
			}{11: {nil, 0, ""}, 12: {[]int{11}, 1, ""}, 21: {[]int{12}, 2, ""}, 22: {[]int{21}, 3, ""}}},
		{"a trace without its root, written after later rows",
			otlpDocJSON(otlpSpanJSON(t1, "a1", "http", "chat", 0, 1000, 11, ""), otlpSpanJSON(t1, "a2", "http", "chat", 2000, 3000, 12, "")) +
				otlpDocJSON(otlpSpanJSON(t2, "z", "", "chat", 7_200_000, 7_201_000, 99, "")),
			map[int]struct {
				parents []int
				turn    int32
				role    string
			}{11: {nil, 0, ""}, 12: {[]int{11}, 1, ""}, 99: {nil, 0, ""}}},
		{"a sub-agent's first call that also joins its own sub-agent",
			otlpDocJSON(otlpSpanJSON(t1, "a1", "A", "chat", 0, 1000, 11, ""),
				otlpSpanJSON(t1, "c1", "C", "chat", 1200, 1800, 31, ""), otlpSpanJSON(t1, "C", "B", "invoke_agent", 1100, 1900, 0, ""),
				otlpSpanJSON(t1, "b1", "B", "chat", 2000, 2500, 21, ""), otlpSpanJSON(t1, "B", "A", "invoke_agent", 1100, 2600, 0, ""),
				otlpSpanJSON(t1, "A", "", "invoke_agent", 0, 3000, 0, "")),
			map[int]struct {
				parents []int
				turn    int32
				role    string
			}{11: {nil, 0, ""}, 31: {[]int{11}, 1, "sub-agent"}, 21: {[]int{11, 31}, 2, "planner"}}},
		{"a sub-agent under an orchestrator that makes no call",
			otlpDocJSON(otlpSpanJSON(t1, "a1", "R", "chat", 0, 1000, 11, ""),
				otlpSpanJSON(t1, "c1", "S", "chat", 1200, 1800, 31, ""), otlpSpanJSON(t1, "c2", "S", "chat", 1900, 2800, 32, ""),
				otlpSpanJSON(t1, "S", "O", "invoke_agent", 1100, 2900, 0, ""), otlpSpanJSON(t1, "O", "R", "invoke_agent", 1100, 3000, 0, ""),
				otlpSpanJSON(t1, "a2", "R", "chat", 3100, 3500, 12, ""), otlpSpanJSON(t1, "R", "", "invoke_agent", 0, 4000, 0, "")),
			map[int]struct {
				parents []int
				turn    int32
				role    string
			}{11: {nil, 0, ""}, 31: {[]int{11}, 1, "sub-agent"}, 32: {[]int{31}, 2, ""}, 12: {[]int{11, 32}, 3, "planner"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 5 { // the same each time, whatever the map order
				var sink memSink
				if _, err := Read(context.Background(), strings.NewReader(tc.docs), Options{Name: "t.jsonl", Format: FormatOTLP}, &sink); err != nil {
					t.Fatal(err)
				}
				if len(sink.rejects) != 0 || len(sink.rows) != len(tc.want) {
					t.Fatalf("%d rows, rejects %v; want %d rows", len(sink.rows), sink.rejects, len(tc.want))
				}
				ids := map[string]int{}
				for _, r := range sink.rows {
					ids[r.RequestID] = int(r.InputTokens)
				}
				for _, r := range sink.rows {
					w := tc.want[int(r.InputTokens)]
					var got []int
					for _, p := range r.ParentIDs {
						got = append(got, ids[p])
					}
					slices.Sort(got)
					if !slices.Equal(got, w.parents) || r.Turn != w.turn || r.Role != w.role {
						t.Fatalf("call %d: parents %v turn %d role %q; want %v %d %q", r.InputTokens, got, r.Turn, r.Role, w.parents, w.turn, w.role)
					}
				}
			}
		})
	}
}
