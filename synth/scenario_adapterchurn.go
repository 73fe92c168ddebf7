package synth

import (
	"fmt"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// ScenarioAdapterChurn asks for more adapters than a server holds.
const ScenarioAdapterChurn = "adapter-churn"

func init() { registerScenario(ScenarioAdapterChurn, func() ScenarioParams { return &AdapterChurn{} }) }

// AdapterChurn gives Share (default 1) of the window's requests one of
// Adapters distinct adapters (default 16), drawn by a Zipf law of Exponent
// (default 1) whose ranking rotates by a quarter of the adapters every
// Rotate (default 60s): more adapters than a server's LoRA slots, with
// the hot set moving.
type AdapterChurn struct {
	baseHooks
	Share    float64  `json:"share,omitempty"`
	Adapters int      `json:"adapters,omitempty"`
	Exponent float64  `json:"exponent,omitempty"`
	Rotate   Duration `json:"rotate,omitempty"`
}

func (p *AdapterChurn) check(s *Scenario) error {
	if err := checkShare(s, &p.Share, 1); err != nil {
		return err
	}
	orDefault(&p.Exponent, 1)
	orDefault(&p.Adapters, 16)
	orDefault(&p.Rotate, Duration(time.Minute))
	if p.Adapters < 1 || p.Adapters > MaxZipfN || !(p.Exponent >= 0 && p.Exponent <= 20) || p.Rotate < 0 {
		return fmt.Errorf("%s: adapters must be 1 to %d, exponent 0 to 20 and rotate not negative", s.Name, MaxZipfN)
	}
	return nil
}

func (p *AdapterChurn) apply(s *Scenario, g *generator, r *trace.Request, t float64) {
	rng := g.scenRng
	if !(rng.Float64() < p.Share) {
		return
	}
	if g.storm.churnCum == nil {
		g.storm.churnCum = (&Zipf{N: p.Adapters, S: p.Exponent}).cumulative()
	}
	k := zipfRank(g.storm.churnCum, rng) - 1
	if p.Rotate > 0 {
		period := int((t - s.At.Seconds()) / p.Rotate.Seconds())
		k += period * max(1, p.Adapters/4)
	}
	r.Adapter = fmt.Sprintf("churn-%d", k%p.Adapters)
}
