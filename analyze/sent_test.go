package analyze

import (
	"math"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// sentRows: four requests with known shapes, in send order.
func sentRows() []trace.Result {
	mk := func(sent int64, tenant string, turn int32, prompt, intended, served int64, blocks []int64, feats []string, outcome string, gaps ...int64) trace.Result {
		first := sent + 100e6
		times := []int64{100e6}
		for _, g := range gaps {
			times = append(times, times[len(times)-1]+g)
		}
		done := sent + times[len(times)-1]
		r := trace.Result{Identity: trace.Identity{Tenant: tenant, Turn: turn}, ScheduledNs: sent, AdmittedNs: sent, SentNs: &sent,
			FirstTokenNs: &first, FirstChunkNs: &first, DoneNs: &done, TokenTimesNs: times, ObservedOutputTokens: int64(len(times)),
			PromptTokensSent: prompt, Outcome: outcome, ObservedFinishReason: "length",
			Shape: trace.Shape{Stream: true, InputTokens: intended, OutputTokens: 8, PrefixBlocks: blocks, Features: feats}}
		if served >= 0 {
			r.UsagePromptTokens = &served
		}
		return r
	}
	return []trace.Result{
		mk(0, "a", 0, 100, 100, 103, []int64{1, 2}, []string{"tools"}, trace.OutcomeOK, 10e6, 10e6, 700e6),
		mk(1e9, "a", 1, 200, 200, 200, []int64{1, 2, 3}, nil, trace.OutcomeOK, 20e6),
		mk(2e9, "b", 0, 300, 300, -1, []int64{4}, []string{"tools", "json"}, trace.OutcomeOK, 30e6, 600e6),
		mk(3e9, "b", 1, 400, 400, 398, []int64{1, 5}, nil, trace.OutcomeHTTPError),
	}
}

func TestSentSummaryHandComputed(t *testing.T) {
	s := summarizeSent(columnsOf(sentRows()))
	// Blocks in send order: {1,2} new, {1,2,3}: 1,2 reused, {4} new, {1,5}: 1 reused.
	// 3 reused of 8 blocks.
	if math.Abs(s.ReusedPrefixShare-3.0/8) > 1e-12 || s.PrefixKnown != 4 {
		t.Errorf("reused prefix share %v over %d requests, want 0.375 over 4", s.ReusedPrefixShare, s.PrefixKnown)
	}
	if s.FeatureShares["tools"] != 0.5 || s.FeatureShares["json"] != 0.25 {
		t.Errorf("feature shares %v, want tools 0.5, json 0.25", s.FeatureShares)
	}
	// Served minus intended: +3, 0, -2 (one request without usage).
	if g := s.PromptGap; g == nil || g.N != 3 || g.Max != 3 || g.P50 != 0 {
		t.Errorf("prompt gap %+v, want n 3, median 0, max 3", g)
	}
	// Input tokens 100..400: type-7 p50 = 250, p90 = 370.
	if s.InputTokens.P50 != 250 || math.Abs(s.InputTokens.P90-370) > 1e-9 || s.InputTokens.Max != 400 {
		t.Errorf("input tokens %+v, want p50 250, p90 370, max 400", s.InputTokens)
	}
	if s.OutputTokens.N != 3 || s.FinishReasons["length"] != 4 {
		t.Errorf("output tokens over %d ok requests (want 3), finish reasons %v", s.OutputTokens.N, s.FinishReasons)
	}
}

func TestSmoothnessHandComputed(t *testing.T) {
	rep := &Report{Metrics: map[string]Distribution{}}
	compute(rep, columnsOf(sentRows()), Options{Percentiles: []float64{50}, Stall: 500 * time.Millisecond})
	sm := rep.Smoothness
	// ok gaps: 10, 10, 700, 20, 30, 600 ms: two above 500 ms; the ok streams
	// carry 4 + 2 + 3 = 9 tokens.
	if sm.Stalls != 2 || sm.LongestStallMs != 700 || math.Abs(sm.StallsPer1kTokens-2000.0/9) > 1e-9 {
		t.Errorf("stalls %d (longest %v ms, %.2f per 1k tokens), want 2, 700, 222.22", sm.Stalls, sm.LongestStallMs, sm.StallsPer1kTokens)
	}
	// Per request mean gaps: (10+10+700)/3 = 240, 20, (30+600)/2 = 315.
	if d := rep.Metrics["itl_per_request_ms"]; d.N != 3 || d.Median != 240 || d.Max != 315 {
		t.Errorf("per-request ITL n %d median %v max %v, want 3, 240, 315", d.N, d.Median, d.Max)
	}
	gaps := []float64{10, 10, 700, 20, 30, 600}
	mean, ss := 0.0, 0.0
	for _, g := range gaps {
		mean += g / 6
	}
	for _, g := range gaps {
		ss += (g - mean) * (g - mean)
	}
	if want := math.Sqrt(ss/5) / mean; math.Abs(sm.ITLCV-want) > 1e-9 {
		t.Errorf("ITL CV %v, want %v", sm.ITLCV, want)
	}
}

func TestBreakdownByTenantAndTurn(t *testing.T) {
	c := columnsOf(sentRows())
	groups := breakdown(c, "tenant", Options{Percentiles: []float64{50}}, 4)
	if len(groups) != 2 || groups[0].Value != "a" || groups[0].Counted != 2 || groups[1].OK != 1 || groups[1].SuccessRate != 0.5 {
		t.Fatalf("tenant groups %+v", groups)
	}
	// Tenant a: TTFT 100 ms both; E2E 820 and 120 ms: p50 470.
	if e := groups[0].Metrics["e2e_ms"]; e.N != 2 || e.Quantiles[0].Value != 470 {
		t.Errorf("tenant a e2e %+v, want median 470 of 2", e)
	}
	if groups[0].RequestsPerS != 0.5 {
		t.Errorf("tenant a %.2f req/s over a 4 s span, want 0.5", groups[0].RequestsPerS)
	}
	turns := breakdown(c, "turn", Options{Percentiles: []float64{50}}, 4)
	if len(turns) != 2 || turns[0].Value != "0" || turns[1].Value != "1" {
		t.Errorf("turn groups %v %v", turns[0].Value, turns[1].Value)
	}
	// Prompts 100, 200 | 300, 400 tokens.
	if b := breakdown(c, "input_bucket", Options{Percentiles: []float64{50}}, 4); len(b) != 2 || b[0].Value != "0-255" || b[0].Counted != 2 || b[1].Value != "256-1023" || b[1].Counted != 2 {
		t.Errorf("input buckets: %d groups, first %q", len(b), b[0].Value)
	}
}
