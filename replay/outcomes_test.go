package replay

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/trace"
)

// faultServer misbehaves according to the request id at the end of the
// X-Request-Id header (<run_id>-<request_id>). It calls answered after
// each generation request's handler returns.
func faultServer(t *testing.T, answered func()) string {
	t.Helper()
	token := func(w http.ResponseWriter, text string) {
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", text)
		w.(http.Flusher).Flush()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fault"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		defer answered()
		id := r.Header.Get("X-Request-Id")
		kind := id[strings.LastIndex(id, "-")+1:]
		if kind == "http500" {
			http.Error(w, `{"error":{"message":"boom"}}`, 500)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		switch kind {
		case "ok":
			for _, s := range []string{"a", "b", "c"} {
				token(w, s)
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
		case "slowconsumer": // 10 tokens, one every 50 ms
			for i := range 10 {
				token(w, string(rune('a'+i)))
				time.Sleep(50 * time.Millisecond)
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
		case "streamerr":
			token(w, "a")
			fmt.Fprint(w, `data: {"error":{"message":"engine died"}}`+"\n\n")
		case "reset":
			token(w, "a")
			token(w, "b")
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		case "malformed":
			token(w, "a")
			fmt.Fprint(w, "data: {\"choices\": [{\n\n")
		case "stall", "stallfirst", "cancelms", "canceltokens":
			if kind != "stallfirst" {
				token(w, "a")
			}
			every := 50 * time.Millisecond // slow stream, for the cancel cases
			if kind == "cancelms" {
				every = 200 * time.Millisecond
			}
			for i := 0; i < 100; i++ { // past the client's timeout for the stalls
				select {
				case <-r.Context().Done():
					return
				case <-time.After(every):
				}
				if kind == "cancelms" || kind == "canceltokens" {
					token(w, "x")
				}
			}
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestEveryOutcomeOfTheMapping(t *testing.T) {
	type row struct {
		kind    string
		outcome string
		events  int // token events kept
		at      time.Duration
		set     func(*trace.Request)
	}
	rows := []row{
		{"ok", trace.OutcomeOK, 3, 0, nil},
		{"http500", trace.OutcomeHTTPError, 0, 10 * time.Millisecond, nil},
		{"streamerr", trace.OutcomeStreamError, 1, 20 * time.Millisecond, nil},
		{"reset", trace.OutcomeConnError, 2, 30 * time.Millisecond, nil},
		{"malformed", trace.OutcomeProtocolError, 1, 40 * time.Millisecond, nil},
		{"stall", trace.OutcomeTimeout, 1, 50 * time.Millisecond, nil},
		{"stallfirst", trace.OutcomeTimeout, 0, 60 * time.Millisecond, nil},
		{"cancelms", trace.OutcomeCancelled, -1, 70 * time.Millisecond, func(q *trace.Request) { q.CancelAfterMs = trace.Ptr(500.0) }},
		{"canceltokens", trace.OutcomeCancelled, 2, 80 * time.Millisecond, func(q *trace.Request) { q.CancelAfterTokens = trace.Ptr(int64(2)) }},
		{"slowconsumer", trace.OutcomeOK, 10, 90 * time.Millisecond, func(q *trace.Request) { q.ReadDelayMs = trace.Ptr(60.0) }},
		{"notsent", trace.OutcomeNotSent, 0, 20 * time.Second, nil},
	}
	dir := filepath.Join(t.TempDir(), "wl")
	w, err := trace.NewBucketWriter(dir, trace.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range rows {
		q := trace.Request{Identity: trace.Identity{RequestID: c.kind}, TS: t0.Add(c.at).UnixMicro(),
			Shape: trace.Shape{InputTokens: 5, OutputTokens: 3, MaxTokens: 3, API: trace.APIChat, Stream: true, N: 1}}
		if c.set != nil {
			c.set(&q)
		}
		if err := w.Write(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(&trace.Manifest{}); err != nil {
		t.Fatal(err)
	}

	// The run is interrupted once the server has answered all but "notsent"
	// (due at 20 s): they have all finished by then, one way or another, or
	// finish in the grace period. The timeout only fails a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var answered atomic.Int64
	opts := DefaultOptions()
	opts.Target = faultServer(t, func() {
		if answered.Add(1) == int64(len(rows)-1) {
			cancel()
		}
	})
	opts.Timeout = 3 * time.Second
	opts.FirstTokenTimeout = time.Second
	opts.Grace = 5 * time.Second
	run := filepath.Join(t.TempDir(), "run")
	info, err := Run(ctx, dir, run, opts)
	if err != nil {
		t.Fatal(err)
	}
	results, err := trace.ReadResults(run)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(rows) || info.Scheduled != int64(len(rows)) {
		t.Fatalf("%d results for %d scheduled requests", len(results), len(rows))
	}
	byID := map[string]trace.Result{}
	for _, r := range results {
		if _, dup := byID[r.RequestID]; dup {
			t.Fatalf("request %s recorded twice", r.RequestID)
		}
		byID[r.RequestID] = r
	}
	for _, c := range rows {
		r, ok := byID[c.kind]
		if !ok {
			t.Errorf("%s: no result", c.kind)
			continue
		}
		if r.Outcome != c.outcome {
			t.Errorf("%s: outcome %s (%q), want %s", c.kind, r.Outcome, r.Error, c.outcome)
		}
		if c.events >= 0 && len(r.TokenTimesNs) != c.events {
			t.Errorf("%s: %d token events kept, want %d", c.kind, len(r.TokenTimesNs), c.events)
		}
		if r.Outcome != trace.OutcomeOK && r.Error == "" {
			t.Errorf("%s: failed without an error text", c.kind)
		}
	}
	// The server sends a token every 50 ms; a consumer that waits 60 ms
	// before each socket read after the first sometimes takes two per read.
	// Events from one read share its time, and two reads are at least the
	// delay apart however the scheduler ran: every step between event times
	// is 0 or at least 60 ms, where a consumer without the delay would step
	// about 50 ms. (All 10 in one read would prove nothing; that needs the
	// consumer to stall for the whole 450 ms stream before its first read.)
	if r := byID["slowconsumer"]; len(r.TokenTimesNs) == 10 {
		reads := 1
		for i := 1; i < len(r.TokenTimesNs); i++ {
			step := time.Duration(r.TokenTimesNs[i] - r.TokenTimesNs[i-1])
			if step != 0 {
				reads++
			}
			if step != 0 && step < 60*time.Millisecond {
				t.Errorf("slow consumer: token events %d and %d are %v apart, less than the 60 ms read delay: %v", i-1, i, step, r.TokenTimesNs)
				break
			}
		}
		if reads < 2 {
			t.Errorf("slow consumer: all 10 token events in one read (%v): the 450 ms stream cannot show the read delay", r.TokenTimesNs)
		}
	}
	// cancel_after_ms = 500 ms with a token at once and then every 200 ms:
	// 3 events, give or take a late token or cancel.
	if n := len(byID["cancelms"].TokenTimesNs); n < 2 || n > 4 {
		t.Errorf("cancel after 500 ms kept %d token events, want about 3", n)
	}
	if info.Complete || !strings.Contains(info.Reason, "interrupted") {
		t.Errorf("run.json complete %v (%s); want incomplete after the interrupt", info.Complete, info.Reason)
	}
}

func TestCappedOpenLoopRecordsAdmission(t *testing.T) {
	o := fastSim()
	o.Engine.Cost = sim.CostModel{IterBase: 20 * time.Millisecond} // each request holds its slot for a few iterations
	target := startSim(t, o)
	wl := workload(t, 12, time.Millisecond) // 12 requests due within 12 ms
	run := filepath.Join(t.TempDir(), "run")
	opts := DefaultOptions()
	opts.Target, opts.MaxConcurrency = target, 3
	if _, err := Run(context.Background(), wl, run, opts); err != nil {
		t.Fatal(err)
	}
	rows, _ := trace.ReadResults(run)
	waited := 0
	for _, r := range rows {
		if r.Outcome != trace.OutcomeOK {
			t.Fatalf("%s: %s %s", r.RequestID, r.Outcome, r.Error)
		}
		if r.AdmittedNs < r.ScheduledNs || *r.SentNs < r.AdmittedNs {
			t.Errorf("%s: scheduled %d admitted %d sent %d out of order", r.RequestID, r.ScheduledNs, r.AdmittedNs, *r.SentNs)
		}
		if r.AdmittedNs-r.ScheduledNs > int64(5*time.Millisecond) {
			waited++
		}
	}
	if peak := peakConcurrency(rows); peak > 3 {
		t.Errorf("peak concurrency %d with a cap of 3", peak)
	}
	// 12 requests due within 12 ms, most holding a slot for 20-140 ms: many must wait.
	if waited < 5 {
		t.Errorf("only %d requests waited for admission with a cap of 3", waited)
	}
}

// peakConcurrency is the most requests in flight (sent to done) at once.
func peakConcurrency(rows []trace.Result) int {
	type ev struct {
		t     int64
		delta int
	}
	var evs []ev
	for _, r := range rows {
		if r.SentNs != nil && r.DoneNs != nil {
			evs = append(evs, ev{*r.SentNs, 1}, ev{*r.DoneNs, -1})
		}
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if a.t != b.t {
			return int(a.t - b.t)
		}
		return a.delta - b.delta // ends before starts at the same instant
	})
	cur, peak := 0, 0
	for _, e := range evs {
		cur += e.delta
		peak = max(peak, cur)
	}
	return peak
}

func TestClosedLoopKeepsConcurrency(t *testing.T) {
	o := fastSim()
	o.Engine.Cost = sim.CostModel{IterBase: 20 * time.Millisecond} // 20-160 ms a request, so the four overlap
	target := startSim(t, o)
	wl := workload(t, 30, time.Minute) // timing is ignored in closed loop
	run := filepath.Join(t.TempDir(), "run")
	opts := DefaultOptions()
	opts.Target, opts.Concurrency = target, 4
	// Following the workload's 29 minutes of timing would be cut off here,
	// leaving requests unsent; the limit only fails that, not a slow host.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	info, err := Run(ctx, wl, run, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Complete {
		t.Errorf("closed loop not done after %v (%s); it should not follow the 29 min of workload timing", time.Since(start), info.Reason)
	}
	rows, _ := trace.ReadResults(run)
	if len(rows) != 30 || info.Outcomes[trace.OutcomeOK] != 30 {
		t.Fatalf("%d rows, outcomes %v", len(rows), info.Outcomes)
	}
	// At no time are more than 4 requests in flight.
	if peak := peakConcurrency(rows); peak > 4 || peak < 2 {
		t.Errorf("peak concurrency %d, want at most 4 (and more than 1)", peak)
	}
}
