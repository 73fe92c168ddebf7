package datasets

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMooncakeSessions reads the two ways a Mooncake-shaped trace carries
// sessions: AIPerf's session_id with delay, and, asked for, hash ids that
// begin with every full block of an earlier request.
func TestMooncakeSessions(t *testing.T) {
	const trace = `{"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [1, 2, 3]}
{"timestamp": 100, "input_length": 1600, "output_length": 10, "hash_ids": [1, 2, 4, 5]}
{"timestamp": 200, "input_length": 1600, "output_length": 10, "hash_ids": [1, 2, 6, 7]}
{"timestamp": 300, "input_length": 2600, "output_length": 10, "hash_ids": [1, 2, 4, 5, 8, 9]}
{"timestamp": 350, "input_length": 1100, "output_length": 10, "hash_ids": [1, 30, 31]}
{"timestamp": 500, "input_length": 700, "output_length": 10, "session_id": "a", "hash_ids": [20, 21]}
{"delay": 1500, "input_length": 900, "output_length": 10, "session_id": "a", "hash_ids": [20, 22]}
{"delay": 10, "input_length": 900, "output_length": 10, "session_id": "b", "hash_ids": [40, 41]}
{"delay": -5, "input_length": 900, "output_length": 10, "session_id": "a", "hash_ids": [20, 23]}
`
	start := time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		fromPrefix bool
		// parents[i] is row i's parent row, -1 for none; sessions[i] the
		// session row i shares (by row), -1 for no session at all.
		parents, sessions []int
	}{
		{"session_id only", false, []int{-1, -1, -1, -1, -1, -1, 5}, []int{-1, -1, -1, -1, -1, 5, 5}},
		// Row 4 shares block 1 only, a system prompt: no one's child.
		{"hash ids", true, []int{-1, 0, 0, 1, -1, -1, 5}, []int{0, 0, 0, 0, 4, 5, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sink memSink
			st, err := Read(context.Background(), strings.NewReader(trace), Options{Name: "toolagent.jsonl", Format: FormatMooncake, Start: start, SessionsFromPrefix: tc.fromPrefix}, &sink)
			if err != nil {
				t.Fatal(err)
			}
			if len(sink.rejects) != 2 || sink.rejects[0].Line != 8 || !strings.Contains(sink.rejects[0].Reason, "first request of its session_id") ||
				sink.rejects[1].Line != 9 || sink.rejects[1].Reason != "negative delay" {
				t.Errorf("rejects %+v, want line 8: a session's first request without a timestamp, line 9: a negative delay", sink.rejects)
			}
			if len(sink.rows) != 7 {
				t.Fatalf("%d rows (stats %+v), want 7", len(sink.rows), st)
			}
			for i, r := range sink.rows {
				var want []string
				if p := tc.parents[i]; p >= 0 {
					want = []string{sink.rows[p].RequestID}
				}
				if !slices.Equal(r.ParentIDs, want) {
					t.Errorf("row %d: parents %v, want %v", i, r.ParentIDs, want)
				}
				switch s := tc.sessions[i]; {
				case s < 0 && r.SessionID != "":
					t.Errorf("row %d: session %q, want none", i, r.SessionID)
				case s >= 0 && (r.SessionID == "" || r.SessionID != sink.rows[s].SessionID):
					t.Errorf("row %d: session %q, want row %d's %q", i, r.SessionID, s, sink.rows[s].SessionID)
				}
			}
			later := sink.rows[6]
			if later.ThinkTimeMs == nil || *later.ThinkTimeMs != 1500 || later.Turn != 1 {
				t.Errorf("the session's second turn: think %v, turn %d; want 1500 ms, 1 (0-based)", later.ThinkTimeMs, later.Turn)
			}
			if want := start.UnixMicro() + 2000_000; later.TS != want {
				t.Errorf("the session's second turn at %d, want its first's time plus the delay, %d", later.TS, want)
			}
		})
	}
}

// TestMooncakeSharedPrefixIsNoParent: past maxPrefixChildren followers a
// prefix of hash ids is a system prompt, not a conversation.
func TestMooncakeSharedPrefixIsNoParent(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]}` + "\n")
	n := maxPrefixChildren + 10
	for i := range n {
		b.WriteString(`{"timestamp": ` + strconv.Itoa(i+1) + `, "input_length": 1100, "output_length": 5, "hash_ids": [1, ` + strconv.Itoa(100+2*i) + `, ` + strconv.Itoa(101+2*i) + `]}` + "\n")
	}
	var sink memSink
	st, err := Read(context.Background(), strings.NewReader(b.String()), Options{Name: "t.jsonl", Format: FormatMooncake, SessionsFromPrefix: true}, &sink)
	if err != nil {
		t.Fatal(err)
	}
	linked := 0
	for _, r := range sink.rows {
		if len(r.ParentIDs) > 0 {
			linked++
		}
	}
	if linked != maxPrefixChildren {
		t.Errorf("%d requests follow the first, want %d (then the prefix is shared text)", linked, maxPrefixChildren)
	}
	if !slices.ContainsFunc(st.Notes, func(s string) bool { return strings.Contains(s, "taken for shared text") }) {
		t.Errorf("notes %q do not say the prefix was taken for shared text", st.Notes)
	}
}
