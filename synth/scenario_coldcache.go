package synth

// ScenarioColdCache reuses no prefix in its window.
const ScenarioColdCache = "cold-cache"

func init() { registerScenario(ScenarioColdCache, func() ScenarioParams { return &ColdCache{} }) }

// ColdCache reuses no prefix in the window, sessions' history included,
// as a freshly started server sees it. It has no keys of its own.
type ColdCache struct{ baseHooks }

func (p *ColdCache) prefix(s *Scenario, g *prefixGen) { g.cold = s.active }
