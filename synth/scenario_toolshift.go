package synth

import (
	"fmt"

	"github.com/servetrace/servetrace/trace"
)

// ScenarioToolLatencyShift stretches the tool delays of agent calls in its
// window: what if the tools got slower (or faster)?
const ScenarioToolLatencyShift = "tool-latency-shift"

func init() {
	registerScenario(ScenarioToolLatencyShift, func() ScenarioParams { return &ToolLatencyShift{} })
}

// ToolLatencyShift multiplies the tool delay (tool_ms) of every request
// in the window that carries one by Factor, then adds AddMs, within
// [0, a week]: long-horizon's tool follow-ups, subagent-storm's
// sub-agents given a tool_ms, whatever scenario set it. A graph's rows are
// judged at their head's arrival, the time their ts holds. Factor
// defaults to 4, or to 1 where only AddMs is given; a request without a
// tool delay keeps none. Replay sends a child its tool delay after its
// parents end, so agent sessions stretch and fewer of their calls are in
// flight at once.
type ToolLatencyShift struct {
	baseHooks
	Factor float64 `json:"factor,omitempty"`
	AddMs  float64 `json:"add_ms,omitempty"`
}

// maxToolFactor bounds the factor; a week's tool delay caps what it makes.
const maxToolFactor = 1000

func (p *ToolLatencyShift) check(s *Scenario) error {
	if err := checkFiniteKey(s, "factor", p.Factor); err != nil {
		return err
	}
	if err := checkFiniteKey(s, "add_ms", p.AddMs); err != nil {
		return err
	}
	if p.AddMs < -trace.MaxClientMs || p.AddMs > trace.MaxClientMs {
		return fmt.Errorf("%s: add_ms must be within [-%d, %d] (a week either way)", s.Name, trace.MaxClientMs, trace.MaxClientMs)
	}
	if p.Factor < 0 || p.Factor > maxToolFactor {
		return fmt.Errorf("%s: factor %v must be positive and at most %d", s.Name, p.Factor, maxToolFactor)
	}
	if p.AddMs != 0 {
		orDefault(&p.Factor, 1)
	}
	orDefault(&p.Factor, 4)
	return nil
}

func (p *ToolLatencyShift) tool(s *Scenario, t, ms float64) float64 {
	if !s.active(t) {
		return ms
	}
	return ms*p.Factor + p.AddMs
}
