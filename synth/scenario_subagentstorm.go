package synth

import (
	"fmt"

	"github.com/servetrace/servetrace/trace"
)

// ScenarioSubagentStorm turns a share of the window's requests into
// planners that fan out to sub-agents and join their answers.
const ScenarioSubagentStorm = "subagent-storm"

func init() {
	registerScenario(ScenarioSubagentStorm, func() ScenarioParams { return &SubagentStorm{} })
}

// SubagentStorm makes Share (default 0.5) of the window's requests
// planners: each is followed by Width (default 8) sub-agents that wait on
// it (parent_ids) after ToolMs, and a join that waits on all of them, a
// burst of wide fan-outs no trace need hold yet. A sub-agent asks
// SubInput new tokens on top of the planner's prompt and answers
// SubOutput; the join reads the planner's prompt and every answer.
// Replay sends each when its parents are done, its prompt continuing
// theirs, so the server's prefix cache sees the shared context.
type SubagentStorm struct {
	baseHooks
	Share     float64 `json:"share,omitempty"`
	Width     int     `json:"width,omitempty"`
	ToolMs    float64 `json:"tool_ms,omitempty"`
	SubInput  int64   `json:"sub_input,omitempty"`
	SubOutput int64   `json:"sub_output,omitempty"`
}

func (p *SubagentStorm) check(s *Scenario) error {
	if err := checkShare(s, &p.Share, 0.5); err != nil {
		return err
	}
	if p.Width < 0 || p.Width > trace.MaxParents {
		return fmt.Errorf("%s: width %d must be within [1, %d] (a join's most parents)", s.Name, p.Width, trace.MaxParents)
	}
	orDefault(&p.Width, 8)
	if err := checkClientMs(s, "tool_ms", p.ToolMs); err != nil {
		return err
	}
	for _, c := range []struct {
		key string
		v   int64
	}{{"sub_input", p.SubInput}, {"sub_output", p.SubOutput}} {
		if err := checkTokens(s, c.key, c.v); err != nil {
			return err
		}
	}
	orDefault(&p.SubInput, 128)
	orDefault(&p.SubOutput, 64)
	return nil
}

// bound counts the sub-agents and joins among the rows and the peak rate.
func (p *SubagentStorm) bound(s *Scenario, b *rateBound) {
	boundGraphRows(s, b, p.Share*float64(p.Width+1))
}

// boundGraphRows adds a graph scenario's rows to b: extra rows for each
// request in its window, at its peak too.
func boundGraphRows(s *Scenario, b *rateBound, extra float64) {
	b.flash *= 1 + extra
	to := b.durS
	if s.For > 0 {
		to = s.At.Seconds() + s.For.Seconds()
	}
	b.first += extra * b.mean * b.overlap(s.At.Seconds(), to)
}

func (p *SubagentStorm) apply(_ *Scenario, g *generator, r *trace.Request, _ float64) {
	headGraph(g, r, p, p.Share)
}

// headGraph makes r, with probability share, the planner that heads
// graph's rows.
func headGraph(g *generator, r *trace.Request, graph graphScenario, share float64) {
	if g.scenRng.Float64() < share {
		r.Role = trace.RolePlanner
		g.follow = graph
	}
}

// graphScenario is a scenario that makes a row the head of an agent
// graph: graph returns the rows that follow it, in order, which take the
// ids id(0), id(1), … as they are emitted.
type graphScenario interface {
	graph(head trace.Request, id func(k int) string) []trace.Request
}

// graph returns the sub-agents and the join of a planner.
func (p *SubagentStorm) graph(planner trace.Request, id func(k int) string) []trace.Request {
	session := planner.SessionID
	subs := make([]trace.Request, 0, p.Width+1)
	parents := make([]string, 0, p.Width)
	var answers int64
	for k := range p.Width {
		sub := trace.Request{Identity: trace.Identity{SessionID: session, Turn: planner.Turn + 1, Tenant: planner.Tenant, Model: planner.Model},
			TS: planner.TS, Shape: trace.Shape{InputTokens: min(planner.InputTokens+p.SubInput, MaxModelTokens), OutputTokens: p.SubOutput,
				MaxTokens: p.SubOutput, API: trace.APIChat, Stream: planner.Stream, N: 1},
			ParentIDs: []string{planner.RequestID}, Role: trace.RoleSubAgent, Phase: planner.Phase}
		if p.ToolMs > 0 {
			sub.ToolMs = new(p.ToolMs)
		}
		subs = append(subs, sub)
		parents = append(parents, id(k))
		answers += p.SubOutput
	}
	join := trace.Request{Identity: trace.Identity{SessionID: session, Turn: planner.Turn + 2, Tenant: planner.Tenant, Model: planner.Model},
		TS: planner.TS, Shape: trace.Shape{InputTokens: min(planner.InputTokens+planner.OutputTokens+answers, MaxModelTokens),
			OutputTokens: planner.OutputTokens, MaxTokens: planner.MaxTokens, API: trace.APIChat, Stream: planner.Stream, N: 1},
		ParentIDs: parents, Role: trace.RolePlanner, Phase: planner.Phase}
	return append(subs, join)
}
