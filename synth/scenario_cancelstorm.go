package synth

import "github.com/servetrace/servetrace/trace"

// ScenarioCancelStorm cancels a share of requests early.
const ScenarioCancelStorm = "cancel-storm"

func init() { registerScenario(ScenarioCancelStorm, func() ScenarioParams { return &CancelStorm{} }) }

// CancelStorm cancels Share (default 0.5) of the window's requests after
// AfterTokens tokens or AfterMs milliseconds (default 16 tokens): the
// abandoned requests replay honours, as users closing a tab.
type CancelStorm struct {
	baseHooks
	Share       float64 `json:"share,omitempty"`
	AfterTokens int64   `json:"after_tokens,omitempty"`
	AfterMs     float64 `json:"after_ms,omitempty"`
}

func (p *CancelStorm) check(s *Scenario) error {
	if err := checkShare(s, &p.Share, 0.5); err != nil {
		return err
	}
	if err := checkTokens(s, "after_tokens", p.AfterTokens); err != nil {
		return err
	}
	if err := checkClientMs(s, "after_ms", p.AfterMs); err != nil {
		return err
	}
	if p.AfterTokens == 0 && p.AfterMs == 0 {
		p.AfterTokens = 16
	}
	return nil
}

func (p *CancelStorm) apply(_ *Scenario, g *generator, r *trace.Request, _ float64) {
	if g.scenRng.Float64() < p.Share {
		if p.AfterTokens > 0 {
			k := p.AfterTokens
			r.CancelAfterTokens = &k
		}
		if p.AfterMs > 0 {
			ms := p.AfterMs
			r.CancelAfterMs = &ms
		}
	}
}
