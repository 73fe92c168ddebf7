package replay

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/trace"
)

// TestBodiesBuiltBeforeTheirSendTime: with a schedule the prefetcher can
// keep ahead of, no request's body is built at its send time, the first
// ones (due at once, built before the clock starts) included, so lateness
// does not hold the client's prompt work.
func TestBodiesBuiltBeforeTheirSendTime(t *testing.T) {
	for _, gap := range []time.Duration{20 * time.Millisecond, 0} { // 0: all due at once
		ri := simRun(t, 30, gap)
		if ri.Outcomes[trace.OutcomeOK] != 30 || ri.Client.BuiltAtSend != 0 {
			t.Errorf("gap %v: ok %d, built at send %d; want 30 and none", gap, ri.Outcomes[trace.OutcomeOK], ri.Client.BuiltAtSend)
		}
	}
}

// simRun replays a workload of n requests gap apart against the
// simulator and returns its run.json.
func simRun(t *testing.T, n int, gap time.Duration) *trace.RunInfo {
	t.Helper()
	s, err := sim.New(fastSim())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	run := filepath.Join(t.TempDir(), "run")
	opts := DefaultOptions()
	opts.Target = srv.URL
	if _, err := Run(context.Background(), workload(t, n, gap), run, opts); err != nil {
		t.Fatal(err)
	}
	ri, err := trace.ReadRunInfo(run)
	if err != nil {
		t.Fatal(err)
	}
	return ri
}

// promptRunner is a runner with the default options and its prompt
// builder ready.
func promptRunner(t *testing.T) *Runner {
	t.Helper()
	r, err := newRunner(DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.preparePrompts(16, true); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPrefetchTakeOnce: a body is handed out once, whether the
// prefetcher built it first or the sender took the request before it,
// with short prompts and long ones (built on the background thread), a
// take during a build claiming the request; and the prefetcher stops
// with its context, holding at most prefetchMax.
func TestPrefetchTakeOnce(t *testing.T) {
	r := promptRunner(t)
	r.startClock()
	started := make(chan struct{})
	close(started)
	for _, tc := range []struct {
		tokens int64
		n      int
	}{{50, 400}, {backgroundBuildTokens, 40}} {
		plan := make([]*planned, tc.n)
		in := make(chan *planned, len(plan))
		for i := range plan {
			plan[i] = &planned{req: &trace.Request{Identity: trace.Identity{RequestID: "r"}, Shape: trace.Shape{InputTokens: tc.tokens, API: trace.APIChat}}}
			in <- plan[i]
		}
		close(in)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p := r.startPrefetch(ctx, in, started, started)
		var wg sync.WaitGroup
		got := make([]*outgoing, len(plan))
		for i := range plan {
			wg.Go(func() { got[i] = p.take(plan[i]) })
		}
		wg.Wait()
		<-p.done // every request handed out: the prefetcher has passed them all
		built := 0
		for i, o := range got {
			if o != nil {
				built++
				if len(o.body) == 0 {
					t.Errorf("%d tokens, request %d: an empty body handed out", tc.tokens, i)
				}
			}
			if p.take(plan[i]) != nil {
				t.Errorf("%d tokens, request %d handed out twice", tc.tokens, i)
			}
		}
		if n := p.waiting.Load(); n != 0 {
			t.Errorf("%d tokens: %d prefetched bodies counted as waiting after every request was taken", tc.tokens, n)
		}
		t.Logf("%d tokens: %d of %d bodies came from the prefetcher", tc.tokens, built, len(plan))
	}
	plan := []*planned{{req: &trace.Request{Identity: trace.Identity{RequestID: "r"}, Shape: trace.Shape{InputTokens: 50, API: trace.APIChat}}}}
	// A request an hour away: the prefetcher waits for it, and stops
	// when the run does.
	later := make(chan *planned, 1)
	later <- &planned{req: plan[0].req, scheduledNs: int64(time.Hour)}
	ctx2, cancel2 := context.WithCancel(context.Background())
	q := r.startPrefetch(ctx2, later, started, started)
	cancel2()
	select {
	case <-q.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the prefetcher did not stop with its context")
	}
}

// TestTakeClaimsABackgroundBuild: a request taken while the background
// thread builds its body is handed to its sender to build (take returns
// nil at once, not waiting on a thread the kernel runs last); the
// prefetcher drops its own body, counts it as not waiting, and goes on to
// the next request.
func TestTakeClaimsABackgroundBuild(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2)) // background builds need two processors
	r := promptRunner(t)
	r.startClock()
	started := make(chan struct{})
	close(started)
	const tokens = 1 << 20 // milliseconds to build: the take comes mid-build
	for attempt := 0; ; attempt++ {
		long := &planned{req: &trace.Request{Identity: trace.Identity{RequestID: "r"}, Shape: trace.Shape{InputTokens: tokens, API: trace.APIChat}}}
		short := &planned{req: &trace.Request{Identity: trace.Identity{RequestID: "s"}, Shape: trace.Shape{InputTokens: 50, API: trace.APIChat}}}
		in := make(chan *planned, 2)
		in <- long
		in <- short
		close(in)
		p := r.startPrefetch(context.Background(), in, started, started)
		if !p.background || !p.inBack(long.req) || p.inBack(short.req) {
			t.Fatalf("background %v, long prompt in the background %v, short %v; want true, true, false", p.background, p.inBack(long.req), p.inBack(short.req))
		}
		for long.state.Load() == prefetchNone {
			runtime.Gosched()
		}
		during := long.state.Load() == prefetchBuilding
		o := p.take(long)
		<-p.done
		if !during {
			if attempt == 4 {
				t.Fatal("five builds of a 1M-token prompt ended before a take could see them")
			}
			continue
		}
		if o != nil {
			t.Fatalf("take during the background build returned a body; want nil, for the sender to build")
		}
		if long.built.Load() != nil || long.state.Load() != prefetchTaken {
			t.Errorf("the prefetcher kept its body of the claimed request (state %d)", long.state.Load())
		}
		if short.state.Load() != prefetchReady || p.waiting.Load() != 1 {
			t.Errorf("after the claimed build: next request state %d, %d waiting; want ready and 1", short.state.Load(), p.waiting.Load())
		}
		return
	}
}

// TestPrefetcherResumesAtTheLowWaterMark: the prefetcher holds at most
// prefetchMax built bodies; takes that bring them down to prefetchLow
// wake it, and it builds back up to the bound, in schedule order.
func TestPrefetcherResumesAtTheLowWaterMark(t *testing.T) {
	r, err := newRunner(DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	r.startClock()
	if _, _, err := r.preparePrompts(16, false); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	close(started)
	plan := make([]*planned, 3*prefetchMax)
	in := make(chan *planned, len(plan))
	for i := range plan { // all due now: only the bound holds the prefetcher
		plan[i] = &planned{req: &trace.Request{Identity: trace.Identity{RequestID: "r"}, Shape: trace.Shape{InputTokens: 20, API: trace.APIChat}}}
		in <- plan[i]
	}
	close(in)
	ctx, cancel := context.WithCancel(context.Background())
	p := r.startPrefetch(ctx, in, started, started)
	defer func() { cancel(); <-p.done }()
	// built waits until the first n requests are built, checking the
	// bound on the way.
	built := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for plan[n-1].state.Load() != prefetchReady {
			if w := p.waiting.Load(); w > prefetchMax {
				t.Fatalf("%d bodies waiting, over the bound of %d", w, prefetchMax)
			}
			if time.Now().After(deadline) {
				t.Fatalf("request %d not built in 10 s; %d waiting", n-1, p.waiting.Load())
			}
			time.Sleep(time.Millisecond)
		}
	}
	built(prefetchMax)
	taken := prefetchMax - prefetchLow // down to the low-water mark
	for i := range taken {
		if p.take(plan[i]) == nil {
			t.Fatalf("request %d: no body", i)
		}
	}
	built(prefetchMax + taken)
	if w := p.waiting.Load(); w != prefetchMax {
		t.Errorf("%d bodies waiting after it built back up, want %d", w, prefetchMax)
	}
	for i := prefetchMax + taken; i < len(plan); i++ {
		if s := plan[i].state.Load(); s != prefetchNone {
			t.Errorf("request %d past the bound in state %d", i, s)
			break
		}
	}
}
