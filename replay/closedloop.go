package replay

import (
	"context"
	"sync"
)

// runClosedLoop keeps Concurrency requests in flight: each worker takes the
// stream's next request as soon as its last one finished. Scheduled and
// admitted times are when the worker took it. Sessions are not chained in
// closed loop: each turn is an independent request.
func (r *Runner) runClosedLoop(ctx, reqCtx context.Context, s *stream, col *collector, inflight *sync.WaitGroup) {
	deadline := int64(r.opts.Duration)
	for range r.opts.Concurrency {
		inflight.Go(func() {
			for ctx.Err() == nil {
				if deadline > 0 && r.clock() >= deadline {
					return
				}
				var p *planned
				select {
				case q, ok := <-s.items:
					if !ok {
						return
					}
					p = q
				case <-ctx.Done():
					return
				}
				s.release(p)
				now := r.clock()
				p.scheduledNs = now
				res := r.newResult(p)
				res.AdmittedNs = now
				built := r.buildPlanned(p, nil)
				answer := r.sendBuilt(reqCtx, p.req, &res, nil, built)
				col.results <- finished{res: res, probe: built.probe, answer: answer}
			}
		})
	}
}
