package synth

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// TestGenerateRespectsMaxInputTokens (issue 46, 12): with MaxInputTokens
// every generated row fits the cap, and so does every prompt replay would
// send for it: a request that continues a conversation (a later turn, or
// an agent graph's call, parent_ids) is sent its first parent's prompt and
// every parent's answer, then at least one token of its own
// (docs/architecture.md, "The agent graph in replay"), so it needs
// max(input, first parent's input + the parents' outputs + 1) ≤ cap. A
// call that would not fit is not generated, nor any that waits on it; a
// graph scenario's graph ends at its first such call. Every parent named
// was generated before its child. Before, the graph scenarios ignored the
// cap (subagent-storm's joins and long-horizon's loops over it), and later
// turns and fitted graph calls were clamped to it while their history,
// which replay sends whole, was not.
func TestGenerateRespectsMaxInputTokens(t *testing.T) {
	graphDir := writeBucket(t, agentRows(400), &trace.Manifest{BlockSize: trace.DefaultBlockSize})
	graphs, err := Fit(context.Background(), graphDir, FitOptions{NoLatent: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		model    *Model
		cap      int64
		scenario string
		// sessions: the workload continues conversations (some rows must).
		sessions bool
	}{
		{"fitted agent graphs", graphs, 1200, "", true},
		{"multi-turn sessions", testModel(t, "sessions"), 800, "", true},
		{"subagent-storm", testModel(t, "azure"), 4096, "subagent-storm:share=1,width=8", true},
		{"long-horizon", testModel(t, "azure"), 4096, "long-horizon:share=0.5,turns=40,tool_result=1024", true},
		{"image-storm", testModel(t, "azure"), 4096, "image-storm:share=1,images=1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := GenerateOptions{Duration: 5 * time.Minute, Seed: 3, MaxInputTokens: tc.cap}
			if tc.scenario != "" {
				sc, err := ParseScenario(tc.scenario)
				if err != nil {
					t.Fatal(err)
				}
				opts.Scenarios = []Scenario{sc}
			}
			seen := map[string]trace.Request{}
			last := map[string]trace.Request{} // each session's latest row
			var rows, over, unfit, orphans, continued int
			_, err := Generate(context.Background(), tc.model, opts, func(r trace.Request) error {
				rows++
				if r.InputTokens > tc.cap {
					over++
				}
				var history []trace.Request // the conversation it continues
				for _, id := range r.ParentIDs {
					p, ok := seen[id]
					if !ok {
						orphans++
					}
					history = append(history, p)
				}
				if prev, ok := last[r.SessionID]; ok && len(r.ParentIDs) == 0 && r.Turn > 0 {
					history = []trace.Request{prev}
				}
				if len(history) > 0 {
					continued++
					need := history[0].InputTokens + 1
					for _, p := range history {
						need += p.OutputTokens
					}
					if max(r.InputTokens, need) > tc.cap {
						unfit++
					}
				}
				seen[r.RequestID] = r
				if r.SessionID != "" {
					last[r.SessionID] = r
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d rows, %d continuing a conversation", rows, continued)
			if over > 0 || unfit > 0 || orphans > 0 || tc.sessions != (continued > 0) {
				t.Errorf("of %d rows, %d over the cap of %d, %d whose replayed prompt would pass it, %d naming a parent not generated; %d continuing a conversation (want some: %v)",
					rows, over, tc.cap, unfit, orphans, continued, tc.sessions)
			}
		})
	}
}

// TestMaxInputTokensOutOfRange: a negative cap (once taken silently as no
// cap) and one past trace.MaxTokens are refused by name.
func TestMaxInputTokensOutOfRange(t *testing.T) {
	for _, cap := range []int64{-5, trace.MaxTokens + 1} {
		_, err := Generate(context.Background(), testModel(t, "azure"), GenerateOptions{Duration: time.Minute, Seed: 1, MaxInputTokens: cap}, func(trace.Request) error { return nil })
		if err == nil || !strings.Contains(err.Error(), "MaxInputTokens") {
			t.Errorf("cap %d: %v; want it refused naming MaxInputTokens", cap, err)
		}
	}
}
