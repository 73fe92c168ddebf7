package replay

import (
	"context"
	"sync"
	"sync/atomic"
)

// runClosedLoop keeps Concurrency requests in flight: each worker takes the
// next request as soon as its last one finished. Scheduled and admitted
// times are when the worker took it. Sessions are not chained in closed
// loop: each turn is an independent request.
func (r *Runner) runClosedLoop(ctx, reqCtx context.Context, plan []planned, col *collector, inflight *sync.WaitGroup, handled []atomic.Bool) {
	var next atomic.Int64
	deadline := int64(r.opts.Duration)
	for range r.opts.Concurrency {
		inflight.Go(func() {
			for ctx.Err() == nil {
				now := r.clock()
				if deadline > 0 && now >= deadline {
					return
				}
				i := int(next.Add(1) - 1)
				if i >= len(plan) {
					return
				}
				handled[i].Store(true)
				p := plan[i]
				p.scheduledNs = now
				res := r.newResult(p)
				res.AdmittedNs = now
				r.send(reqCtx, p.req, &res, nil)
				col.results <- res
			}
		})
	}
}
