package synth

import "github.com/servetrace/servetrace/trace"

// ScenarioTenantSkew sends a share of requests from one tenant.
const ScenarioTenantSkew = "tenant-skew"

func init() { registerScenario(ScenarioTenantSkew, func() ScenarioParams { return &TenantSkew{} }) }

// TenantSkew gives Share (default 0.8) of the window's requests to Tenant
// (default "tenant-hot"): one noisy neighbour, for fairness and quotas.
type TenantSkew struct {
	baseHooks
	Share  float64 `json:"share,omitempty"`
	Tenant string  `json:"tenant,omitempty"`
}

func (p *TenantSkew) check(s *Scenario) error {
	if err := checkShare(s, &p.Share, 0.8); err != nil {
		return err
	}
	if err := checkLabel(s, trace.Identity{Tenant: p.Tenant}); err != nil {
		return err
	}
	orDefault(&p.Tenant, "tenant-hot")
	return nil
}

func (p *TenantSkew) apply(_ *Scenario, g *generator, r *trace.Request, _ float64) {
	if g.scenRng.Float64() < p.Share {
		r.Tenant = p.Tenant
	}
}
