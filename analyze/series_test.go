package analyze

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// queueRun simulates a single FIFO server of fixed service time under
// piecewise constant arrival rates and returns its results.
func queueRun(service time.Duration, phases []struct {
	until time.Duration
	rate  float64
}) []trace.Result {
	var rows []trace.Result
	var t, free time.Duration
	for _, ph := range phases {
		gap := time.Duration(float64(time.Second) / ph.rate)
		for ; t < ph.until; t += gap {
			start := max(t, free)
			free = start + service
			sent, first, done := int64(t), int64(start+service/2), int64(free)
			rows = append(rows, trace.Result{ScheduledNs: int64(t), AdmittedNs: int64(t), SentNs: &sent, FirstTokenNs: &first, FirstChunkNs: &first,
				DoneNs: &done, TokenTimesNs: []int64{first - sent, done - sent}, ObservedOutputTokens: 2, Outcome: trace.OutcomeOK,
				Shape: trace.Shape{Stream: true}})
		}
	}
	return rows
}

// TestSeriesRegionsAndRecovery: a server of 20 req/s at 10 req/s for 30 s,
// 30 req/s for 10 s (the queue grows by 10 per second to 100), then 10
// req/s: the backlog drains at 10 per second, so the queue is back at
// t = 50 s. Expect steady, then saturated from 30 s, recovering after 40 s,
// and recovery (from the first break at 30 s) of 20-25 s with 5 s windows.
func TestSeriesRegionsAndRecovery(t *testing.T) {
	rows := queueRun(50*time.Millisecond, []struct {
		until time.Duration
		rate  float64
	}{{30 * time.Second, 10}, {40 * time.Second, 30}, {80 * time.Second, 10}})
	ser := timeSeries(columnsOf(rows), nil, Options{Window: 5 * time.Second})
	regions := ""
	for _, w := range ser.Windows {
		regions += w.Region[:2] + " "
	}
	t.Logf("regions: %s", regions)
	for _, w := range ser.Windows {
		switch {
		case w.StartS < 30 && w.Region != RegionSteady:
			t.Errorf("window at %.0f s is %s, want steady", w.StartS, w.Region)
		case w.StartS >= 30 && w.StartS < 40 && w.Region != RegionSaturated:
			t.Errorf("window at %.0f s is %s, want saturated", w.StartS, w.Region)
		case w.StartS >= 40 && w.StartS < 45 && w.Region != RegionRecovering:
			t.Errorf("window at %.0f s is %s, want recovering", w.StartS, w.Region)
		case w.StartS >= 55 && w.Region != RegionSteady:
			t.Errorf("window at %.0f s is %s, want steady again", w.StartS, w.Region)
		}
	}
	r := ser.Recovery
	if r == nil || r.RecoveryS == nil {
		t.Fatalf("no recovery measured: %+v", r)
	}
	if r.FirstBreakS != 30 || *r.LoadDropS != 40 || *r.RecoveryS < 20 || *r.RecoveryS > 25 {
		t.Errorf("recovery: break %.0f s, drop %v, recovery %.0f s; want 30, 40, 20-25", r.FirstBreakS, *r.LoadDropS, *r.RecoveryS)
	}
	if math.Abs(ser.Steady.TTFTP50Ms-25) > 1e-6 {
		t.Errorf("steady TTFT p50 %.3f ms, want 25 (half the service time, no queue)", ser.Steady.TTFTP50Ms)
	}
	// Throughput: 10 completions per second in steady windows.
	if w := ser.Windows[2]; w.CompletionRate != 10 || w.Sent != 50 {
		t.Errorf("steady window: %d sent, %.1f completions/s; want 50 and 10", w.Sent, w.CompletionRate)
	}
}

func TestParseScrape(t *testing.T) {
	text := `# servetrace scrape phase=during run_ns=5000000000 unix_ns=1
# HELP vllm:num_requests_running x
vllm:num_requests_running{model_name="a"} 3
vllm:num_requests_running{model_name="b"} 2
vllm:num_requests_waiting{model_name="a"} 7
vllm:kv_cache_usage_perc{model_name="a"} 0.25
other_metric 9
`
	s, ok := parseScrape([]byte(text))
	if !ok || s.atNs != 5e9 || s.running != 5 || s.waiting != 7 || s.kvUsed != 0.25 {
		t.Fatalf("parsed %+v ok %v", s, ok)
	}
	if _, ok := parseScrape([]byte("# servetrace scrape phase=during run_ns=1\n# scrape failed: refused\n")); ok {
		t.Error("a failed scrape was used")
	}
	cut, ok := parseScrape([]byte("# servetrace scrape phase=during run_ns=1\n" + trace.ScrapeCutPrefix + " the answer passed 33554432 bytes\nvllm:num_requests_running 1\n"))
	if !ok || !cut.cut || cut.running != 1 {
		t.Errorf("a cut scrape: %+v, %v; want it read and marked cut", cut, ok)
	}
	cut.file = "run/metrics/scrape-00001.prom"
	if n := scrapeNotes([]scrape{s, cut, cut}); len(n) != 1 || !strings.Contains(n[0], "2 metrics scrapes were cut short") || !strings.Contains(n[0], cut.file) {
		t.Errorf("notes %q", n)
	}
}

// TestSeriesColdStart: the first 10 s answer 4x slower (a cold cache),
// the next 5 s 1.3x: cold, cold, warm, then steady.
func TestSeriesColdStart(t *testing.T) {
	rows := queueRun(50*time.Millisecond, []struct {
		until time.Duration
		rate  float64
	}{{60 * time.Second, 10}})
	for i := range rows {
		r := &rows[i]
		slow := 1.0
		switch {
		case *r.SentNs < 10e9:
			slow = 4
		case *r.SentNs < 15e9:
			slow = 1.3
		}
		ft := *r.SentNs + int64(slow*float64(*r.FirstTokenNs-*r.SentNs))
		r.FirstTokenNs = &ft
	}
	ser := timeSeries(columnsOf(rows), nil, Options{Window: 5 * time.Second})
	want := []string{RegionCold, RegionCold, RegionWarm, RegionSteady, RegionSteady}
	for k, w := range want {
		if got := ser.Windows[k].Region; got != w {
			t.Errorf("window %d: %s, want %s", k, got, w)
		}
	}
	if ser.Recovery != nil {
		t.Errorf("a cold start is not an overload: %+v", ser.Recovery)
	}
}

// TestRegionTTFTKeepsSteadyApartFromSaturated: a FIFO server with random
// service times (lognormal around 40 ms, about 25 req/s) under Poisson
// arrivals of 10/s for 100 s, a flash crowd of 40/s for 10 s, then 10/s
// for 110 s. The steady region's p50 and p90 intervals must lie wholly
// below the saturated region's, and the whole run's p90, a mixture pulled
// up by the queued requests, above the steady one. (The steady p99 is not
// bounded: queueing correlates even calm requests, r1 ≈ 0.4, and 2,000 of
// them are worth too few independent ones.)
func TestRegionTTFTKeepsSteadyApartFromSaturated(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	var rows []trace.Result
	var at, free float64 // seconds
	for _, ph := range []struct{ until, rate float64 }{{100, 10}, {110, 40}, {220, 10}} {
		for at < ph.until {
			at += rng.ExpFloat64() / ph.rate
			start := math.Max(at, free)
			service := 0.04 * math.Exp(0.3*rng.NormFloat64())
			free = start + service
			sent, first, done := int64(at*1e9), int64((start+service/2)*1e9), int64(free*1e9)
			rows = append(rows, trace.Result{ScheduledNs: sent, AdmittedNs: sent, SentNs: &sent, FirstTokenNs: &first, FirstChunkNs: &first,
				DoneNs: &done, TokenTimesNs: []int64{first - sent, done - sent}, ObservedOutputTokens: 2, Outcome: trace.OutcomeOK,
				Shape: trace.Shape{Stream: true}})
		}
	}
	opts := Options{Window: 5 * time.Second, Percentiles: []float64{50, 90}, Bootstrap: BootstrapOptions{Resamples: 200}, Interval: IntervalAuto}
	ser := timeSeries(columnsOf(rows), nil, opts)
	steady, saturated := ser.RegionTTFT[RegionSteady], ser.RegionTTFT[RegionSaturated]
	if steady.N < 800 || saturated.N < 100 {
		t.Fatalf("steady %d requests, saturated %d: the regions were not found", steady.N, saturated.N)
	}
	for j := range steady.Quantiles {
		sq, qq := steady.Quantiles[j], saturated.Quantiles[j]
		if sq.Hi == nil || qq.Lo == nil || *sq.Hi >= *qq.Lo {
			t.Errorf("p%g: steady %s and saturated %s are not apart", sq.P, quantileCell(sq), quantileCell(qq))
		}
	}
	sp90, qp90 := steady.Quantiles[1], saturated.Quantiles[1]
	var all []float64
	for _, r := range rows {
		all = append(all, float64(*r.FirstTokenNs-*r.SentNs)/1e6)
	}
	whole := Summarize(all, []float64{90}).Quantiles[0].Value
	if sp90.Hi == nil || whole < 2**sp90.Hi {
		t.Errorf("whole-run p90 %.1f ms, steady p90 %s: the mixture should sit far above the steady state", whole, quantileCell(sp90))
	}
	if saturated.Dependence == nil || saturated.Dependence.Independent || saturated.Quantiles[1].Interval != intervalBatchName {
		t.Errorf("saturated requests (a growing queue) should test dependent and get batch means: %+v", saturated.Dependence)
	}
	t.Logf("TTFT p90: steady %s (%s), saturated %s (%s), whole run %.1f ms", quantileCell(sp90), intervalText(steady), quantileCell(qp90), intervalText(saturated), whole)
}

// TestSeriesAggregatePhases: the engine's phase histograms give each
// window the mean phase of the requests that finished in it, from the
// rise of _sum over the rise of _count since the scrape before the window
// (hand-computed below); buckets are not counted, labelled series are
// summed, and a histogram that went back (a restart) gives nothing.
func TestSeriesAggregatePhases(t *testing.T) {
	rows := queueRun(50*time.Millisecond, []struct {
		until time.Duration
		rate  float64
	}{{15 * time.Second, 10}})
	text := func(runNs int64, body string) scrape {
		s, ok := parseScrape([]byte(fmt.Sprintf("# servetrace scrape phase=during run_ns=%d\n%s", runNs, body)))
		if !ok {
			t.Fatalf("scrape at %d not read", runNs)
		}
		return s
	}
	scrapes := []scrape{
		text(1e9, `vllm:request_queue_time_seconds_bucket{le="+Inf"} 10
vllm:request_queue_time_seconds_sum 0.5
vllm:request_queue_time_seconds_count 10
vllm:request_prefill_time_seconds_sum 0.2
vllm:request_prefill_time_seconds_count 10
vllm:request_decode_time_seconds_sum 2
vllm:request_decode_time_seconds_count 10
vllm:e2e_request_latency_seconds_sum 2.7
vllm:e2e_request_latency_seconds_count 10
`),
		// Queue: (1.5 + 1.0 − 0.5) s over (20 + 10 − 10) requests = 100 ms;
		// prefill 0.4/20 = 20 ms; decode 4/20 = 200 ms; e2e 6.4/20 = 320 ms.
		text(6e9, `vllm:request_queue_time_seconds_bucket{model_name="a",le="+Inf"} 20
vllm:request_queue_time_seconds_sum{model_name="a"} 1.5
vllm:request_queue_time_seconds_count{model_name="a"} 20
vllm:request_queue_time_seconds_sum{model_name="b"} 1.0
vllm:request_queue_time_seconds_count{model_name="b"} 10
vllm:request_prefill_time_seconds_sum 0.6
vllm:request_prefill_time_seconds_count 30
vllm:request_decode_time_seconds_sum 6
vllm:request_decode_time_seconds_count 30
vllm:e2e_request_latency_seconds_sum 9.1
vllm:e2e_request_latency_seconds_count 30
`),
		// A restart: every count went back.
		text(11e9, `vllm:request_queue_time_seconds_sum 0.1
vllm:request_queue_time_seconds_count 2
vllm:e2e_request_latency_seconds_sum 0.3
vllm:e2e_request_latency_seconds_count 2
`),
	}
	ser := timeSeries(columnsOf(rows), scrapes, Options{Window: 5 * time.Second})
	if len(ser.Windows) < 3 {
		t.Fatalf("%d windows", len(ser.Windows))
	}
	near := func(p *float64, want float64) bool { return p != nil && math.Abs(*p-want) < 1e-9 }
	w0, w1, w2 := ser.Windows[0], ser.Windows[1], ser.Windows[2]
	if w0.AggQueueMs != nil || w0.AggE2EMs != nil {
		t.Errorf("window 0 has no scrape before it, yet gives queue %v e2e %v", w0.AggQueueMs, w0.AggE2EMs)
	}
	if !near(w1.AggQueueMs, 100) || !near(w1.AggPrefillMs, 20) || !near(w1.AggDecodeMs, 200) || !near(w1.AggE2EMs, 320) {
		t.Errorf("window 1: queue %v prefill %v decode %v e2e %v ms; want 100, 20, 200, 320",
			deref(w1.AggQueueMs), deref(w1.AggPrefillMs), deref(w1.AggDecodeMs), deref(w1.AggE2EMs))
	}
	if w2.AggQueueMs != nil || w2.AggE2EMs != nil {
		t.Errorf("window 2 follows a restart, yet gives queue %v e2e %v", deref(w2.AggQueueMs), deref(w2.AggE2EMs))
	}
}
