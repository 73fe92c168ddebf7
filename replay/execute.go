package replay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/servetrace/servetrace/replay/probe"
	"github.com/servetrace/servetrace/trace"
)

// finished is a request's result on its way to the writer, with a probe's
// answer for the collector to grade first.
type finished struct {
	res    trace.Result
	probe  *probe.Probe
	answer []byte
}

// collector receives results, grades probes, writes the results, and
// tallies run.json figures.
type collector struct {
	w        *trace.ResultWriter
	every    time.Duration
	outcomes trace.OutcomeCt
	lateness durationHist
	// toWire is wrote − admitted; saturation the samples the saturation
	// rule judges (lateness to the wire on a reused connection, else to
	// the transport: a dial is the network's and the server's time).
	toWire, saturation durationHist
	first              int64
	last               int64
	err                error
	done               chan struct{}
	results            chan finished
	lastFlush          time.Time
	// buffered counts the list entries of the rows the open part holds.
	buffered int
	// Prompt truncation: requests whose usage reported prompt tokens, and
	// the deficits of those the server cut.
	promptChecked int64
	deficits      durationHist
	// features counts what was done with each feature (run.json).
	features map[string]trace.FeatureCount
}

// A server that reports fewer prompt tokens than were sent, by more than
// the larger of truncationSlackTokens and truncationSlackPct of the prompt,
// cut it: a chat template adds tokens (a few to a few dozen) and a
// different tokenizer moves the count by a few percent, but neither takes
// away a tenth. A server with a context shorter than the prompts cuts them
// and may say so only in usage.prompt_tokens (docs/measurements.md,
// "Silent prompt truncation").
const (
	truncationSlackTokens = 32
	truncationSlackPct    = 10
)

// promptDeficit returns by how many tokens the server's count of a
// request's prompt fell short of what was sent, when that is more than the
// slack; ok is false when usage gave no prompt count.
func promptDeficit(res *trace.Result) (deficit int64, checked bool) {
	if res.UsagePromptTokens == nil || res.PromptTokensSent <= 0 {
		return 0, false
	}
	d := res.PromptTokensSent - *res.UsagePromptTokens
	slack := max(truncationSlackTokens, (res.PromptTokensSent*truncationSlackPct+99)/100)
	if d <= slack {
		return 0, true
	}
	return d, true
}

// promptTruncation summarises the deficits, nil when there are none.
func (c *collector) promptTruncation() *trace.PromptTruncation {
	d := &c.deficits
	if d.N() == 0 {
		return nil
	}
	return &trace.PromptTruncation{Requests: d.N(), Checked: c.promptChecked, MaxDeficitTokens: d.Max(), P50DeficitTokens: d.Kth((d.N() + 1) / 2),
		ToleranceTokens: truncationSlackTokens, TolerancePct: truncationSlackPct}
}

func newCollector(w *trace.ResultWriter, every time.Duration, r *Runner) *collector {
	c := &collector{w: w, every: every, outcomes: trace.OutcomeCt{}, first: -1, last: -1,
		done: make(chan struct{}), results: make(chan finished, 4096), lastFlush: time.Now()}
	go c.loop(r)
	return c
}

func (c *collector) loop(r *Runner) {
	defer close(c.done)
	tick := time.NewTicker(min(c.every, time.Second))
	defer tick.Stop()
	for {
		select {
		case f, ok := <-c.results:
			if !ok {
				return
			}
			if f.probe != nil {
				r.grade(&f.res, f.probe, f.answer)
			}
			c.add(f.res, r)
		case <-tick.C:
			if time.Since(c.lastFlush) >= c.every && c.err == nil {
				c.flush()
			}
		}
	}
}

func (c *collector) add(res trace.Result, r *Runner) {
	c.outcomes[res.Outcome]++
	if r.self != nil {
		r.self.observe(&res)
	}
	if res.Outcome != trace.OutcomeOK {
		r.stats.failed.Add(1)
	}
	r.stats.done.Add(1)
	if res.SentNs != nil {
		late := *res.SentNs - res.AdmittedNs
		c.lateness.Add(late)
		if res.WroteNs != nil {
			wire := *res.WroteNs - res.AdmittedNs
			c.toWire.Add(wire)
			if res.ConnReused {
				late = wire
			}
		}
		c.saturation.Add(late)
		if c.first < 0 || *res.SentNs < c.first {
			c.first = *res.SentNs
		}
		c.last = max(c.last, *res.SentNs)
	}
	if d, checked := promptDeficit(&res); checked {
		c.promptChecked++
		if d > 0 {
			c.deficits.Add(d)
		}
	}
	c.countFeatures(&res)
	r.fitRow(&res)
	if c.err == nil {
		c.err = c.w.Write(res)
	}
	// Rows the open part holds: past the bound on their lists, the part
	// is written now rather than at its time.
	if c.buffered += listEntries(&res); c.buffered > maxBufferedListEntries && c.err == nil {
		c.flush()
	}
}

// flush writes the open part.
func (c *collector) flush() {
	c.err = c.w.Flush()
	c.lastFlush, c.buffered = time.Now(), 0
}

// countFeatures adds a result's features to the run's counts.
func (c *collector) countFeatures(res *trace.Result) {
	if len(res.FeaturesSent)+len(res.FeaturesStripped) == 0 {
		return
	}
	if c.features == nil {
		c.features = map[string]trace.FeatureCount{}
	}
	for _, f := range res.FeaturesSent {
		fc := c.features[f]
		fc.Carried++
		fc.Sent++
		c.features[f] = fc
	}
	for _, f := range res.FeaturesStripped {
		fc := c.features[f]
		fc.Carried++
		fc.Stripped++
		c.features[f] = fc
	}
	for _, f := range res.FeaturesRefused {
		fc := c.features[f]
		fc.Refused++
		c.features[f] = fc
	}
}

// notSent records p, planned but never sent, and releases its look-ahead.
func (c *collector) notSent(r *Runner, s *stream, p *planned) {
	c.notSentBecause(r, s, p, "run ended before the request was sent")
}

// notSentBecause records p, never sent, saying why, and the probe beside
// it.
func (c *collector) notSentBecause(r *Runner, s *stream, p *planned, why string) {
	s.release(p)
	res := r.newResult(p)
	res.AdmittedNs = p.scheduledNs
	res.Outcome, res.Error = trace.OutcomeNotSent, why
	c.results <- finished{res: res}
	if b := p.beside; b != nil {
		p.beside = nil
		c.notSentBecause(r, s, b, why)
	}
}

// execute runs the stream's schedule and records every request it planned
// exactly once.
func (r *Runner) execute(ctx context.Context, s *stream, pre *prefetcher, w *trace.ResultWriter, info *trace.RunInfo, total int64) error {
	col := newCollector(w, r.opts.RotateEvery, r)
	info.StartUnixNs = r.start.UnixNano()

	// Requests run on reqCtx, which outlives an interrupt by the grace period.
	reqCtx, abort := context.WithCancelCause(context.WithoutCancel(ctx))
	defer abort(nil)
	graceDone := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			t := time.NewTimer(r.opts.Grace)
			defer t.Stop()
			select {
			case <-t.C:
				abort(errInterrupted)
			case <-graceDone:
			}
		case <-graceDone:
		}
	}()
	stopProgress := r.progress(total)

	closedLoop := r.opts.Concurrency > 0
	if closedLoop {
		var inflight sync.WaitGroup
		r.runClosedLoop(ctx, reqCtx, s, col, &inflight)
		inflight.Wait() // the workers are done: the rest is not scheduled
		s.halt()
	} else {
		// Planned after the run stopped: recorded as not sent.
		s.drop = func(p *planned) { col.notSent(r, s, p) }
		senders := newSenders()
		r.runOpenLoop(ctx, reqCtx, s, pre, col, senders)
		s.halt() // no session turn handed to a sender from here on
		senders.stop()
	}
	interrupted := ctx.Err() != nil
	for _, p := range s.remaining() {
		if closedLoop {
			// Closed loop schedules a request when a worker takes it:
			// those never taken were never scheduled.
			s.planned.Add(-1)
			continue
		}
		col.notSent(r, s, p)
	}
	<-s.done // open loop: the rest of the workload recorded as not sent
	info.Scheduled = s.planned.Load()
	sent := r.stats.sent.Load()
	close(graceDone)
	close(col.results)
	<-col.done
	stopProgress()
	info.EndUnixNs = time.Now().UnixNano()
	flushErr := w.Flush()

	info.Outcomes = col.outcomes
	info.PromptTruncation = col.promptTruncation()
	info.Features = col.features
	info.Lateness = summarizeLateness(&col.lateness)
	if col.toWire.N() > 0 {
		info.LatenessToWire = new(summarizeLateness(&col.toWire))
	}
	if n, last := info.Scheduled, s.lastNs.Load(); n > 1 && last > 0 && !closedLoop {
		info.OfferedRate = float64(n-1) / (float64(last) / 1e9)
	}
	if col.lateness.N() > 1 && col.last > col.first {
		info.AchievedRate = float64(col.lateness.N()-1) / (float64(col.last-col.first) / 1e9)
	}
	info.ClientSaturated = saturatedBy(&col.saturation, int64(info.MaxLatenessMs*1e6))
	info.Complete = !interrupted && col.err == nil && flushErr == nil
	switch {
	case interrupted:
		info.Reason = fmt.Sprintf("interrupted after %d of %d requests were sent", sent, info.Scheduled)
	case col.err != nil || flushErr != nil:
		info.Reason = "writing results failed"
	}
	return errors.Join(col.err, flushErr)
}
