package synth

import "fmt"

// ScenarioFlashCrowd multiplies the arrival rate in its window.
const ScenarioFlashCrowd = "flash-crowd"

func init() { registerScenario(ScenarioFlashCrowd, func() ScenarioParams { return &FlashCrowd{} }) }

// FlashCrowd multiplies the arrival rate by Factor (default 5) in the
// window; the fitted burstiness is kept, so the crowd arrives as the trace
// did, only more of it.
type FlashCrowd struct {
	baseHooks
	Factor float64 `json:"factor,omitempty"`
}

func (p *FlashCrowd) check(s *Scenario) error {
	if err := checkFiniteKey(s, "factor", p.Factor); err != nil {
		return err
	}
	orDefault(&p.Factor, 5)
	if p.Factor <= 0 || p.Factor > MaxRatePerS {
		return fmt.Errorf("%s: factor %v must be positive and at most %g", s.Name, p.Factor, float64(MaxRatePerS))
	}
	return nil
}

// bound multiplies the peak rate by the factor (a crowd may land on the
// peak) and adds the window's extra arrivals.
func (p *FlashCrowd) bound(s *Scenario, b *rateBound) {
	b.flash *= max(p.Factor, 1)
	to := b.durS
	if s.For > 0 {
		to = s.At.Seconds() + s.For.Seconds()
	}
	b.first += (max(p.Factor, 1) - 1) * b.mean * b.overlap(s.At.Seconds(), to)
}

func (p *FlashCrowd) arrivals(s *Scenario, _ *generator, a *arrivalPlan) {
	a.scale = append(a.scale, func(t, r float64) float64 {
		if s.active(t) {
			r *= p.Factor
		}
		return r
	})
}
