package synth

import (
	"fmt"

	"github.com/servetrace/servetrace/trace"
)

// ScenarioVersionSwitch renames the model from its start on.
const ScenarioVersionSwitch = "version-switch"

func init() {
	registerScenario(ScenarioVersionSwitch, func() ScenarioParams { return &VersionSwitch{} })
}

// VersionSwitch renames requests' model From (empty: every model) To from
// At on, as a deployment rolling out a new version. To and At are
// required.
type VersionSwitch struct {
	baseHooks
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
}

func (p *VersionSwitch) check(s *Scenario) error {
	if err := checkLabel(s, trace.Identity{Model: p.To}); err != nil {
		return err
	}
	if p.To == "" {
		return fmt.Errorf("%s: needs to=MODEL (the model requests switch to)", s.Name)
	}
	if s.At == 0 {
		return fmt.Errorf("%s: needs at=DURATION (when the switch happens)", s.Name)
	}
	return nil
}

// phase labels every row from the switch on: a switch stays made.
func (p *VersionSwitch) phase(s *Scenario, t float64) string {
	if s.started(t) {
		return s.Name
	}
	return ""
}

func (p *VersionSwitch) apply(_ *Scenario, _ *generator, r *trace.Request, _ float64) {
	if p.From == "" || r.Model == p.From {
		r.Model = p.To
	}
}
