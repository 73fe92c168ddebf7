package replay

import (
	"bufio"
	"context"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/trace"
)

// fixedWorkload writes n requests of the same shape (timing is replaced by
// --rate or closed loop).
func fixedWorkload(t *testing.T, n int, input, output int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "wl")
	w, err := trace.NewBucketWriter(dir, trace.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		w.Write(trace.Request{Identity: trace.Identity{RequestID: strconv.Itoa(i)}, TS: int64(i),
			Shape: trace.Shape{InputTokens: input, OutputTokens: output, MaxTokens: output, API: trace.APICompletions, Stream: true, N: 1}})
	}
	if err := w.Close(&trace.Manifest{}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// waitingSeries reads vllm:num_requests_waiting from a run's scrapes, as
// (seconds into the run, value).
func waitingSeries(t *testing.T, run string, files []string) (ts, vals []float64) {
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(run, f))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		var at float64
		for sc.Scan() {
			line := sc.Text()
			if i := strings.Index(line, "run_ns="); i >= 0 {
				ns, _ := strconv.ParseFloat(strings.Fields(line[i+7:])[0], 64)
				at = ns / 1e9
			}
			if strings.HasPrefix(line, "vllm:num_requests_waiting") {
				v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				ts, vals = append(ts, at), append(vals, v)
			}
		}
	}
	return ts, vals
}

// TestTimingOverloadAndRecovery measures the simulator's capacity closed
// loop, then drives it open loop at 1.5x capacity for 20 s: the waiting
// queue and TTFT must rise in every 5 s window while output throughput stays
// within 5% of capacity. At 0.7x for 12 s, the queue must be empty again
// within 2 s of any burst.
func TestTimingOverloadAndRecovery(t *testing.T) {
	skipUnderRace(t)
	o := sim.DefaultOptions()
	o.Engine.Cost = sim.CostModel{IterBase: 5 * time.Millisecond, PerPrefillToken: 20 * time.Microsecond, PerDecodeSeq: 500 * time.Microsecond}
	o.Engine.MaxNumSeqs = 16
	target := startSim(t, o)
	const in, out = 100, 40
	const overload, window, underload = 20 * time.Second, 5 * time.Second, 12 * time.Second

	// Capacity: closed loop with twice the running limit keeps the engine full.
	run := filepath.Join(t.TempDir(), "capacity")
	opts := DefaultOptions()
	opts.Target, opts.Concurrency, opts.Duration, opts.IgnoreEOS = target, 32, 6*time.Second, true
	if _, err := Run(context.Background(), fixedWorkload(t, 5000, in, out), run, opts); err != nil {
		t.Fatal(err)
	}
	rows, _ := trace.ReadResults(run)
	capTok := tokensPerSecond(rows, 1e9, 5e9)
	capRPS := capTok / out
	t.Logf("capacity: %.0f output tokens/s (%.1f requests/s)", capTok, capRPS)

	// 1.5x for 20 s.
	run = filepath.Join(t.TempDir(), "overload")
	opts = DefaultOptions()
	opts.Target, opts.Rate, opts.Seed, opts.Duration, opts.IgnoreEOS = target, 1.5*capRPS, 3, overload, true
	opts.Metrics, opts.MetricsInterval = []MetricsEndpoint{{Role: RoleEngine, URL: target + "/metrics"}}, 500*time.Millisecond
	opts.Timeout = 5 * time.Minute
	info, err := Run(context.Background(), fixedWorkload(t, int(1.5*capRPS*(overload.Seconds()+1)), in, out), run, opts)
	if err != nil {
		t.Fatal(err)
	}
	rows, _ = trace.ReadResults(run)
	ts, waiting := waitingSeries(t, run, info.Metrics)
	var prevWait, prevTTFT float64 = -1, -1
	for w := 0; w < int(overload/window); w++ {
		lo, hi := float64(w)*window.Seconds(), float64(w+1)*window.Seconds()
		// The queue at the end of the window (last scrape inside it).
		wait := -1.0
		for i := range ts {
			if ts[i] >= lo && ts[i] < hi {
				wait = waiting[i]
			}
		}
		ttft := medianTTFT(rows, lo, hi)
		tok := tokensPerSecond(rows, int64(lo*1e9), int64(hi*1e9))
		t.Logf("window %2.0f-%2.0fs: waiting %4.0f, TTFT median %7.1f ms, %5.0f tokens/s (%.3f of capacity)", lo, hi, wait, ttft, tok, tok/capTok)
		if w > 0 && (wait <= prevWait || ttft <= prevTTFT) {
			t.Errorf("window %d: waiting %v (was %v), TTFT %.1f ms (was %.1f): both must rise under overload", w, wait, prevWait, ttft, prevTTFT)
		}
		if w > 0 && math.Abs(tok/capTok-1) > 0.05 {
			t.Errorf("window %d: %.0f tokens/s, want capacity %.0f ± 5%%", w, tok, capTok)
		}
		prevWait, prevTTFT = wait, ttft
	}

	// Let the backlog drain, then 0.7x for 12 s with frequent scrapes.
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if scrapeGauge(t, target, "vllm:num_requests_waiting") == 0 && scrapeGauge(t, target, "vllm:num_requests_running") == 0 {
			break
		}
	}
	run = filepath.Join(t.TempDir(), "underload")
	opts = DefaultOptions()
	opts.Target, opts.Rate, opts.Seed, opts.Duration, opts.IgnoreEOS = target, 0.7*capRPS, 5, underload, true
	opts.Metrics, opts.MetricsInterval = []MetricsEndpoint{{Role: RoleEngine, URL: target + "/metrics"}}, 100*time.Millisecond
	info, err = Run(context.Background(), fixedWorkload(t, int(0.7*capRPS*(underload.Seconds()+1)), in, out), run, opts)
	if err != nil {
		t.Fatal(err)
	}
	ts, waiting = waitingSeries(t, run, info.Metrics)
	longest, start := 0.0, -1.0
	for i := range ts {
		switch {
		case waiting[i] > 0 && start < 0:
			start = ts[i]
		case waiting[i] == 0 && start >= 0:
			longest, start = math.Max(longest, ts[i]-start), -1
		}
	}
	t.Logf("at 0.7x capacity the queue was non-empty for at most %.1f s at a time (%d scrapes)", longest, len(ts))
	if longest > 2 || start >= 0 && ts[len(ts)-1]-start > 2 {
		t.Errorf("at 0.7x capacity the queue stayed non-empty for %.1f s; want it empty within 2 s of any burst", longest)
	}
}

// tokensPerSecond counts output token events received in [lo, hi) ns of the
// run and divides by the window.
func tokensPerSecond(rows []trace.Result, lo, hi int64) float64 {
	n := 0
	for _, r := range rows {
		if r.SentNs == nil {
			continue
		}
		for _, tt := range r.TokenTimesNs {
			if at := *r.SentNs + tt; at >= lo && at < hi {
				n++
			}
		}
	}
	return float64(n) / (float64(hi-lo) / 1e9)
}

// medianTTFT is the median TTFT in ms of requests scheduled in [lo, hi) s.
func medianTTFT(rows []trace.Result, lo, hi float64) float64 {
	var v []float64
	for _, r := range rows {
		if s := float64(r.ScheduledNs) / 1e9; s >= lo && s < hi && r.FirstTokenNs != nil {
			v = append(v, float64(*r.FirstTokenNs-*r.SentNs)/1e6)
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// scrapeGauge reads one gauge from the simulator's /metrics.
func scrapeGauge(t *testing.T, target, name string) float64 {
	t.Helper()
	resp, err := http.Get(target + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			return v
		}
	}
	return -1
}
