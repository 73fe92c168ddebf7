package synth

import "fmt"

// ScenarioLongContextStorm draws inputs from the tail in its window.
const ScenarioLongContextStorm = "long-context-storm"

func init() {
	registerScenario(ScenarioLongContextStorm, func() ScenarioParams { return &LongContextStorm{} })
}

// LongContextStorm draws first turns' inputs from above Quantile (default
// 0.9) of the fitted input law, times Factor (default 1), capped at
// MaxInputTokens (default: the fitted maximum), so a long-context surge
// keeps the trace's shape of long inputs.
type LongContextStorm struct {
	baseHooks
	Factor         float64 `json:"factor,omitempty"`
	Quantile       float64 `json:"quantile,omitempty"`
	MaxInputTokens int64   `json:"max_input_tokens,omitempty"`
}

func (p *LongContextStorm) check(s *Scenario) error {
	for _, f := range []struct {
		key string
		v   float64
	}{{"factor", p.Factor}, {"quantile", p.Quantile}} {
		if err := checkFiniteKey(s, f.key, f.v); err != nil {
			return err
		}
	}
	if err := checkTokens(s, "max_input_tokens", p.MaxInputTokens); err != nil {
		return err
	}
	orDefault(&p.Factor, 1)
	orDefault(&p.Quantile, 0.9)
	if p.Quantile <= 0 || p.Quantile >= 1 || p.Factor <= 0 || p.Factor > MaxModelTokens {
		return fmt.Errorf("%s: quantile must be within (0, 1) and factor positive (at most %d)", s.Name, MaxModelTokens)
	}
	return nil
}

// input draws from the tail in the window; a later storm active at t
// overrides an earlier one.
func (p *LongContextStorm) input(s *Scenario, t float64, d *inputDraw) {
	if !s.active(t) {
		return
	}
	q := p.Quantile
	d.u = func(u float64) float64 { return q + (1-q)*u }
	d.factor = p.Factor
	if p.MaxInputTokens > 0 {
		d.cap = p.MaxInputTokens
	}
}
