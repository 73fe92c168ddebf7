package synth

import (
	"fmt"
	"slices"
	"time"
)

// ScenarioRamp steps the arrival rate through saturation.
const ScenarioRamp = "ramp"

func init() { registerScenario(ScenarioRamp, func() ScenarioParams { return &Ramp{} }) }

// Ramp holds Rates (requests/s) or Factors (of the model's mean rate,
// default 0.5, 1, 2, 4, 8) for Step each (default 60s), with Gap (default
// 20s) of silence between steps for recovery. Bursty keeps the fitted
// burstiness; by default steps are Poisson, so each step's rate is the
// load and not the trace's bursts.
type Ramp struct {
	baseHooks
	Rates   []float64 `json:"rates,omitempty"`
	Factors []float64 `json:"factors,omitempty"`
	Step    Duration  `json:"step,omitempty"`
	Gap     Duration  `json:"gap,omitempty"`
	Bursty  bool      `json:"bursty,omitempty"`
}

func (p *Ramp) check(s *Scenario) error {
	if len(p.Rates) > 0 && len(p.Factors) > 0 {
		return fmt.Errorf("%s: give rates or factors, not both (rates are requests/s, factors multiply the model's mean rate)", s.Name)
	}
	if len(p.Rates) == 0 && len(p.Factors) == 0 {
		p.Factors = []float64{0.5, 1, 2, 4, 8}
	}
	for _, r := range append(slices.Clone(p.Rates), p.Factors...) {
		if !(r > 0 && r <= MaxRatePerS) {
			return fmt.Errorf("%s: rate or factor %v: every rate and factor must be positive and at most %g (MaxRatePerS)", s.Name, r, float64(MaxRatePerS))
		}
	}
	orDefault(&p.Step, Duration(time.Minute))
	orDefault(&p.Gap, Duration(20*time.Second))
	if p.Step < 0 || p.Gap < 0 {
		return fmt.Errorf("%s: step %v and gap %v must not be negative", s.Name, time.Duration(p.Step), time.Duration(p.Gap))
	}
	return nil
}

// steps returns the number of steps.
func (p *Ramp) steps() int { return max(len(p.Rates), len(p.Factors)) }

// rampLength returns the ramp's total length in seconds.
func (p *Ramp) rampLength() float64 {
	n := p.steps()
	return float64(n)*p.Step.Seconds() + float64(max(n-1, 0))*p.Gap.Seconds()
}

// rampRate returns the ramp's rate at t (seconds since the ramp began) and
// its step number (1-based), or 0 in a gap or after the ramp.
func (p *Ramp) rampRate(t, meanRate float64) (float64, int) {
	period := p.Step.Seconds() + p.Gap.Seconds()
	if t < 0 {
		return 0, 0
	}
	k := int(t / period)
	if k >= p.steps() || t-float64(k)*period >= p.Step.Seconds() {
		return 0, 0
	}
	if len(p.Rates) > 0 {
		return p.Rates[k], k + 1
	}
	return p.Factors[k] * meanRate, k + 1
}

// length makes the workload end with the ramp.
func (p *Ramp) length(s *Scenario) (float64, bool) { return s.At.Seconds() + p.rampLength(), true }

func (p *Ramp) bound(s *Scenario, b *rateBound) {
	for k := range p.steps() {
		r := 0.0
		if len(p.Rates) > 0 {
			r = p.Rates[k] * b.rateScale
		} else {
			r = p.Factors[k] * b.mean
		}
		b.ramp = max(b.ramp, r)
		from := s.At.Seconds() + float64(k)*(p.Step.Seconds()+p.Gap.Seconds())
		b.first += r * b.overlap(from, from+p.Step.Seconds())
	}
}

// arrivals replaces the intensity over the ramp's length (the last ramp
// wins) and, unless Bursty, makes arrivals Poisson.
func (p *Ramp) arrivals(s *Scenario, g *generator, a *arrivalPlan) {
	mean, scale := g.m.Arrivals.Intensity.MeanRatePerS, g.opts.RateScale
	a.rate = func(t float64) (float64, bool) {
		if t < s.At.Seconds() || t >= s.At.Seconds()+p.rampLength() {
			return 0, false
		}
		r, _ := p.rampRate(t-s.At.Seconds(), mean)
		return r * scale, true
	}
	a.poisson = !p.Bursty
}

// phase labels a row with its step ("step-N"); gaps are unlabelled.
func (p *Ramp) phase(s *Scenario, t float64) string {
	if _, step := p.rampRate(t-s.At.Seconds(), 1); step > 0 {
		return fmt.Sprintf("step-%d", step)
	}
	return ""
}
