package analyze

import (
	"math"
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
