package replay

import (
	"fmt"
	"strings"
)

// MetricsRole says what a metrics endpoint describes: the serving engine
// (vLLM, SGLang, TGI: running and waiting requests, KV cache), the GPUs
// (a DCGM exporter), or the node (node_exporter). Only engine endpoints
// decide when the server is idle and feed its fingerprint.
type MetricsRole string

// Metrics roles.
const (
	RoleEngine MetricsRole = "engine"
	RoleGPU    MetricsRole = "gpu"
	RoleNode   MetricsRole = "node"
)

// MetricsRoles lists the roles.
var MetricsRoles = []MetricsRole{RoleEngine, RoleGPU, RoleNode}

// MetricsEndpoint is a Prometheus endpoint scraped during a run.
type MetricsEndpoint struct {
	Role MetricsRole
	URL  string
}

// ParseMetricsEndpoint reads "URL" (an engine endpoint) or "ROLE=URL".
func ParseMetricsEndpoint(s string) (MetricsEndpoint, error) {
	if role, u, ok := strings.Cut(s, "="); ok && !strings.Contains(role, "/") && !strings.Contains(role, ":") {
		for _, r := range MetricsRoles {
			if role == string(r) {
				return MetricsEndpoint{Role: r, URL: u}, nil
			}
		}
		return MetricsEndpoint{}, fmt.Errorf("%q is not a role: give engine=URL, gpu=URL (a DCGM exporter), node=URL, or a bare URL for the engine", role)
	}
	return MetricsEndpoint{Role: RoleEngine, URL: s}, nil
}

// metricsOf returns the endpoints of a role.
func (o *Watch) metricsOf(role MetricsRole) []MetricsEndpoint {
	var out []MetricsEndpoint
	for _, m := range o.Metrics {
		if m.Role == role {
			out = append(out, m)
		}
	}
	return out
}

// scrapePrefix names an endpoint's scrape files: "scrape-" for the first
// engine endpoint (the name every earlier run used), else the role and,
// past the first of a role, its rank ("gpu-scrape-", "gpu2-scrape-").
func scrapePrefix(eps []MetricsEndpoint, i int) string {
	rank := 1
	for _, e := range eps[:i] {
		if e.Role == eps[i].Role {
			rank++
		}
	}
	if eps[i].Role == RoleEngine && rank == 1 {
		return "scrape-"
	}
	if rank == 1 {
		return string(eps[i].Role) + "-scrape-"
	}
	return fmt.Sprintf("%s%d-scrape-", eps[i].Role, rank)
}
