package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/replay"
	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/trace"
)

// workload writes n requests of in prompt and out output tokens; a sweep
// by rate replaces their timing.
func workload(t *testing.T, n int, in, out int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "workload")
	w, err := trace.NewBucketWriter(dir, trace.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		r := trace.Request{Identity: trace.Identity{RequestID: "r" + strconv.Itoa(i)}, TS: t0.Add(time.Duration(i) * 10 * time.Millisecond).UnixMicro(),
			Shape: trace.Shape{InputTokens: in, OutputTokens: out, MaxTokens: out, API: trace.APICompletions, Stream: true, N: 1}}
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(&trace.Manifest{Kind: "workload", BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// serveSim serves a simulator through wrap (nil: as it is).
func serveSim(t *testing.T, o sim.Options, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	s, err := sim.New(o)
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(func() { hs.Close(); s.Close() })
	return hs.URL
}

func fastSim() sim.Options {
	o := sim.DefaultOptions()
	o.Engine.Cost = sim.CostModel{IterBase: time.Millisecond}
	return o
}

func baseOptions(configs ...Config) Options {
	o := DefaultOptions()
	o.Configs = configs
	o.Replay.Tokenizer = "cl100k_base"
	o.StepDuration, o.IdleTimeout = time.Second, 30*time.Second
	return o
}

// TestSweepWaitsForASlowDrainingServer: the server's metrics say requests
// are still running for 800 ms after it answered its last one, as a server
// draining a backlog does. Each step must start only after the metrics
// said idle, and sweep.json must record how long it waited.
func TestSweepWaitsForASlowDrainingServer(t *testing.T) {
	var lastServed atomic.Int64 // unix ns
	target := serveSim(t, fastSim(), func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/metrics" {
				busy := 0
				if time.Since(time.Unix(0, lastServed.Load())) < 800*time.Millisecond {
					busy = 2
				}
				fmt.Fprintf(w, "vllm:num_requests_running{model_name=\"m\"} %d\nvllm:num_requests_waiting{model_name=\"m\"} 0\n", busy)
				return
			}
			h.ServeHTTP(w, r)
			if r.Method == http.MethodPost {
				lastServed.Store(time.Now().UnixNano())
			}
		})
	})
	wl := workload(t, 200, 40, 4)
	o := baseOptions(Config{Name: "A", Target: target, Workload: wl})
	// One-second steps of 20 and 40 requests decide nothing at 99%: no
	// extensions, so that each level runs once.
	o.Levels, o.MaxExtensions = []float64{20, 40}, 0
	o.Replay.Metrics = []replay.MetricsEndpoint{{Role: replay.RoleEngine, URL: target + "/metrics"}}
	o.Replay.MetricsInterval = 200 * time.Millisecond
	var progress strings.Builder
	o.Progress = &progress
	dir := filepath.Join(t.TempDir(), "sweep")
	rec, err := Run(context.Background(), dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Steps) != 2 {
		t.Fatalf("%d steps, want 2", len(rec.Steps))
	}
	// Both levels' one-second steps are too short to pass, and the sweep
	// says so before it starts, in sweep.json and its progress.
	if len(rec.Notes) != 2 || !strings.HasPrefix(rec.Notes[0], "at 20 req/s a 1s step sends about 20 requests") ||
		!strings.Contains(progress.String(), "sweep note: at 40 req/s a 1s step sends about 40 requests") {
		t.Errorf("notes %q, progress:\n%s", rec.Notes, progress.String())
	}
	st := rec.Steps[1]
	if st.IdleWaitS == nil || *st.IdleWaitS < 0.3 {
		t.Errorf("step 2 waited %v s for the server to drain, want at least 0.3 s (it said busy for 800 ms after step 1)", st.IdleWaitS)
	}
	ri, err := trace.ReadRunInfo(filepath.Join(dir, st.RunDir))
	if err != nil {
		t.Fatal(err)
	}
	// Its schedule began only once the metrics said idle: 800 ms after
	// step 1's last answer (less 50 ms for the client's and the server's
	// clocks of that answer).
	if gap := time.Duration(ri.StartUnixNs - lastStepEnd(t, dir, rec.Steps[0])); gap < 750*time.Millisecond {
		t.Errorf("step 2 started %v after step 1's last answer; the server said busy for 800 ms", gap)
	}
	if ri.IdleWaitMs == nil || math.Abs(*ri.IdleWaitMs-*st.IdleWaitS*1e3) > 1e-6 {
		t.Errorf("run.json idle wait %v ms, sweep.json %v s", ri.IdleWaitMs, *st.IdleWaitS)
	}
}

// lastStepEnd is the wall time of a step's last response.
func lastStepEnd(t *testing.T, dir string, st Step) int64 {
	t.Helper()
	ri, err := trace.ReadRunInfo(filepath.Join(dir, st.RunDir))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := trace.ReadResults(filepath.Join(dir, st.RunDir))
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for _, r := range rows {
		if r.DoneNs != nil {
			last = max(last, *r.DoneNs)
		}
	}
	return ri.StartUnixNs + last
}

// TestSweepResumesAfterInterrupt: two configurations over two levels run
// A B B A; the sweep is interrupted in its second step and resumed: the
// done step is not run again, the interrupted step's files are kept aside,
// and the finished sweep has the order and results of an uninterrupted
// one.
func TestSweepResumesAfterInterrupt(t *testing.T) {
	wl := workload(t, 400, 30, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var armed atomic.Bool
	var served atomic.Int64
	a := serveSim(t, fastSim(), nil)
	b := serveSim(t, fastSim(), func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r)
			if r.Method == http.MethodPost && armed.Load() && served.Add(1) == 5 {
				cancel()
			}
		})
	})
	o := baseOptions(Config{Name: "A", Target: a, Workload: wl}, Config{Name: "B", Target: b, Workload: wl})
	o.Levels, o.Recovery = []float64{20, 40}, false
	o.MaxExtensions = 0 // steps of 20 and 40 requests decide nothing at 99%: each level runs once
	o.Replay.Grace = 200 * time.Millisecond
	dir := filepath.Join(t.TempDir(), "sweep")
	armed.Store(true)
	rec, err := Run(ctx, dir, o)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("interrupted sweep: %v, want ErrInterrupted", err)
	}
	if rec.Status != "interrupted" || len(rec.Steps) != 2 || rec.Steps[0].Status != "done" || rec.Steps[1].Status != "interrupted" {
		t.Fatalf("after the interrupt: status %s, steps %+v", rec.Status, rec.Steps)
	}
	firstRun := filepath.Join(dir, rec.Steps[0].RunDir, trace.RunInfoName)
	before, err := os.Stat(firstRun)
	if err != nil {
		t.Fatal(err)
	}
	// Without Resume the directory is refused; with another plan too.
	if _, err := Run(context.Background(), dir, o); err == nil || !strings.Contains(err.Error(), "already holds a sweep") {
		t.Errorf("a second sweep into the directory: %v", err)
	}
	other := o
	other.Resume, other.Levels = true, []float64{20, 80}
	if _, err := Run(context.Background(), dir, other); err == nil || !strings.Contains(err.Error(), "planned differently") {
		t.Errorf("resuming with other levels: %v", err)
	}
	armed.Store(false)
	o.Resume = true
	rec, err = Run(context.Background(), dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != "complete" {
		t.Errorf("resumed sweep: status %s (%s)", rec.Status, rec.Reason)
	}
	var order []string
	for _, st := range rec.Steps {
		switch st.Status {
		case "done":
			order = append(order, fmt.Sprintf("%s%g", st.Config, st.Level))
		case "set-aside":
			if !strings.HasSuffix(st.RunDir, ".interrupted") {
				t.Errorf("set-aside step %d at %s", st.Index, st.RunDir)
			}
			if _, err := os.Stat(filepath.Join(dir, st.RunDir, trace.RunInfoName)); err != nil {
				t.Errorf("the interrupted step's files: %v", err)
			}
		default:
			t.Errorf("step %d: status %s", st.Index, st.Status)
		}
	}
	if got := strings.Join(order, " "); got != "A20 B20 B40 A40" {
		t.Errorf("done steps %s, want A20 B20 B40 A40", got)
	}
	after, err := os.Stat(firstRun)
	if err != nil || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("step 1 was run again: %v", err)
	}
	if len(rec.Results) != 2 || rec.Results[0].Config != "A" || len(rec.Results[0].Levels) != 2 {
		t.Fatalf("results %+v", rec.Results)
	}
	// analyze reads the sweep directory, whole or by configuration.
	for arg, want := range map[string]int{dir: 4, dir + "#B": 2} {
		dirs, err := analyze.ExpandRunDirs(arg)
		if err != nil || len(dirs) != want {
			t.Errorf("ExpandRunDirs(%s) = %v, %v; want %d run dirs", arg, dirs, err, want)
		}
	}
	if _, err := analyze.ExpandRunDirs(dir + "#C"); err == nil {
		t.Error("a configuration the sweep lacks was accepted")
	}
	var summary strings.Builder
	if err := WriteSummary(&summary, rec); err != nil || !strings.Contains(summary.String(), "configuration B") {
		t.Errorf("summary: %v\n%s", err, summary.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "envelope.html")); err != nil {
		t.Errorf("envelope.html: %v", err)
	}
}

// tokenCostSim is a simulator whose iteration cost is per token only (no
// fixed part) and without prefix caching, so its capacity does not depend
// on batching: each request costs up to 100 × 150 µs of prefill and 19 ×
// 600 µs of decode (the prefill yields the first token), about 26 ms, for
// a capacity near 38 requests per second: few enough events per second
// that the client and the simulator leave each other CPU on 2 cores, which
// keeps the capacity the same from one step to the next. Past it, a
// 1.5-second step's backlog grows by the overload's share of 1.5 s, so the
// SLO's 100 ms is crossed within about a resolution step of it.
func tokenCostSim() sim.Options {
	o := sim.DefaultOptions()
	o.Engine.Cost = sim.CostModel{PerPrefillToken: 150 * time.Microsecond, PerDecodeSeq: 600 * time.Microsecond}
	o.Engine.PrefixCaching = false
	return o
}

// TestTimingSearchMatchesExhaustiveSweep: against the token-cost
// simulator, the search's highest SLO-meeting rate lies within one
// resolution step of the rate an exhaustive sweep at that resolution
// finds, and the search ran no more steps than its bound.
func TestTimingSearchMatchesExhaustiveSweep(t *testing.T) {
	if raceEnabled {
		t.Skip("timing test: run without -race (make test-timing)")
	}
	target := serveSim(t, tokenCostSim(), nil)
	wl := workload(t, 3000, 100, 20)
	slo, err := analyze.ParseSLO("ttft=100ms")
	if err != nil {
		t.Fatal(err)
	}
	const res = 0.1
	setup := func(o *Options) {
		o.SLO, o.Attainment, o.StepDuration = slo, 0.9, 1500*time.Millisecond
		// Constant arrivals: a 2-second Poisson step's offered rate strays
		// from its level by about the resolution.
		o.Replay.Arrival = replay.ArrivalConstant
		o.Replay.Metrics = []replay.MetricsEndpoint{{Role: replay.RoleEngine, URL: target + "/metrics"}}
	}
	// Exhaustive: every rate from 33 req/s (three quarters of capacity)
	// up by 10% to past it.
	ex := baseOptions(Config{Name: "A", Target: target, Workload: wl})
	setup(&ex)
	ex.Recovery = false
	for r := 33.0; r < 56; r *= 1 + res {
		ex.Levels = append(ex.Levels, round4(r))
	}
	exRec, err := Run(context.Background(), filepath.Join(t.TempDir(), "exhaustive"), ex)
	if err != nil {
		t.Fatal(err)
	}
	truth := exRec.Results[0]
	if truth.MaxLevel == nil || truth.Bracket[1] == 0 {
		t.Fatalf("the exhaustive sweep did not bracket the limit: %+v", truth)
	}
	// Search from a quarter of capacity.
	se := baseOptions(Config{Name: "A", Target: target, Workload: wl})
	setup(&se)
	se.Search = &Search{Start: 12, Growth: 2, Resolution: res, Max: 1000, Min: 1}
	se.MaxExtensions = 1
	se.Recovery = false // TestTimingRecoveryMeasuresTheBacklog's
	seRec, err := Run(context.Background(), filepath.Join(t.TempDir(), "search"), se)
	if err != nil {
		t.Fatal(err)
	}
	found := seRec.Results[0]
	if found.MaxLevel == nil {
		t.Fatalf("the search found no rate meeting the SLO: %+v", seRec.Decisions)
	}
	ratio := *found.MaxLevel / *truth.MaxLevel
	t.Logf("exhaustive: %g req/s, bracket %v; search: %g req/s, bracket %v, in %d steps (bound %d)",
		*truth.MaxLevel, truth.Bracket, *found.MaxLevel, found.Bracket, len(seRec.Steps), se.Search.BoundFor(found.Bracket[1], se.MaxExtensions))
	if ratio > (1+res)*1.001 || ratio < 1/((1+res)*1.001) {
		t.Errorf("search found %g req/s, the exhaustive sweep %g: more than one resolution step (%g) apart\nsearch: %s",
			*found.MaxLevel, *truth.MaxLevel, res, strings.Join(seRec.Decisions, "\n"))
	}
	if bound := se.Search.BoundFor(found.Bracket[1], se.MaxExtensions); len(seRec.Steps) > bound {
		t.Errorf("the search ran %d steps, more than its bound %d", len(seRec.Steps), bound)
	}
}

// TestTimingShortStepAboveCapacityFails (issue 41): a 4-second step at
// 1.3 times the token-cost simulator's capacity (26.4 ms of work a
// request: 37.9 req/s) meets an SLO of TTFT ≤ 3 s for 90% of its
// requests, its queue not yet grown to it; it must fail as not steady,
// never pass, while a step at 0.6 times capacity passes, steady.
func TestTimingShortStepAboveCapacityFails(t *testing.T) {
	if raceEnabled {
		t.Skip("timing test: run without -race (make test-timing)")
	}
	target := serveSim(t, tokenCostSim(), nil)
	wl := workload(t, 1000, 100, 20)
	capacity := 1 / (100*150e-6 + 19*600e-6)
	o := baseOptions(Config{Name: "A", Target: target, Workload: wl})
	o.SLO, o.Attainment, o.StepDuration, o.Recovery = analyze.SLO{TTFT: 3 * time.Second}, 0.9, 4*time.Second, false
	o.Levels = []float64{round4(0.6 * capacity), round4(1.3 * capacity)}
	o.Replay.Arrival = replay.ArrivalConstant
	dir := filepath.Join(t.TempDir(), "sweep")
	rec, err := Run(context.Background(), dir, o)
	if err != nil {
		t.Fatal(err)
	}
	under, over := rec.Steps[0], rec.Steps[1]
	t.Logf("0.6×: %s, attainment %.3f, steadiness %+v", under.Verdict, under.Attainment, under.Steadiness)
	t.Logf("1.3×: %s, attainment %.3f, steadiness %+v", over.Verdict, over.Attainment, over.Steadiness)
	if under.Verdict != pass || under.Steadiness == nil || !under.Steadiness.Steady {
		t.Errorf("0.6× capacity: %s, steadiness %+v; want a steady pass", under.Verdict, under.Steadiness)
	}
	if over.Verdict == pass || over.Steadiness == nil || over.Steadiness.Steady {
		t.Errorf("1.3× capacity for 4 s: %s (attainment %.3f), steadiness %+v; want it failed as not steady", over.Verdict, over.Attainment, over.Steadiness)
	}
	lv := rec.Results[0].Levels[1]
	if lv.Verdict != fail || lv.Judged != "not steady" || !strings.Contains(lv.NotSteady, "not steady") {
		t.Errorf("the level at 1.3×: %+v", lv)
	}
	var summary strings.Builder
	if err := WriteSummary(&summary, rec); err != nil || !strings.Contains(summary.String(), "fail (not steady)") {
		t.Errorf("summary: %v\n%s", err, summary.String())
	}
	// Each step's prompts are other text: a server's prefix cache keeps
	// none of an earlier step's for a later one.
	salts := map[float64]bool{}
	for _, st := range rec.Steps {
		var ri struct {
			Options struct {
				PromptSalt float64 `json:"prompt_salt"`
			} `json:"options"`
		}
		raw, err := os.ReadFile(filepath.Join(dir, st.RunDir, trace.RunInfoName))
		if err != nil || json.Unmarshal(raw, &ri) != nil || ri.Options.PromptSalt == 0 {
			t.Errorf("step %d: prompt_salt %v (%v)", st.Index, ri.Options.PromptSalt, err)
		}
		salts[ri.Options.PromptSalt] = true
	}
	if len(salts) != len(rec.Steps) {
		t.Errorf("%d steps share %d prompt salts", len(rec.Steps), len(salts))
	}
}

// TestTimingRecoveryMeasuresTheBacklog: a step 18% past the token-cost
// simulator's capacity leaves a backlog; the recovery step that follows,
// at the level that passed, starts on it without waiting, and its TTFT
// comes back within the reference some time into the step, as the
// backlog drains.
func TestTimingRecoveryMeasuresTheBacklog(t *testing.T) {
	if raceEnabled {
		t.Skip("timing test: run without -race (make test-timing)")
	}
	target := serveSim(t, tokenCostSim(), nil)
	wl := workload(t, 3000, 100, 20)
	o := baseOptions(Config{Name: "A", Target: target, Workload: wl})
	o.Levels, o.StepDuration, o.Attainment = []float64{15, 45}, 2500*time.Millisecond, 0.9
	o.SLO = analyze.SLO{TTFT: 100 * time.Millisecond}
	o.Replay.Arrival = replay.ArrivalConstant
	o.Replay.Metrics = []replay.MetricsEndpoint{{Role: replay.RoleEngine, URL: target + "/metrics"}}
	o.Replay.MetricsInterval = 250 * time.Millisecond
	dir := filepath.Join(t.TempDir(), "sweep")
	rec, err := Run(context.Background(), dir, o)
	if err != nil {
		t.Fatal(err)
	}
	var purposes []string
	for _, s := range rec.Steps {
		purposes = append(purposes, fmt.Sprintf("%s:%g", s.Purpose, s.Level))
	}
	if got := strings.Join(purposes, " "); got != "level:15 level:45 recovery:15" || rec.Steps[0].Verdict != pass || rec.Steps[1].Verdict != fail {
		t.Fatalf("steps %s (%s, %s), want a pass at 15, a failure at 45, then recovery at 15", got, rec.Steps[0].Verdict, rec.Steps[1].Verdict)
	}
	// The recovery replay itself starts on the overload's backlog: no
	// idle wait in its run.json.
	rri, err := trace.ReadRunInfo(filepath.Join(dir, rec.Steps[2].RunDir))
	if err != nil {
		t.Fatal(err)
	}
	if rri.IdleWaitMs != nil {
		t.Errorf("the recovery replay waited %v ms for an idle server", *rri.IdleWaitMs)
	}
	if rec.Steps[2].OverloadRunDir == "" || rec.Steps[2].OverloadLevel != 45 {
		t.Errorf("recovery step's overload: %q at %g", rec.Steps[2].OverloadRunDir, rec.Steps[2].OverloadLevel)
	}
	r := rec.Results[0].Recovery
	if r == nil {
		t.Fatal("no recovery result")
	}
	t.Logf("recovery: %s (step p99 %.0f ms)", r.Note, r.StepP99Ms)
	// The backlog of 2.5 s at about 18% over capacity drains in about a
	// second at a third of capacity.
	if r.RecoveredAfterS == nil || *r.RecoveredAfterS < 0.5 || *r.RecoveredAfterS >= 2.5 {
		t.Errorf("recovered after %v s, want within the step and after the backlog's first half second", r.RecoveredAfterS)
	}
	if r.StepP99Ms <= r.RefP99Ms {
		t.Errorf("the recovery step's p99 TTFT %.0f ms is not above the level's own %.0f ms: it met no backlog", r.StepP99Ms, r.RefP99Ms)
	}
}

// TestTimingSweepFailsALevelWhoseAnswersGoWrong: a simulator that
// answers wrong once 5 requests are in it (1 ms iterations, no queue: at
// most 2 in flight at 20 req/s, a request and its probe; about 10 at 400
// req/s) passes the low level with every probe right and fails the high
// one on accuracy, however fast it was. Timing: the requests in flight
// follow the client's real rate, which -race slows.
func TestTimingSweepFailsALevelWhoseAnswersGoWrong(t *testing.T) {
	if raceEnabled {
		t.Skip("timing test: run without -race (make test-timing)")
	}
	so := fastSim()
	so.CorruptShare, so.CorruptInFlight = 1, 5
	target := serveSim(t, so, nil)
	wl := workload(t, 2000, 20, 20)
	o := baseOptions(Config{Name: "A", Target: target, Workload: wl})
	o.SLO, o.Attainment, o.Recovery = analyze.SLO{TTFT: 10 * time.Second}, 0.5, false
	o.Levels, o.MinAccuracy = []float64{20, 400}, 0.9
	o.Replay.Arrival, o.Replay.Probes = replay.ArrivalConstant, 0.3
	rec, err := Run(context.Background(), filepath.Join(t.TempDir(), "sweep"), o)
	if err != nil {
		t.Fatal(err)
	}
	low, high := rec.Steps[0], rec.Steps[1]
	if low.Accuracy == nil || low.Accuracy.Graded == 0 || low.Accuracy.Correct != low.Accuracy.Graded || low.Inaccurate != "" {
		t.Errorf("20 req/s: accuracy %+v, %q; want every probe right", low.Accuracy, low.Inaccurate)
	}
	if high.Accuracy == nil || high.Accuracy.Graded < 50 || high.Accuracy.Accuracy > 0.5 || high.Verdict != fail || !strings.Contains(high.Inaccurate, "below the accuracy floor 90.0%") {
		t.Errorf("400 req/s: accuracy %+v, verdict %s, %q; want most probes wrong and the step failed for it", high.Accuracy, high.Verdict, high.Inaccurate)
	}
	lv := rec.Results[0].Levels
	if len(lv) != 2 || lv[0].Verdict != pass || lv[1].Verdict != fail || lv[1].Inaccurate == "" {
		t.Errorf("levels %+v", lv)
	}
	var summary strings.Builder
	if err := WriteSummary(&summary, rec); err != nil || !strings.Contains(summary.String(), "below the accuracy floor") {
		t.Errorf("summary: %v\n%s", err, summary.String())
	}
}
