package analyze

import (
	"fmt"
	"slices"

	"github.com/servetrace/servetrace/trace"
)

// SpecDecode is speculative decoding as the engine counted it over the run
// (each counter's rise from its first scrape, before the run, to its last,
// after it) and as the stream showed it (tokens per token event).
type SpecDecode struct {
	Drafts      float64 `json:"drafts"`
	DraftTokens float64 `json:"draft_tokens"`
	Accepted    float64 `json:"accepted_tokens"`
	// AcceptanceRate is accepted over draft tokens; MeanAcceptedLength is
	// the tokens each draft step yields, 1 + accepted / drafts.
	AcceptanceRate     float64 `json:"acceptance_rate"`
	MeanAcceptedLength float64 `json:"mean_accepted_length"`
	// TokensPerEvent is output tokens over token events, pooled over the
	// ok streamed requests; its p50 and p90 are over requests' own ratios.
	TokensPerEvent    float64 `json:"tokens_per_event"`
	TokensPerEventP50 float64 `json:"tokens_per_event_p50"`
	TokensPerEventP90 float64 `json:"tokens_per_event_p90"`
}

// specDecodeOf measures speculative decoding from the engine scrapes that
// carry vLLM's counters, or nil when none do (or none rose).
func specDecodeOf(scrapes []scrape, c *resultColumns) *SpecDecode {
	sd := specCounters(scrapes)
	if sd == nil {
		return nil
	}
	var tokens, events int64
	var ratios []float64
	for i := range c.n {
		n := int64(len(c.tokenTimesOf(i)))
		if c.warmup[i] || c.outcome[i] != trace.OutcomeOK || n == 0 {
			continue
		}
		tokens += c.observedOut[i]
		events += n
		ratios = append(ratios, float64(c.observedOut[i])/float64(n))
	}
	if events > 0 {
		slices.Sort(ratios)
		sd.TokensPerEvent = float64(tokens) / float64(events)
		sd.TokensPerEventP50, sd.TokensPerEventP90 = Percentile(ratios, 0.5), Percentile(ratios, 0.9)
	}
	return sd
}

// specCounters is speculative decoding as the engine's counters rose over
// the run, or nil when no scrape carries them (or none rose); the stream's
// tokens per event are the caller's to fill.
func specCounters(scrapes []scrape) *SpecDecode {
	bySource := map[string][2]*scrape{} // first and last
	for i := range scrapes {
		s := &scrapes[i]
		if !s.hasSpec {
			continue
		}
		fl := bySource[s.source]
		if fl[0] == nil {
			fl[0] = s
		}
		fl[1] = s
		bySource[s.source] = fl
	}
	sd := &SpecDecode{}
	for _, fl := range bySource {
		sd.Drafts += fl[1].specDrafts - fl[0].specDrafts
		sd.DraftTokens += fl[1].specDraftTokens - fl[0].specDraftTokens
		sd.Accepted += fl[1].specAccepted - fl[0].specAccepted
	}
	if sd.DraftTokens <= 0 || sd.Drafts <= 0 {
		return nil
	}
	sd.AcceptanceRate = sd.Accepted / sd.DraftTokens
	sd.MeanAcceptedLength = 1 + sd.Accepted/sd.Drafts
	return sd
}

// specDecodeText is the report's line on speculative decoding.
func specDecodeText(s *SpecDecode) string {
	return fmt.Sprintf("speculative decoding (engine counters): acceptance rate %.3f, mean accepted length %.2f tokens per step over %.0f steps; stream: %.2f tokens per event (per request p50 %.2f, p90 %.2f)",
		s.AcceptanceRate, s.MeanAcceptedLength, s.Drafts, s.TokensPerEvent, s.TokensPerEventP50, s.TokensPerEventP90)
}
