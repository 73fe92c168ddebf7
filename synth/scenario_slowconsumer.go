package synth

import "github.com/servetrace/servetrace/trace"

// ScenarioSlowConsumer makes a share of requests read their stream slowly.
const ScenarioSlowConsumer = "slow-consumer"

func init() { registerScenario(ScenarioSlowConsumer, func() ScenarioParams { return &SlowConsumer{} }) }

// SlowConsumer makes Share (default 0.2) of the window's requests wait
// ReadDelayMs (default 200) between reads of their stream, so the server
// holds their output buffered.
type SlowConsumer struct {
	baseHooks
	Share       float64 `json:"share,omitempty"`
	ReadDelayMs float64 `json:"read_delay_ms,omitempty"`
}

func (p *SlowConsumer) check(s *Scenario) error {
	if err := checkShare(s, &p.Share, 0.2); err != nil {
		return err
	}
	if err := checkClientMs(s, "read_delay_ms", p.ReadDelayMs); err != nil {
		return err
	}
	orDefault(&p.ReadDelayMs, 200)
	return nil
}

func (p *SlowConsumer) apply(_ *Scenario, g *generator, r *trace.Request, _ float64) {
	if g.scenRng.Float64() < p.Share {
		d := p.ReadDelayMs
		r.ReadDelayMs = &d
	}
}
