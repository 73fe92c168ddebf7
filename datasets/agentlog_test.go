package datasets

import (
	"math"
	"slices"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// TestOpenAILogAgentGraph (issue 38): a log of an agent (written by hand
// in OpenAI's chat shape, testdata/logs/agent.jsonl) converts to its
// graph: a tool-call turn follows the planner after the tool's 500 ms,
// three helpers fan out from the tool follow-up's answer, and a join that
// quotes the three helpers' answers waits on all four requests, 300 ms
// after the last helper ended.
func TestOpenAILogAgentGraph(t *testing.T) {
	rows, _, _ := convertLog(t, "testdata/logs/agent.jsonl", "openai")
	if len(rows) != 6 {
		t.Fatalf("%d rows; want 6", len(rows))
	}
	plan, tool, subs, join := rows[0], rows[1], rows[2:5], rows[5]
	near := func(p *float64, want float64) bool { return p != nil && math.Abs(*p-want) < 1e-6 }
	if len(plan.ParentIDs) != 0 {
		t.Errorf("the planner's first call waits on %v", plan.ParentIDs)
	}
	if !slices.Equal(tool.ParentIDs, []string{plan.RequestID}) || tool.Role != trace.RoleToolFollowUp || !near(tool.ToolMs, 500) || tool.ThinkTimeMs != nil {
		t.Errorf("tool follow-up: parents %v role %q tool %v think %v; want the planner, tool-follow-up, 500 ms", tool.ParentIDs, tool.Role, tool.ToolMs, tool.ThinkTimeMs)
	}
	for k, s := range subs {
		if !slices.Equal(s.ParentIDs, []string{tool.RequestID}) || !near(s.ThinkTimeMs, float64(100+50*k)) || s.ToolMs != nil {
			t.Errorf("helper %d: parents %v think %v; want the tool follow-up, %d ms", k, s.ParentIDs, s.ThinkTimeMs, 100+50*k)
		}
	}
	want := []string{tool.RequestID, subs[0].RequestID, subs[1].RequestID, subs[2].RequestID}
	if !slices.Equal(join.ParentIDs, want) || !near(join.ThinkTimeMs, 300) {
		t.Errorf("join: parents %v think %v; want %v, 300 ms", join.ParentIDs, join.ThinkTimeMs, want)
	}
	if join.SessionID != plan.SessionID || join.Turn == 0 {
		t.Errorf("the join is not in the planner's session (%q turn %d)", join.SessionID, join.Turn)
	}
}
