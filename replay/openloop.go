package replay

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/servetrace/servetrace/replay/pacing"
	"github.com/servetrace/servetrace/trace"
)

// runOpenLoop sends each request the stream hands it at its scheduled
// time, never waiting for responses. With MaxConcurrency, a FIFO admitter
// lets requests go as slots free up. A session's later turns are sent by
// the goroutine of the turn before, when it is done plus the think time
// (or, read after that, by the stream). It returns when the stream is
// exhausted or ctx ends.
func (r *Runner) runOpenLoop(ctx, reqCtx context.Context, s *stream, pre *prefetcher, col *collector, inflight *senders) {
	var slots chan struct{}
	if r.opts.MaxConcurrency > 0 {
		slots = make(chan struct{}, r.opts.MaxConcurrency)
	}
	acquire := func() bool {
		if slots == nil {
			return true
		}
		select {
		case slots <- struct{}{}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	releaseSlot := func() {
		if slots != nil {
			<-slots
		}
	}
	// launch sends p, already admitted, on a sender goroutine; it is
	// called from the scheduler, the admitter, or the turn before (which
	// built it, built). A request the prefetcher has not built yet is
	// built here, and counted.
	var launch func(p *planned, scheduled int64, built *outgoing)
	// turn sends a session's later turn p, the one before done at doneNs,
	// after its think time; it is built during the think time.
	turn := func(p *planned, doneNs int64) {
		due := doneNs
		if think, ok := r.behaviourMs("think_time_ms", p.req.ThinkTimeMs, p.req.RequestID); ok {
			due = satAdd(due, int64(think))
		}
		next := r.build(p.req, &p.chain.conv)
		if r.waitUntil(ctx, due) && acquire() {
			launch(p, due, next)
			return
		}
		col.notSent(r, s, p)
		for _, q := range p.chain.drain() {
			col.notSent(r, s, q)
		}
	}
	// follow sends a request of the agent graph whose parents are done,
	// the last at readyNs, after its tool and think time (at its own
	// time, if later, where neither is logged), its prompt
	// continuing their conversation; one whose parent did not end ok is
	// recorded not sent, and so, in turn, are its own children.
	var release func(released)
	follow := func(rel released) {
		p := rel.p
		if rel.failed != "" {
			col.notSentBecause(r, s, p, "not sent: "+rel.failed)
			return
		}
		due := satAdd(rel.readyNs, int64(r.graphDelay(p.req)))
		if p.req.ToolMs == nil && p.req.ThinkTimeMs == nil {
			// No wait logged (a trace of arrivals only): the request
			// keeps its own time unless its parents end later.
			due = max(due, p.scheduledNs)
		}
		p.sess = rel.sess
		if p.sess == nil {
			p.sess = &session{}
		}
		built := r.build(p.req, p.sess)
		if r.waitUntil(ctx, due) && acquire() {
			probe := p.beside
			p.beside = nil
			launch(p, due, built)
			if probe == nil {
				return
			}
			if acquire() {
				launch(probe, due, nil)
			} else {
				col.notSent(r, s, probe)
			}
			return
		}
		col.notSent(r, s, p)
		for _, c := range s.graph.finish(p, r.clock(), false, nil) {
			release(c)
		}
	}
	release = func(rel released) { inflight.Go(func() { follow(rel) }) }
	s.onReleased = release
	launch = func(p *planned, scheduled int64, built *outgoing) {
		s.release(p)
		res := r.newResult(p)
		res.ScheduledNs, res.AdmittedNs = scheduled, scheduled
		if slots != nil {
			res.AdmittedNs = r.clock()
		}
		var sess *session
		switch {
		case p.chain != nil:
			sess = &p.chain.conv
		case p.sess != nil:
			sess = p.sess
		case s.graph != nil && p.probe == nil:
			// Its conversation is kept for the requests that wait on it.
			p.sess = &session{}
			sess = p.sess
		}
		if built == nil {
			built = pre.take(p)
		}
		inflight.Go(func() {
			if built == nil {
				r.stats.builtLate.Add(1)
				built = r.buildPlanned(p, sess)
			}
			answer := r.sendBuilt(reqCtx, p.req, &res, sess, built)
			releaseSlot()
			col.results <- finished{res: res, probe: built.probe, answer: answer}
			if s.graph == nil && p.chain == nil {
				return
			}
			done := r.clock()
			if res.DoneNs != nil {
				done = *res.DoneNs
			}
			if s.graph != nil {
				for _, c := range s.graph.finish(p, done, res.Outcome == trace.OutcomeOK, sess) {
					release(c)
				}
			}
			if p.chain == nil {
				return
			}
			if next := p.chain.next(done); next != nil {
				turn(next, done)
			}
		})
	}
	s.onIdle = func(p *planned, doneNs int64) { inflight.Go(func() { turn(p, doneNs) }) }
	if slots == nil {
		for p := range s.items {
			if !r.waitUntil(ctx, p.scheduledNs) {
				col.notSent(r, s, p)
				return
			}
			launch(p, p.scheduledNs, nil)
		}
		return
	}
	// Capped: the scheduler hands due requests to the admitter through a
	// queue as large as the look-ahead. A queued request still holds its
	// look-ahead, so the queue never fills and the scheduler never blocks
	// on the cap.
	queue := make(chan *planned, s.units)
	admitterDone := make(chan struct{})
	go func() {
		defer close(admitterDone)
		for p := range queue {
			if !acquire() {
				col.notSent(r, s, p)
				for q := range queue {
					col.notSent(r, s, q)
				}
				return
			}
			launch(p, p.scheduledNs, nil)
		}
	}()
	for p := range s.items {
		if !r.waitUntil(ctx, p.scheduledNs) {
			col.notSent(r, s, p)
			break
		}
		queue <- p
	}
	close(queue)
	<-admitterDone
}

// Prefetch bounds: bodies are built up to prefetchAhead before their send
// time, at most prefetchMax of them waiting at once (a 128k-token prompt's
// body is about 0.5 MB, so 32 MB at most). A prefetcher held at the bound
// is woken when the waiting bodies fall to prefetchLow: woken on every
// take, at high rates, where the bound is what holds it, it cost a
// wake-up of its thread per send.
const (
	prefetchAhead = int64(500 * time.Millisecond)
	prefetchMax   = 64
	prefetchLow   = 48
)

// prefetcher builds the bodies of the scheduled (unchained) requests ahead
// of their send time on one goroutine, so the send itself is all that
// happens at the due time: built at send time, a long prompt's body
// (tokenized text, then JSON) counts in the request's lateness. Before the
// run's clock starts it builds the requests due in the first
// prefetchAhead (at most prefetchMax), so the first sends wait for no
// building either.
type prefetcher struct {
	waiting atomic.Int32  // bodies built and not yet taken
	roomy   chan struct{} // take's signal, once waiting falls to prefetchLow
	warm    chan struct{} // closed when the bodies due first are built
	done    chan struct{} // closed when the prefetcher has stopped
	// background: long prompts are built on a thread at the lowest
	// priority (with two Go processors or more; with one, that thread
	// would hold the only processor while the kernel ran it last).
	background bool
}

const (
	prefetchNone int32 = iota
	prefetchBuilding
	prefetchReady
	prefetchTaken
)

// startPrefetch starts building the bodies of the requests from in.
// Before the clock starts it waits until the stream has read all it may
// (full), builds those of them due in the first prefetchAhead, then closes
// warm and waits for clockStarted. It stops with ctx.
func (r *Runner) startPrefetch(ctx context.Context, in <-chan *planned, full, clockStarted <-chan struct{}) *prefetcher {
	p := &prefetcher{roomy: make(chan struct{}, 1), warm: make(chan struct{}), done: make(chan struct{}),
		background: runtime.GOMAXPROCS(0) >= 2}
	go func() {
		defer close(p.done)
		var bg *pacing.BackgroundThread // for long prompts' builds
		defer func() {
			if bg != nil {
				bg.Close()
			}
		}()
		var warmOnce sync.Once
		warmed := func() { warmOnce.Do(func() { close(p.warm) }) }
		defer warmed()
		select {
		case <-full:
		case <-ctx.Done():
			return
		}
		started := false
		waitClock := func() bool {
			warmed()
			select {
			case <-clockStarted:
				started = true
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			var q *planned
			ok := true
			if started {
				q, ok = <-in
			} else {
				select {
				case q, ok = <-in:
				default: // all the stream has read is taken
					if !waitClock() {
						return
					}
					continue
				}
			}
			if !ok {
				return
			}
			if q.state.Load() != prefetchNone {
				continue // sent already
			}
			if !started && (q.scheduledNs >= prefetchAhead || p.waiting.Load() >= prefetchMax) && !waitClock() {
				return
			}
			for p.waiting.Load() >= prefetchMax {
				select {
				case <-p.roomy:
				case <-ctx.Done():
					return
				}
			}
			if started && !r.waitUntilCoarse(ctx, q.scheduledNs-prefetchAhead) {
				return
			}
			if !q.state.CompareAndSwap(prefetchNone, prefetchBuilding) {
				continue // sent already: built at its send
			}
			p.waiting.Add(1)
			// This goroutine's timer fires at a send time (a body is built
			// prefetchAhead before its own), on the processor where that
			// send's goroutine was just queued: a long prompt's build yields
			// to it first and then every few thousand words
			// (tokenize.yieldWords; docs/measurements.md, "Long prompts"),
			// and one of backgroundBuildTokens or more runs on the
			// background thread, where each yield hands its processor over.
			var o *outgoing
			if p.inBack(q.req) {
				if bg == nil {
					bg = pacing.NewBackgroundThread()
				}
				bg.Run(func() { o = r.buildPlanned(q, nil) })
			} else {
				o = r.buildPlanned(q, nil)
			}
			q.built.Store(o)
			if !q.state.CompareAndSwap(prefetchBuilding, prefetchReady) {
				// Its send claimed it mid-build (take) and builds its own.
				q.built.Store(nil)
				p.release()
			}
		}
	}()
	return p
}

// backgroundBuildTokens is the prompt length from which the prefetcher
// builds a body on a thread it keeps at the lowest priority
// (backgroundThread): a build this long takes a few hundred microseconds
// of CPU and more, and at a constant rate the prefetcher's timer fires at
// another request's send, so at the normal priority the build takes a
// core from that request's exchange, the server's side of it included.
const backgroundBuildTokens = 16 << 10

// inBack reports whether the prefetcher builds q's body in the
// background.
func (p *prefetcher) inBack(q *trace.Request) bool {
	return p.background && q.InputTokens >= backgroundBuildTokens
}

// release counts a built body as no longer waiting, and wakes the
// prefetcher once the waiting ones fall to prefetchLow.
func (p *prefetcher) release() {
	if p.waiting.Add(-1) == prefetchLow {
		select {
		case p.roomy <- struct{}{}:
		default: // a signal is pending already
		}
	}
}

// take returns q's body if the prefetcher has built it, else nil: the
// prefetcher will not build it after, and drops a build in progress. A
// request is taken once. A nil prefetcher builds nothing.
func (p *prefetcher) take(q *planned) *outgoing {
	for {
		switch q.state.Load() {
		case prefetchNone:
			if q.state.CompareAndSwap(prefetchNone, prefetchTaken) {
				return nil
			}
		case prefetchBuilding:
			if q.state.CompareAndSwap(prefetchBuilding, prefetchTaken) {
				// Being built now: its sender builds it again rather than
				// have the caller (the scheduler or the admitter), and
				// every send behind it, wait, perhaps on the background
				// thread, which the kernel runs last.
				return nil
			}
		case prefetchReady:
			if q.state.CompareAndSwap(prefetchReady, prefetchTaken) {
				o := q.built.Swap(nil)
				p.release()
				return o
			}
		default:
			return nil
		}
	}
}

// waitUntilCoarse sleeps until the run clock reaches ns (a timer's
// millisecond is no matter here), or ctx ends.
func (r *Runner) waitUntilCoarse(ctx context.Context, ns int64) bool {
	left := max(0, min(ns, maxScheduleNs)) - r.clock()
	if left <= 0 {
		return ctx.Err() == nil
	}
	return sleepCtx(ctx, time.Duration(left))
}

// waitUntil blocks until the run clock reaches ns (clamped to the
// schedule's range), or ctx ends: pacing.WaitUntil on the run's clock.
func (r *Runner) waitUntil(ctx context.Context, ns int64) bool {
	return pacing.WaitUntil(ctx, r.clock, max(0, min(ns, maxScheduleNs)))
}
