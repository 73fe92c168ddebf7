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
	// launch sends plan[i], already admitted, on its own goroutine; it is
	// called from the scheduler, the admitter, or the turn before.
	var launch func(i int, scheduled int64, sess *session)
	launch = func(i int, scheduled int64, sess *session) {
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
		inflight.Go(func() {
			r.send(reqCtx, p.req, &res, sess)
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
			if r.waitUntil(ctx, due) && acquire() {
				launch(p.next, due, sess)
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
			launch(i, plan[i].scheduledNs, nil)
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
			launch(i, plan[i].scheduledNs, nil)
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

// waitUntil blocks until the run clock reaches ns, or ctx ends. Timers round
// up to about a millisecond on Linux, so it sleeps to about a millisecond
// before the due time and then yields in a loop until it arrives.
func (r *Runner) waitUntil(ctx context.Context, ns int64) bool {
	const spin = int64(time.Millisecond)
	for {
		if ctx.Err() != nil {
			return false
		}
		left := max(0, min(ns, maxScheduleNs)) - r.clock()
		if left <= 0 {
			return true
		}
		if left > spin {
			t := time.NewTimer(time.Duration(left - spin))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return false
			}
			continue
		}
		runtime.Gosched()
	}
}
