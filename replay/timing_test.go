package replay

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/servetrace/servetrace/replay/pacing"
	"github.com/servetrace/servetrace/replay/sim"
)

// skipUnderRace skips timing tests under -race and otherwise measures as
// the replay command runs (TuneProcess), starting
// from a collected heap so garbage of earlier tests is not collected during
// the measurement.
func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("timing figures are distorted by -race; run by make test-timing")
	}
	runtime.GC()
	t.Cleanup(pacing.TuneProcess())
}

// TestTimingOpenLoopLateness replays 200 req/s for 2 s against a simulator
// that answers at once, and checks that the client sent on time.
func TestTimingOpenLoopLateness(t *testing.T) {
	skipUnderRace(t)
	// A 5 ms decode step: the test is about the client, and an engine with
	// shorter iterations spends most of them yielding on one of two cores.
	o := sim.DefaultOptions()
	o.Engine.Cost = sim.CostModel{IterBase: 5 * time.Millisecond}
	target := startSim(t, o)
	wl := workload(t, 400, 5*time.Millisecond)
	stopProbe := startNoiseProbe(t)
	rows, info := replayTo(t, target, wl, nil)
	stalls := stopProbe()
	t.Logf("client's own lateness summary: p50 %.3f ms p99 %.3f ms max %.3f ms; offered %.1f/s achieved %.1f/s",
		info.Lateness.P50Ms, info.Lateness.P99Ms, info.Lateness.MaxMs, info.OfferedRate, info.AchievedRate)
	var late timingErrors
	for _, r := range rows {
		if r.SentNs == nil {
			t.Fatalf("request %s was never sent", r.RequestID)
		}
		late.add(info.StartUnixNs+r.ScheduledNs, float64(*r.SentNs-r.ScheduledNs)/1e6)
	}
	if math.Abs(info.AchievedRate/info.OfferedRate-1) > 0.02 {
		t.Errorf("achieved %.1f req/s vs offered %.1f", info.AchievedRate, info.OfferedRate)
	}
	// Sent times follow the schedule, not the responses.
	for _, r := range rows {
		if r.SentNs == nil || *r.SentNs < r.ScheduledNs {
			t.Fatalf("request %s sent at %v before its schedule %d", r.RequestID, r.SentNs, r.ScheduledNs)
		}
	}
	// Last: on a host too noisy to judge timing it skips the test.
	checkTimingBound(t, "client lateness at 200 req/s", late, stalls, 5, false)
}

// TestTimingTokenPacing checks that the client measures the simulator's
// iteration time as ITL, and TTFT as one or two iterations (a request that
// arrives mid-iteration waits for the next).
func TestTimingTokenPacing(t *testing.T) {
	skipUnderRace(t)
	o := sim.DefaultOptions()
	o.Engine.Cost = sim.CostModel{IterBase: 10 * time.Millisecond}
	target := startSim(t, o)
	wl := workload(t, 20, 20*time.Millisecond)
	rows, _ := replayTo(t, target, wl, nil)
	var itl, ttft []float64
	for _, r := range rows {
		ttft = append(ttft, float64(*r.FirstTokenNs-*r.SentNs)/1e6)
		for i := 1; i < len(r.TokenTimesNs); i++ {
			itl = append(itl, float64(r.TokenTimesNs[i]-r.TokenTimesNs[i-1])/1e6)
		}
	}
	slices.Sort(itl)
	slices.Sort(ttft)
	if med := itl[len(itl)/2]; math.Abs(med-10) > 1 {
		t.Errorf("ITL median %.2f ms, the simulator's iterations take 10 ms", med)
	}
	if med := ttft[len(ttft)/2]; med < 10 || med > 21 {
		t.Errorf("TTFT median %.2f ms, want one to two 10 ms iterations", med)
	}
}

// arrivalServer records, per request id, when each request reached the
// server (ns since the server started) and answers with a one-token stream.
type arrivalServer struct {
	start time.Time
	mu    sync.Mutex
	at    map[string]int64
	dup   int
}

func (s *arrivalServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Since(s.start).Nanoseconds()
	if r.Method == http.MethodGet {
		fmt.Fprint(w, `{"data":[{"id":"m"}]}`)
		return
	}
	id := r.Header.Get("X-Request-Id")
	s.mu.Lock()
	if _, seen := s.at[id]; seen {
		s.dup++
	}
	s.at[id] = now
	s.mu.Unlock()
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n")
}

// TestTimingServerSideArrivals replays a 500 req/s constant-rate schedule for
// 15 s (7,500 arrivals: the p99 is the 75th largest error) and checks, at
// the server, that each request arrived when the schedule said: p99 error under 2 ms once the constant offset (the first connection,
// the clocks' different zeros) is removed. Set SERVETRACE_ARRIVAL_SECONDS to
// shorten it.
func TestTimingServerSideArrivals(t *testing.T) {
	skipUnderRace(t)
	seconds := 15
	if v, err := strconv.Atoi(os.Getenv("SERVETRACE_ARRIVAL_SECONDS")); err == nil && v > 0 {
		seconds = v
	}
	const rate = 500
	n := seconds * rate
	srv := &arrivalServer{start: time.Now(), at: make(map[string]int64, n)}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	wl := workload(t, n, time.Millisecond) // timing replaced by --rate below
	run := filepath.Join(t.TempDir(), "run")
	opts := DefaultOptions()
	opts.Target, opts.Rate, opts.Arrival, opts.RunID = hs.URL, rate, ArrivalConstant, "arrivals"
	stopProbe := startNoiseProbe(t)
	rows, info := runAndRead(t, wl, run, opts)
	stalls := stopProbe()
	if len(rows) != n || len(srv.at) != n || srv.dup != 0 {
		t.Fatalf("%d results, %d distinct arrivals, %d duplicates; want %d, %d, 0", len(rows), len(srv.at), srv.dup, n, n)
	}
	// error_i = server arrival - scheduled offset; checkTimingBound removes
	// its median.
	var errs timingErrors
	for _, r := range rows {
		at, ok := srv.at[info.RunID+"-"+r.RequestID]
		if !ok {
			t.Fatalf("request %s never reached the server", r.RequestID)
		}
		errs.add(info.StartUnixNs+r.ScheduledNs, float64(at-r.ScheduledNs)/1e6)
	}
	t.Logf("client lateness p99 %.3f ms (its own summary)", info.Lateness.P99Ms)
	checkTimingBound(t, fmt.Sprintf("server-side arrival error, %d req/s", rate), errs, stalls, 2, true)
}
