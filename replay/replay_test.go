package replay

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/trace"
)

// workload writes n requests spaced gap apart into a new bucket. Every third
// request shares a two-block prefix with the others.
func workload(t *testing.T, n int, gap time.Duration) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "workload")
	w, err := trace.NewBucketWriter(dir, trace.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		r := trace.Request{
			Identity: trace.Identity{RequestID: "req-" + string(rune('A'+i%26)) + "-" + time.Duration(i).String()},
			TS:       t0.Add(time.Duration(i) * gap).UnixMicro(),
			Shape:    trace.Shape{InputTokens: int64(20 + i%50), OutputTokens: int64(1 + i%7), MaxTokens: int64(1 + i%7), API: trace.APIChat, Stream: true, N: 1},
		}
		if i%3 == 0 {
			r.API = trace.APICompletions
			for b := range (r.InputTokens + 15) / 16 {
				id := int64(1000*i) + b // unique beyond the first two blocks
				if b < 2 {
					id = 11 + b
				}
				r.PrefixBlocks = append(r.PrefixBlocks, id)
			}
		}
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(&trace.Manifest{Kind: "workload", BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func startSim(t *testing.T, opts sim.Options) string {
	t.Helper()
	s, err := sim.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := s.Start("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return rs.URL
}

// startSimBehind serves a simulator through wrap, for a test that acts on
// what the server has seen.
func startSimBehind(t *testing.T, opts sim.Options, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	s, err := sim.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(wrap(s.Handler()))
	t.Cleanup(func() { hs.Close(); s.Close() })
	return hs.URL
}

// cancelAfterServed wraps a handler to call cancel once it has answered n
// generation requests (POSTs; not /v1/models or /health), so a test
// interrupts a run on its progress instead of after a fixed time that
// would also have to cover the run's setup.
func cancelAfterServed(n int64, cancel func()) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		var served atomic.Int64
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r)
			if r.Method == http.MethodPost && served.Add(1) == n {
				cancel()
			}
		})
	}
}

func fastSim() sim.Options {
	o := sim.DefaultOptions()
	o.Engine.Cost = sim.CostModel{IterBase: time.Millisecond}
	return o
}

func TestEveryScheduledRequestHasExactlyOneResult(t *testing.T) {
	o := fastSim()
	o.FailRate, o.StreamErrorRate, o.Seed = 0.2, 0.15, 3
	target := startSim(t, o)
	wl := workload(t, 120, 5*time.Millisecond)
	run := filepath.Join(t.TempDir(), "run")
	opts := DefaultOptions()
	opts.Target = target
	rows, info := runAndRead(t, wl, run, opts)
	if len(rows) != 120 || info.Scheduled != 120 || !info.Complete {
		t.Fatalf("%d result rows, %d scheduled, complete %v; want 120, 120, true", len(rows), info.Scheduled, info.Complete)
	}
	seen := map[string]int{}
	count := map[string]int{}
	for _, r := range rows {
		seen[r.RequestID]++
		count[r.Outcome]++
		if r.RunID != info.RunID || r.Model != sim.DefaultModel {
			t.Errorf("row %s: run id %q model %q", r.RequestID, r.RunID, r.Model)
		}
		switch r.Outcome {
		case trace.OutcomeOK:
			// The simulator counts the prompt with the real tokenizer: an
			// independent check that prompts have the exact token count.
			if r.UsagePromptTokens == nil || *r.UsagePromptTokens != r.InputTokens || r.PromptTokensSent != r.InputTokens {
				t.Errorf("row %s: server counted %v prompt tokens, workload asked %d", r.RequestID, r.UsagePromptTokens, r.InputTokens)
			}
			if r.ObservedOutputTokens != r.MaxTokens || int64(len(r.TokenTimesNs)) != r.MaxTokens {
				t.Errorf("row %s: %d tokens in %d events, want %d", r.RequestID, r.ObservedOutputTokens, len(r.TokenTimesNs), r.MaxTokens)
			}
			if *r.FirstTokenNs < *r.SentNs || *r.DoneNs < *r.FirstTokenNs {
				t.Errorf("row %s: times out of order", r.RequestID)
			}
		case trace.OutcomeHTTPError:
			if r.HTTPStatus != 500 || !strings.Contains(r.Error, "injected fault") {
				t.Errorf("row %s: http_error with status %d, error %q", r.RequestID, r.HTTPStatus, r.Error)
			}
		case trace.OutcomeStreamError:
			if r.HTTPStatus != 200 {
				t.Errorf("row %s: stream_error with status %d", r.RequestID, r.HTTPStatus)
			}
		default:
			t.Errorf("row %s: unexpected outcome %s (%s)", r.RequestID, r.Outcome, r.Error)
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("request %s has %d results", id, n)
		}
	}
	if len(seen) != 120 {
		t.Errorf("%d distinct request ids, want 120", len(seen))
	}
	if count[trace.OutcomeHTTPError] == 0 || count[trace.OutcomeStreamError] == 0 || count[trace.OutcomeOK] == 0 {
		t.Errorf("outcomes %v: want ok, http_error and stream_error all present", count)
	}
	for k, v := range count {
		if info.Outcomes[k] != int64(v) {
			t.Errorf("run.json counts %d %s, results hold %d", info.Outcomes[k], k, v)
		}
	}
	ri, err := trace.ReadRunInfo(run)
	if err != nil || ri.RunID != info.RunID || ri.StartUnixNs == 0 || ri.OfferedRate <= 0 {
		t.Fatalf("run.json: %+v, %v", ri, err)
	}
}

func TestUnreachableEndpointWritesNothing(t *testing.T) {
	wl := workload(t, 3, time.Millisecond)
	run := filepath.Join(t.TempDir(), "run")
	opts := DefaultOptions()
	opts.Target = "http://127.0.0.1:1"
	_, err := Run(context.Background(), wl, run, opts)
	if err == nil || !strings.Contains(err.Error(), "cannot reach endpoint http://127.0.0.1:1") || !strings.Contains(err.Error(), "servetrace sim") {
		t.Fatalf("err = %v; want it to name the endpoint and how to start one", err)
	}
	if _, serr := os.Stat(run); serr == nil {
		t.Error("a failed preflight created the run directory")
	}
}

func TestInterruptedRunRecordsEveryRequest(t *testing.T) {
	// Interrupt once the server has answered the first 3 requests (about
	// 200 ms into a 4 s schedule), however long the run took to set up.
	const served = 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	target := startSimBehind(t, fastSim(), cancelAfterServed(served, cancel))
	wl := workload(t, 40, 100*time.Millisecond) // 4 s of schedule
	run := filepath.Join(t.TempDir(), "run")
	opts := DefaultOptions()
	opts.Target = target
	info, err := Run(ctx, wl, run, opts)
	if err != nil {
		t.Fatal(err)
	}
	rows, _ := trace.ReadResults(run)
	if len(rows) != 40 || info.Complete || !strings.Contains(info.Reason, "interrupted") {
		t.Fatalf("%d rows, complete %v (%s); want 40 rows and an incomplete run", len(rows), info.Complete, info.Reason)
	}
	if info.Outcomes[trace.OutcomeNotSent] < 20 || info.Outcomes[trace.OutcomeOK] < served {
		t.Errorf("outcomes %v: want most not_sent and the %d answered before the interrupt ok", info.Outcomes, served)
	}
}

func TestBuildPlan(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 10, 0, 0, 0, time.UTC)
	reqs := make([]trace.Request, 10)
	for i := range reqs {
		reqs[i].TS = t0.Add(time.Duration(i) * time.Second).UnixMicro() // one per second
	}
	cases := []struct {
		name   string
		opts   Options
		count  int
		first  time.Duration // offset of the first planned request
		last   time.Duration
		warmup int // how many are marked warmup
	}{
		{"as logged", Options{Schedule: Schedule{Speed: 1}}, 10, 0, 9 * time.Second, 0},
		{"twice as fast", Options{Schedule: Schedule{Speed: 2}}, 10, 0, 4500 * time.Millisecond, 0},
		{"duration cut", Options{Schedule: Schedule{Speed: 1, Duration: 3 * time.Second}}, 3, 0, 2 * time.Second, 0},
		{"max requests", Options{Schedule: Schedule{Speed: 0.5, MaxRequests: 4}}, 4, 0, 6 * time.Second, 0},
		{"constant rate replaces timing", Options{Schedule: Schedule{Speed: 1, Rate: 4, Arrival: ArrivalConstant}}, 10, 0, 2250 * time.Millisecond, 0},
		{"warmup by count", Options{Schedule: Schedule{Speed: 1, WarmupRequests: 3}}, 10, 0, 9 * time.Second, 3},
		{"warmup by time", Options{Schedule: Schedule{Speed: 1, WarmupDuration: 2500 * time.Millisecond}}, 10, 0, 9 * time.Second, 3},
		{"window by offsets", Options{Schedule: Schedule{Speed: 1, From: "3s", To: "6s"}}, 3, 0, 2 * time.Second, 0},
		{"window by RFC 3339", Options{Schedule: Schedule{Speed: 1, From: "2024-01-01T10:00:05Z"}}, 5, 0, 4 * time.Second, 0},
		{"window with lead-in", Options{Schedule: Schedule{Speed: 1, From: "5s", To: "7s", LeadIn: 2 * time.Second}}, 4, 0, 3 * time.Second, 2},
	}
	for _, c := range cases {
		plan, err := collectPlan(reqs, &c.opts)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		warm := 0
		for _, p := range plan {
			if p.warmup {
				warm++
			}
		}
		if len(plan) != c.count || time.Duration(plan[0].scheduledNs) != c.first || time.Duration(plan[len(plan)-1].scheduledNs) != c.last || warm != c.warmup {
			t.Errorf("%s: %d planned from %v to %v, %d warmup; want %d from %v to %v, %d warmup", c.name, len(plan),
				time.Duration(plan[0].scheduledNs), time.Duration(plan[len(plan)-1].scheduledNs), warm, c.count, c.first, c.last, c.warmup)
		}
	}
	for _, bad := range []Options{{Schedule: Schedule{Speed: 1, From: "yesterday"}}, {Schedule: Schedule{Speed: 1, From: "20s"}}, {Schedule: Schedule{Speed: 1, From: "5s", To: "2s"}}} {
		if _, err := collectPlan(reqs, &bad); err == nil {
			t.Errorf("plan with from %q to %q: no error", bad.From, bad.To)
		}
	}
}

// TestArrivalProcesses checks the rate-override processes against their
// known moments: mean gap 1/rate, CV 1 (Poisson), 1/sqrt(k) (gamma), 0.
func TestArrivalProcesses(t *testing.T) {
	cases := []struct {
		kind  Arrival
		shape float64
		cv    float64
	}{
		{ArrivalPoisson, 1, 1},
		{ArrivalGamma, 0.25, 2},
		{ArrivalGamma, 4, 0.5},
		{ArrivalConstant, 1, 0},
	}
	for _, c := range cases {
		off := make([]int64, 20001)
		arrivals(off, 50, c.kind, c.shape, 9)
		var sum, sum2 float64
		for i := 1; i < len(off); i++ {
			g := float64(off[i]-off[i-1]) / 1e9
			sum += g
			sum2 += g * g
		}
		n := float64(len(off) - 1)
		mean := sum / n
		cv := math.Sqrt(max(0, sum2/n-mean*mean)) / mean
		if math.Abs(mean-0.02)/0.02 > 0.05 || math.Abs(cv-c.cv) > 0.06*max(c.cv, 1) {
			t.Errorf("%s(k=%v): mean gap %.5f s (want 0.02), CV %.3f (want %.2f)", c.kind, c.shape, mean, cv, c.cv)
		}
	}
	a, b := make([]int64, 5), make([]int64, 5)
	arrivals(a, 10, ArrivalPoisson, 1, 1)
	arrivals(b, 10, ArrivalPoisson, 1, 1)
	if !slices.Equal(a, b) {
		t.Error("the same seed gave different arrivals")
	}
}

// TestConnectionsAreReused guards against closing a response body unread,
// which makes net/http discard the connection: requests one at a time (closed
// loop, one in flight, so a stall cannot make several due at once and open
// new connections) must all but the first reuse one.
func TestConnectionsAreReused(t *testing.T) {
	for _, api := range []string{trace.APIChat, trace.APICompletions} {
		target := startSim(t, fastSim())
		wl := workload(t, 30, 20*time.Millisecond)
		run := filepath.Join(t.TempDir(), "run")
		opts := DefaultOptions()
		opts.Target, opts.API, opts.Concurrency = target, api, 1
		if _, err := Run(context.Background(), wl, run, opts); err != nil {
			t.Fatal(err)
		}
		rows, _ := trace.ReadResults(run)
		reused := 0
		for _, r := range rows {
			if r.ConnReused {
				reused++
			}
		}
		if reused < 27 {
			t.Errorf("%s: %d of 30 sequential requests reused a connection, want at least 27", api, reused)
		}
	}
}

// replayTo replays wl against target with default options (adjusted by mod)
// into a fresh run dir and returns the results and run.json.
func replayTo(t *testing.T, target, wl string, mod func(*Options)) ([]trace.Result, *trace.RunInfo) {
	t.Helper()
	run := filepath.Join(t.TempDir(), "run")
	opts := DefaultOptions()
	opts.Target = target
	if mod != nil {
		mod(&opts)
	}
	return runAndRead(t, wl, run, opts)
}

// runAndRead replays wl with opts into run and returns the results and
// run.json.
func runAndRead(t *testing.T, wl, run string, opts Options) ([]trace.Result, *trace.RunInfo) {
	t.Helper()
	info, err := Run(context.Background(), wl, run, opts)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := trace.ReadResults(run)
	if err != nil {
		t.Fatal(err)
	}
	return rows, info
}
