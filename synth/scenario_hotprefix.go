package synth

import "fmt"

// ScenarioHotPrefixShift rotates the hot prefixes at its start.
const ScenarioHotPrefixShift = "hot-prefix-shift"

func init() {
	registerScenario(ScenarioHotPrefixShift, func() ScenarioParams { return &HotPrefixShift{} })
}

// HotPrefixShift reuses no prefix seen before At from At on: the hot set
// rotates, as when a product launch changes what users send. It has no
// keys of its own; At is required.
type HotPrefixShift struct{ baseHooks }

func (p *HotPrefixShift) check(s *Scenario) error {
	if s.At == 0 {
		return fmt.Errorf("%s: needs at=DURATION (when the hot prefixes rotate)", s.Name)
	}
	return nil
}

func (p *HotPrefixShift) prefix(s *Scenario, g *prefixGen) { g.shiftAt = s.At.Seconds() }

// phase labels every row from the shift on: once rotated, the set stays.
func (p *HotPrefixShift) phase(s *Scenario, t float64) string {
	if s.started(t) {
		return s.Name
	}
	return ""
}
