package replay

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/trace"
)

// countingSim serves a simulator through a handler that counts each
// X-Request-Id, so a test can see a request sent twice. kill closes the
// listener and every connection at once (the server process dying);
// restart brings a fresh simulator back on the same address. With killAt
// set, the server dies as that generation request arrives, before it
// answers, and comes back 100 ms later: a request that is certainly lost
// with the server, at a point set by the run's progress, not by a clock
// that also counts the run's setup.
type countingSim struct {
	opts        sim.Options
	killAt      int           // kill on this POST's arrival (0: never)
	restartDone chan struct{} // closed once the restart was tried, after the kill
	active      atomic.Int64  // handlers running

	mu         sync.Mutex
	addr       string
	seen       map[string]int
	posts      int             // POSTs that reached any server
	lost       string          // the request the kill cut off
	afterStart map[string]bool // POSTs that reached the restarted server
	restarted  bool
	restartErr error
	srv        *http.Server
	s          *sim.Server
}

func newCountingSim(t *testing.T, o sim.Options, killAt int) *countingSim {
	c := &countingSim{opts: o, killAt: killAt, seen: map[string]int{}, afterStart: map[string]bool{}, restartDone: make(chan struct{})}
	if err := c.start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.waitRestart(10 * time.Second) // so the restarted server is the one killed
		c.kill()
	})
	return c
}

// waitRestart waits up to d for the restart after a kill; it reports
// whether the server was killed, and the restart's error (or that it did
// not come within d).
func (c *countingSim) waitRestart(d time.Duration) (killed bool, err error) {
	c.mu.Lock()
	killed = c.lost != ""
	c.mu.Unlock()
	if !killed {
		return false, nil
	}
	select {
	case <-c.restartDone:
		c.mu.Lock()
		defer c.mu.Unlock()
		return true, c.restartErr
	case <-time.After(d):
		return true, fmt.Errorf("the server did not restart within %v of its kill", d)
	}
}

func (c *countingSim) start(addr string) error {
	s, err := sim.New(c.opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		s.Close()
		return err
	}
	h := s.Handler()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.active.Add(1)
		defer c.active.Add(-1)
		if id := r.Header.Get("X-Request-Id"); id != "" && r.Method == http.MethodPost {
			c.mu.Lock()
			c.seen[id]++
			c.posts++
			kill := c.posts == c.killAt
			bound := c.addr
			if kill {
				c.lost = id
			}
			if c.restarted {
				c.afterStart[id] = true
			}
			c.mu.Unlock()
			if kill {
				c.kill() // closes this request's connection too: it gets no answer
				go func() {
					time.Sleep(100 * time.Millisecond)
					err := c.start(bound)
					c.mu.Lock()
					c.restarted, c.restartErr = err == nil, err
					c.mu.Unlock()
					close(c.restartDone)
				}()
				return
			}
		}
		h.ServeHTTP(w, r)
	})}
	c.mu.Lock()
	c.addr, c.srv, c.s = ln.Addr().String(), srv, s
	c.mu.Unlock()
	go srv.Serve(ln)
	return nil
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

func (c *countingSim) url() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return "http://" + c.addr
}

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
		killAt   int // kill the server as this request arrives, restart it 100 ms later
	}{
		{"500s", func(o *sim.Options) { o.FailRate = 1 }, nil, expect{trace.OutcomeHTTPError: true}, 0},
		{"429s", func(o *sim.Options) {
			o.Engine.MaxWaiting, o.Engine.MaxNumSeqs, o.Engine.Cost.IterBase = 1, 1, 20*time.Millisecond
		},
			nil, expect{trace.OutcomeHTTPError: true, trace.OutcomeOK: true}, 0},
		{"errors mid-stream", func(o *sim.Options) { o.StreamErrorRate = 1 }, nil, expect{trace.OutcomeStreamError: true}, 0},
		{"resets", func(o *sim.Options) { o.ResetRate = 1 }, nil, expect{trace.OutcomeConnError: true}, 0},
		{"stalls", func(o *sim.Options) { o.StallRate, o.StallFor = 1, time.Second }, func(o *Options) { o.Timeout = 300 * time.Millisecond },
			expect{trace.OutcomeTimeout: true}, 0},
		{"malformed SSE", func(o *sim.Options) { o.MalformedRate = 1 }, nil, expect{trace.OutcomeProtocolError: true}, 0},
		{"slow first byte", func(o *sim.Options) { o.SlowFirstByteRate, o.SlowFirstByteFor = 1, time.Second },
			func(o *Options) { o.FirstTokenTimeout = 200 * time.Millisecond }, expect{trace.OutcomeTimeout: true}, 0},
		{"all together", func(o *sim.Options) {
			o.FailRate, o.StreamErrorRate, o.ResetRate, o.StallRate, o.MalformedRate, o.SlowFirstByteRate = 0.12, 0.12, 0.12, 0.12, 0.12, 0.12
			o.StallFor, o.SlowFirstByteFor, o.Seed = time.Second, time.Second, 7
		}, func(o *Options) { o.Timeout, o.FirstTokenTimeout = 600*time.Millisecond, 400*time.Millisecond },
			expect{trace.OutcomeOK: true, trace.OutcomeHTTPError: true, trace.OutcomeStreamError: true, trace.OutcomeConnError: true,
				trace.OutcomeTimeout: true, trace.OutcomeProtocolError: true}, 0},
		{"server killed and restarted", nil, nil, expect{trace.OutcomeOK: true, trace.OutcomeConnError: true}, 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			goroutines, fds := runtime.NumGoroutine(), openFDs()
			o := fastSim()
			if c.sim != nil {
				c.sim(&o)
			}
			srv := newCountingSim(t, o, c.killAt)
			const n = 60
			wl := workload(t, n, 15*time.Millisecond)
			run := filepath.Join(t.TempDir(), "run")
			opts := DefaultOptions()
			opts.Target, opts.RunID, opts.Grace = srv.url(), "faults", time.Second
			if c.replay != nil {
				c.replay(&opts)
			}
			rows, info := runAndRead(t, wl, run, opts)
			if len(rows) != n || info.Scheduled != n {
				t.Fatalf("%d results for %d scheduled, want %d", len(rows), info.Scheduled, n)
			}
			got := map[string]int{}
			byID := map[string]trace.Result{}
			for _, r := range rows {
				got[r.Outcome]++
				byID[opts.RunID+"-"+r.RequestID] = r
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
			if c.killAt > 0 {
				killed, err := srv.waitRestart(10 * time.Second)
				if !killed {
					t.Fatalf("the server was never killed; the kill was due as request %d arrived", c.killAt)
				}
				if err != nil {
					t.Fatalf("restart on the same address: %v", err)
				}
				srv.mu.Lock()
				lost, after := srv.lost, len(srv.afterStart)
				for id := range srv.afterStart {
					if byID[id].Outcome != trace.OutcomeOK {
						t.Errorf("%s reached the restarted server and is %s (%s), want ok", id, byID[id].Outcome, byID[id].Error)
					}
				}
				srv.mu.Unlock()
				if r := byID[lost]; r.Outcome != trace.OutcomeConnError {
					t.Errorf("%s was cut off by the kill and is %s (%s), want conn_error", lost, r.Outcome, r.Error)
				}
				if after == 0 {
					t.Errorf("restart: no request reached the restarted server; outcomes %v", got)
				}
			}
			srv.kill()
			// Goroutines and descriptors return to where they were, once
			// the handlers have returned (a stalled one sleeps on).
			deadline := time.Now().Add(10 * time.Second)
			for srv.active.Load() > 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := srv.active.Load(); n > 0 {
				t.Errorf("%d server handlers still running 10 s after the run", n)
			}
			deadline = time.Now().Add(10 * time.Second)
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
