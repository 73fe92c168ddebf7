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
// nil without two GPU scrapes.
func energyOf(scrapes []scrape, outputTokens int64) *Energy {
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
	var e *Energy
	switch {
	case first != nil && last.atNs > first.atNs && last.energyMJ >= first.energyMJ:
		e = &Energy{Joules: (last.energyMJ - first.energyMJ) / 1e3, Source: "energy counter", SpanS: float64(last.atNs-first.atNs) / 1e9}
	case len(power) >= 2 && power[len(power)-1].atNs > power[0].atNs:
		e = &Energy{Source: "power samples", SpanS: float64(power[len(power)-1].atNs-power[0].atNs) / 1e9}
		for i := 1; i < len(power); i++ {
			e.Joules += (power[i].powerW + power[i-1].powerW) / 2 * float64(power[i].atNs-power[i-1].atNs) / 1e9
		}
	default:
		return nil
	}
	e.MeanPowerW = e.Joules / e.SpanS
	if outputTokens > 0 {
		e.PerOutputTokenJ = e.Joules / float64(outputTokens)
	}
	return e
}

// energyText is the report's line on energy.
func energyText(e *Energy) string {
	return fmt.Sprintf("GPU energy (DCGM %s, %.1f s): %.0f J, mean %.0f W, %.3g J per output token", e.Source, e.SpanS, e.Joules, e.MeanPowerW, e.PerOutputTokenJ)
}
