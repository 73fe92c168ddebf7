package analyze

import "fmt"

// Energy is the GPUs' energy over a run, from a DCGM exporter scraped with
// --metrics-url: the energy counter's rise from the first scrape (before
// the run) to the last (after it), else the power samples integrated by
// the trapezoid rule over the same span.
type Energy struct {
	Joules float64 `json:"joules"`
	// Source is "energy counter" or "power samples".
	Source string  `json:"source"`
	SpanS  float64 `json:"span_s"`
	// MeanPowerW is Joules over SpanS.
	MeanPowerW float64 `json:"mean_power_w"`
	// PerOutputTokenJ is Joules over the run's ok output tokens.
	PerOutputTokenJ float64 `json:"per_output_token_j,omitempty"`
}

// energyOf returns the energy the scrapes (in time order) measured, or
// nil without two GPU scrapes of one endpoint. Each endpoint (a DCGM
// exporter per node) is measured on its own and the energies summed.
func energyOf(scrapes []scrape, outputTokens int64) *Energy {
	bySource := map[string][]scrape{}
	var order []string
	for _, s := range scrapes {
		if !s.hasEnergy && !s.hasPower {
			continue
		}
		if _, ok := bySource[s.source]; !ok {
			order = append(order, s.source)
		}
		bySource[s.source] = append(bySource[s.source], s)
	}
	var total *Energy
	for _, src := range order {
		e := endpointEnergy(bySource[src])
		if e == nil {
			continue
		}
		if total == nil {
			total = e
			continue
		}
		total.Joules += e.Joules
		total.SpanS = max(total.SpanS, e.SpanS)
		if e.Source != total.Source {
			total.Source = "energy counters and power samples"
		}
	}
	if total == nil {
		return nil
	}
	total.MeanPowerW = total.Joules / total.SpanS
	if outputTokens > 0 {
		total.PerOutputTokenJ = total.Joules / float64(outputTokens)
	}
	return total
}

// endpointEnergy is one endpoint's energy: the counter's rise from its
// first scrape to its last, else its power samples by the trapezoid rule.
func endpointEnergy(scrapes []scrape) *Energy {
	var first, last *scrape
	var power []scrape
	for i := range scrapes {
		s := &scrapes[i]
		if s.hasEnergy {
			if first == nil {
				first = s
			}
			last = s
		}
		if s.hasPower {
			power = append(power, *s)
		}
	}
	switch {
	case first != nil && last.atNs > first.atNs && last.energyMJ >= first.energyMJ:
		return &Energy{Joules: (last.energyMJ - first.energyMJ) / 1e3, Source: "energy counter", SpanS: float64(last.atNs-first.atNs) / 1e9}
	case len(power) >= 2 && power[len(power)-1].atNs > power[0].atNs:
		e := &Energy{Source: "power samples", SpanS: float64(power[len(power)-1].atNs-power[0].atNs) / 1e9}
		for i := 1; i < len(power); i++ {
			e.Joules += (power[i].powerW + power[i-1].powerW) / 2 * float64(power[i].atNs-power[i-1].atNs) / 1e9
		}
		return e
	}
	return nil
}

// energyText is the report's line on energy.
func energyText(e *Energy) string {
	return fmt.Sprintf("GPU energy (DCGM %s, %.1f s): %.0f J, mean %.0f W, %.3g J per output token", e.Source, e.SpanS, e.Joules, e.MeanPowerW, e.PerOutputTokenJ)
}
