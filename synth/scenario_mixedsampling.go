package synth

import (
	"fmt"
	"math"
	"slices"

	"github.com/servetrace/servetrace/trace"
)

// ScenarioMixedSampling mixes sampling settings in its window.
const ScenarioMixedSampling = "mixed-sampling"

func init() {
	registerScenario(ScenarioMixedSampling, func() ScenarioParams { return &MixedSampling{} })
}

// samplingKinds are the keys of MixedSampling.Sampling.
var samplingKinds = []string{"greedy", "sampling", "json_schema", "logprobs"}

// MixedSampling gives each request in the window one of greedy, sampling,
// json_schema or logprobs by Sampling's shares (default equal), so a
// batch holds requests a server must decode differently.
type MixedSampling struct {
	baseHooks
	Sampling map[string]float64 `json:"sampling,omitempty"`
}

func (p *MixedSampling) check(s *Scenario) error {
	if len(p.Sampling) == 0 {
		p.Sampling = map[string]float64{"greedy": 1, "sampling": 1, "json_schema": 1, "logprobs": 1}
	}
	for k, v := range p.Sampling {
		if !slices.Contains(samplingKinds, k) || !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%s: sampling %q=%v: keys are greedy, sampling, json_schema, logprobs with shares ≥ 0", s.Name, k, v)
		}
	}
	return nil
}

func (p *MixedSampling) apply(_ *Scenario, g *generator, r *trace.Request, _ float64) {
	applySampling(r, pickShare(g.scenRng, p.Sampling))
}
