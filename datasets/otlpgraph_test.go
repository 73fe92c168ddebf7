package datasets

import (
	"context"
	"os"
	"slices"
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
