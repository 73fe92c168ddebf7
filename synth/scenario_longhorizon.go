package synth

import (
	"fmt"

	"github.com/servetrace/servetrace/trace"
)

// ScenarioLongHorizon turns a share of the window's requests into long
// agent loops whose context grows turn by turn.
const ScenarioLongHorizon = "long-horizon"

func init() { registerScenario(ScenarioLongHorizon, func() ScenarioParams { return &LongHorizon{} }) }

// LongHorizon makes Share (default 0.05) of the window's requests the
// first call of an agent loop of Turns calls (default 40): each waits on
// the one before (parent_ids) after ToolMs (default 500), and its prompt
// is the one before's prompt and answer plus a tool result of ToolResult
// tokens (default 1,024), so the context passes what a server's prefix
// cache holds over a session; the loop ends before the call whose context
// would pass MaxInput (default 200,000), since replay sends each call the
// whole conversation before it.
type LongHorizon struct {
	baseHooks
	Share      float64 `json:"share,omitempty"`
	Turns      int     `json:"turns,omitempty"`
	ToolMs     float64 `json:"tool_ms,omitempty"`
	ToolResult int64   `json:"tool_result,omitempty"`
	MaxInput   int64   `json:"max_input,omitempty"`
}

// maxHorizonTurns bounds a loop's calls.
const maxHorizonTurns = 1000

func (p *LongHorizon) check(s *Scenario) error {
	if err := checkShare(s, &p.Share, 0.05); err != nil {
		return err
	}
	orDefault(&p.Turns, 40)
	if p.Turns < 2 || p.Turns > maxHorizonTurns {
		return fmt.Errorf("%s: turns %d must be within [2, %d]", s.Name, p.Turns, maxHorizonTurns)
	}
	if err := checkClientMs(s, "tool_ms", p.ToolMs); err != nil {
		return err
	}
	orDefault(&p.ToolMs, 500)
	for _, c := range []struct {
		key string
		v   int64
	}{{"tool_result", p.ToolResult}, {"max_input", p.MaxInput}} {
		if err := checkTokens(s, c.key, c.v); err != nil {
			return err
		}
	}
	orDefault(&p.ToolResult, 1024)
	orDefault(&p.MaxInput, 200_000)
	return nil
}

// bound counts the loops' later calls among the rows and the peak rate.
func (p *LongHorizon) bound(s *Scenario, b *rateBound) {
	boundGraphRows(s, b, p.Share*float64(p.Turns-1))
}

func (p *LongHorizon) apply(_ *Scenario, g *generator, r *trace.Request, _ float64) {
	headGraph(g, r, p, p.Share)
}

// graph returns the loop's later calls, each the tool follow-up of the
// one before, up to the last whose context fits MaxInput.
func (p *LongHorizon) graph(first trace.Request, id func(k int) string) []trace.Request {
	out := make([]trace.Request, 0, p.Turns-1)
	prev, prevID := first, first.RequestID
	for k := range p.Turns - 1 {
		input := prev.InputTokens + prev.OutputTokens + p.ToolResult
		if input > min(p.MaxInput, MaxModelTokens) {
			break
		}
		next := trace.Request{Identity: trace.Identity{SessionID: first.SessionID, Turn: first.Turn + int32(k) + 1, Tenant: first.Tenant, Model: first.Model},
			TS: first.TS, Shape: trace.Shape{InputTokens: input, OutputTokens: first.OutputTokens, MaxTokens: first.MaxTokens,
				API: trace.APIChat, Stream: first.Stream, N: 1},
			ParentIDs: []string{prevID}, ToolMs: new(p.ToolMs), Role: trace.RoleToolFollowUp, Phase: first.Phase}
		out = append(out, next)
		prev, prevID = next, id(k)
	}
	return out
}
