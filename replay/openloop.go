package replay

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// runOpenLoop sends each request at its scheduled time, never waiting for
// responses. With MaxConcurrency, a FIFO admitter lets requests go as slots
// free up. A session's later turns are sent by the goroutine of the turn
// before, when it is done plus the think time. handled[i] is set for every
// request handed off.
func (r *Runner) runOpenLoop(ctx, reqCtx context.Context, plan []planned, col *collector, inflight *sync.WaitGroup, handled []atomic.Bool) {
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
	release := func() {
		if slots != nil {
			<-slots
		}
	}
	pre := r.prefetched
	if pre == nil {
		pre = r.newPrefetch(plan)
	}
	r.startPrefetch(ctx, pre, plan)
	// launch sends plan[i], already admitted, on its own goroutine; it is
	// called from the scheduler, the admitter, or the turn before (which
	// built it, built). A request the prefetcher has not built yet is
	// built here, and counted.
	var launch func(i int, scheduled int64, sess *session, built *outgoing)
	launch = func(i int, scheduled int64, sess *session, built *outgoing) {
		p := plan[i]
		handled[i].Store(true)
		res := r.newResult(p)
		res.ScheduledNs, res.AdmittedNs = scheduled, scheduled
		if slots != nil {
			res.AdmittedNs = r.clock()
		}
		if sess == nil && p.next >= 0 {
			sess = &session{}
		}
		if built == nil {
			built = pre.take(i)
		}
		inflight.Go(func() {
			if built == nil {
				r.stats.builtLate.Add(1)
				built = r.build(p.req, sess)
			}
			r.sendBuilt(reqCtx, p.req, &res, sess, built)
			release()
			col.results <- res
			if p.next < 0 || ctx.Err() != nil {
				return
			}
			due := r.clock()
			if res.DoneNs != nil {
				due = *res.DoneNs
			}
			nq := plan[p.next].req
			if think, ok := r.behaviourMs("think_time_ms", nq.ThinkTimeMs, nq.RequestID); ok {
				due = satAdd(due, int64(think))
			}
			next := r.build(nq, sess) // during the think time, not after it
			if r.waitUntil(ctx, due) && acquire() {
				launch(p.next, due, sess, next)
			}
		})
	}
	if slots == nil {
		for i := range plan {
			if plan[i].chained {
				continue
			}
			if !r.waitUntil(ctx, plan[i].scheduledNs) {
				return
			}
			launch(i, plan[i].scheduledNs, nil, nil)
		}
		return
	}
	// Capped: the scheduler hands due requests to the admitter through a
	// queue as long as the plan, so it never blocks on the cap.
	queue := make(chan int, len(plan))
	admitterDone := make(chan struct{})
	go func() {
		defer close(admitterDone)
		for i := range queue {
			if !acquire() {
				return // the rest are recorded as not_sent
			}
			launch(i, plan[i].scheduledNs, nil, nil)
		}
	}()
	for i := range plan {
		if plan[i].chained {
			continue
		}
		if !r.waitUntil(ctx, plan[i].scheduledNs) {
			break
		}
		queue <- i
	}
	close(queue)
	<-admitterDone
}

// Prefetch bounds: bodies are built up to prefetchAhead before their send
// time, at most prefetchMax of them waiting at once (a 128k-token prompt's
// body is about 0.5 MB, so 32 MB at most).
const (
	prefetchAhead = int64(500 * time.Millisecond)
	prefetchMax   = 64
)

// prefetch builds the bodies of the plan's scheduled (unchained) requests
// ahead of their send time on one goroutine, so the send itself is all
// that happens at the due time: built at send time, a long prompt's body
// (tokenized text, then JSON) counts in the request's lateness.
type prefetch struct {
	state []atomic.Int32 // prefetchNone, …
	built []atomic.Pointer[outgoing]
	slots chan struct{}
	done  chan struct{} // closed when the prefetcher has stopped
}

const (
	prefetchNone int32 = iota
	prefetchBuilding
	prefetchReady
	prefetchTaken
)

// newPrefetch returns the prefetcher's state for plan with the bodies of
// the requests due in the first prefetchAhead (at most prefetchMax)
// already built: it runs before the run's clock starts, so the first
// sends wait for no building, as every later one does not.
func (r *Runner) newPrefetch(plan []planned) *prefetch {
	p := emptyPrefetch(len(plan))
	for i := range plan {
		if plan[i].chained {
			continue
		}
		if plan[i].scheduledNs >= prefetchAhead || len(p.slots) == cap(p.slots) {
			break
		}
		p.slots <- struct{}{}
		p.built[i].Store(r.build(plan[i].req, nil))
		p.state[i].Store(prefetchReady)
	}
	return p
}

// emptyPrefetch is the prefetcher's state for n requests, none built.
func emptyPrefetch(n int) *prefetch {
	return &prefetch{state: make([]atomic.Int32, n), built: make([]atomic.Pointer[outgoing], n), slots: make(chan struct{}, prefetchMax),
		done: make(chan struct{})}
}

// startPrefetch starts building p's bodies not built yet, each up to
// prefetchAhead before its send time; it stops with ctx.
func (r *Runner) startPrefetch(ctx context.Context, p *prefetch, plan []planned) {
	go func() {
		defer close(p.done)
		for i := range plan {
			if plan[i].chained || p.state[i].Load() != prefetchNone {
				continue // chained, or built before the clock started
			}
			select {
			case p.slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			if !r.waitUntilCoarse(ctx, plan[i].scheduledNs-prefetchAhead) {
				return
			}
			if !p.state[i].CompareAndSwap(prefetchNone, prefetchBuilding) {
				<-p.slots // sent already: built at its send
				continue
			}
			p.built[i].Store(r.build(plan[i].req, nil))
			p.state[i].Store(prefetchReady)
		}
	}()
}

// take returns request i's body if the prefetcher built it, else nil
// (and it will not build it after); a request is taken once.
func (p *prefetch) take(i int) *outgoing {
	for {
		switch p.state[i].Load() {
		case prefetchNone:
			if p.state[i].CompareAndSwap(prefetchNone, prefetchTaken) {
				return nil
			}
		case prefetchBuilding:
			runtime.Gosched() // being built now: as soon as building it here
		case prefetchReady:
			if p.state[i].CompareAndSwap(prefetchReady, prefetchTaken) {
				o := p.built[i].Swap(nil)
				<-p.slots
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

// Waiting stages of waitUntil: Go timers round up to about a millisecond
// on Linux, so a timer takes the wait to coarseWait before the due time,
// precise sleeps (nanosleep) of at most sleepSlice each to spinWait before
// it, and yielding in a loop the rest. At a thousand requests a second every wait is under a
// millisecond: yielding through all of it kept a core busy and starved the
// requests' own goroutines on a small machine.
const (
	coarseWait = int64(time.Millisecond)
	spinWait   = int64(100 * time.Microsecond)
	sleepSlice = int64(100 * time.Microsecond)
)

// waitUntil blocks until the run clock reaches ns, or ctx ends (checked
// at least every coarseWait).
func (r *Runner) waitUntil(ctx context.Context, ns int64) bool {
	for {
		if ctx.Err() != nil {
			return false
		}
		left := max(0, min(ns, maxScheduleNs)) - r.clock()
		switch {
		case left <= 0:
			return true
		case left > coarseWait+spinWait:
			t := time.NewTimer(time.Duration(left - coarseWait - spinWait))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return false
			}
		case left > spinWait:
			// A sleeping thread holds its processor: the requests just
			// launched wait in its run queue. Yield to them first, and
			// sleep in slices, yielding between them.
			runtime.Gosched()
			sleepPrecise(time.Duration(min(left-spinWait, sleepSlice)))
		default:
			runtime.Gosched()
		}
	}
}
