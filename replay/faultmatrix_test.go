package replay

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/trace"
)

// countingSim serves a simulator through a handler that counts each
// X-Request-Id, so a test can see a request sent twice. kill closes the
// listener and every connection at once (the server process dying);
// restart brings a fresh simulator back on the same address.
type countingSim struct {
	t    *testing.T
	addr string
	opts sim.Options
	mu   sync.Mutex
	seen map[string]int
	srv  *http.Server
	s    *sim.Server
}

func newCountingSim(t *testing.T, o sim.Options) *countingSim {
	c := &countingSim{t: t, opts: o, seen: map[string]int{}}
	c.start("127.0.0.1:0")
	t.Cleanup(c.kill)
	return c
}

func (c *countingSim) start(addr string) {
	s, err := sim.New(c.opts)
	if err != nil {
		c.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		c.t.Fatal(err)
	}
	c.addr = ln.Addr().String()
	h := s.Handler()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("X-Request-Id"); id != "" && r.Method == http.MethodPost {
			c.mu.Lock()
			c.seen[id]++
			c.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})}
	c.mu.Lock()
	c.srv, c.s = srv, s
	c.mu.Unlock()
	go srv.Serve(ln)
}

func (c *countingSim) kill() {
	c.mu.Lock()
	srv, s := c.srv, c.s
	c.srv, c.s = nil, nil
	c.mu.Unlock()
	if srv != nil {
		srv.Close()
		s.Close()
	}
}

func (c *countingSim) url() string { return "http://" + c.addr }

// openFDs counts this process's open file descriptors.
func openFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

// TestFaultMatrix replays against the simulator with each fault alone and
// with all of them together, and with the server killed and restarted mid
// run. For each: one result per scheduled request, each with the outcome the
// fault implies, no request sent twice, and goroutines and file descriptors
// back to their baseline afterwards.
func TestFaultMatrix(t *testing.T) {
	type expect map[string]bool
	cases := []struct {
		name     string
		sim      func(*sim.Options)
		replay   func(*Options)
		outcomes expect
		restart  bool
	}{
		{"500s", func(o *sim.Options) { o.FailRate = 1 }, nil, expect{trace.OutcomeHTTPError: true}, false},
		{"429s", func(o *sim.Options) {
			o.Engine.MaxWaiting, o.Engine.MaxNumSeqs, o.Engine.Cost.IterBase = 1, 1, 20*time.Millisecond
		},
			nil, expect{trace.OutcomeHTTPError: true, trace.OutcomeOK: true}, false},
		{"errors mid-stream", func(o *sim.Options) { o.StreamErrorRate = 1 }, nil, expect{trace.OutcomeStreamError: true}, false},
		{"resets", func(o *sim.Options) { o.ResetRate = 1 }, nil, expect{trace.OutcomeConnError: true}, false},
		{"stalls", func(o *sim.Options) { o.StallRate, o.StallFor = 1, time.Second }, func(o *Options) { o.Timeout = 300 * time.Millisecond },
			expect{trace.OutcomeTimeout: true}, false},
		{"malformed SSE", func(o *sim.Options) { o.MalformedRate = 1 }, nil, expect{trace.OutcomeProtocolError: true}, false},
		{"slow first byte", func(o *sim.Options) { o.SlowFirstByteRate, o.SlowFirstByteFor = 1, time.Second },
			func(o *Options) { o.FirstTokenTimeout = 200 * time.Millisecond }, expect{trace.OutcomeTimeout: true}, false},
		{"all together", func(o *sim.Options) {
			o.FailRate, o.StreamErrorRate, o.ResetRate, o.StallRate, o.MalformedRate, o.SlowFirstByteRate = 0.12, 0.12, 0.12, 0.12, 0.12, 0.12
			o.StallFor, o.SlowFirstByteFor, o.Seed = time.Second, time.Second, 7
		}, func(o *Options) { o.Timeout, o.FirstTokenTimeout = 600*time.Millisecond, 400*time.Millisecond },
			expect{trace.OutcomeOK: true, trace.OutcomeHTTPError: true, trace.OutcomeStreamError: true, trace.OutcomeConnError: true,
				trace.OutcomeTimeout: true, trace.OutcomeProtocolError: true}, false},
		{"server killed and restarted", nil, nil, expect{trace.OutcomeOK: true, trace.OutcomeConnError: true}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			goroutines, fds := runtime.NumGoroutine(), openFDs()
			o := fastSim()
			if c.sim != nil {
				c.sim(&o)
			}
			srv := newCountingSim(t, o)
			const n = 60
			wl := workload(t, n, 15*time.Millisecond)
			run := filepath.Join(t.TempDir(), "run")
			opts := DefaultOptions()
			opts.Target, opts.RunID, opts.Grace = srv.url(), "faults", time.Second
			opts.ConnectTimeout = 300 * time.Millisecond
			if c.replay != nil {
				c.replay(&opts)
			}
			if c.restart {
				go func() {
					time.Sleep(300 * time.Millisecond)
					srv.kill()
					time.Sleep(200 * time.Millisecond)
					srv.start(srv.addr)
				}()
			}
			rows, info := runAndRead(t, wl, run, opts)
			if len(rows) != n || info.Scheduled != n {
				t.Fatalf("%d results for %d scheduled, want %d", len(rows), info.Scheduled, n)
			}
			got := map[string]int{}
			for _, r := range rows {
				got[r.Outcome]++
				if !c.outcomes[r.Outcome] {
					t.Errorf("%s: outcome %s (%s), not one this fault gives", r.RequestID, r.Outcome, r.Error)
				}
				if (r.Outcome == trace.OutcomeHTTPError) != (r.HTTPStatus >= 400) {
					t.Errorf("%s: outcome %s with HTTP %d", r.RequestID, r.Outcome, r.HTTPStatus)
				}
				if c.name == "429s" && r.Outcome == trace.OutcomeHTTPError && r.HTTPStatus != http.StatusTooManyRequests {
					t.Errorf("%s: HTTP %d from a full queue, want 429", r.RequestID, r.HTTPStatus)
				}
			}
			srv.mu.Lock()
			for id, k := range srv.seen {
				if k > 1 {
					t.Errorf("request %s reached the server %d times", id, k)
				}
			}
			srv.mu.Unlock()
			if c.restart && (got[trace.OutcomeConnError] == 0 || got[trace.OutcomeOK] == 0) {
				t.Errorf("restart: outcomes %v, want some lost with the server and some served after it came back", got)
			}
			srv.kill()
			// Goroutines and descriptors return to where they were.
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) && (runtime.NumGoroutine() > goroutines+2 || openFDs() > fds+2) {
				time.Sleep(50 * time.Millisecond)
			}
			if g, f := runtime.NumGoroutine(), openFDs(); g > goroutines+2 || f > fds+2 {
				t.Errorf("after the run: %d goroutines (was %d), %d descriptors (was %d)", g, goroutines, f, fds)
			}
			t.Logf("outcomes %v", got)
		})
	}
}
