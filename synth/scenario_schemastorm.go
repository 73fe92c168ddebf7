package synth

import (
	"fmt"

	"github.com/servetrace/servetrace/trace"
)

// ScenarioSchemaStorm asks a share of requests for JSON schemas.
const ScenarioSchemaStorm = "schema-storm"

func init() { registerScenario(ScenarioSchemaStorm, func() ScenarioParams { return &SchemaStorm{} }) }

// SchemaStorm gives Share (default 0.5) of the window's requests a JSON
// schema of SchemaTokens (default 400), new each time (Schemas 0, the
// default) or one of Schemas: a grammar compiler's cache misses.
type SchemaStorm struct {
	baseHooks
	Share        float64 `json:"share,omitempty"`
	Schemas      int     `json:"schemas,omitempty"`
	SchemaTokens int64   `json:"schema_tokens,omitempty"`
}

func (p *SchemaStorm) check(s *Scenario) error {
	if err := checkShare(s, &p.Share, 0.5); err != nil {
		return err
	}
	orDefault(&p.SchemaTokens, 400)
	if p.Schemas < 0 || p.Schemas > MaxZipfN || p.SchemaTokens < 1 || p.SchemaTokens > MaxModelTokens {
		return fmt.Errorf("%s: schemas must be 0 to %d and schema_tokens 1 to %d", s.Name, MaxZipfN, MaxModelTokens)
	}
	return nil
}

func (p *SchemaStorm) apply(_ *Scenario, g *generator, r *trace.Request, _ float64) {
	rng := g.scenRng
	if !(rng.Float64() < p.Share) {
		return
	}
	r.Features = addLabel(r.Features, trace.FeatureSchema)
	r.OutputFormat, r.SchemaTokens = trace.OutputJSONSchema, p.SchemaTokens
	if p.Schemas > 0 {
		r.SchemaID = -int64(1 + rng.IntN(p.Schemas))
	} else {
		g.storm.fresh++
		r.SchemaID = -(1 << 40) - g.storm.fresh
	}
}
