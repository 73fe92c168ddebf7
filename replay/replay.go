// Package replay sends a workload to an OpenAI-compatible endpoint and
// records every request's fate.
//
// Open loop (the default): one scheduler goroutine computes each send time
// ahead and never waits for a response; every request runs on its own
// goroutine, so a slow server cannot delay the schedule (no coordinated
// omission). With MaxConcurrency a FIFO admitter holds requests that find the
// cap full; admitted_ns records when each left. Closed loop (Concurrency):
// a fixed number of workers, each sending its next request when the last one
// finishes.
//
// Each result records when the schedule wanted the request sent
// (scheduled_ns), when it was let go (admitted_ns) and when it reached the
// HTTP transport (sent_ns). run.json summarises lateness (sent − admitted);
// a run whose lateness p99 exceeds MaxLateness is marked client-saturated, so
// a saturated client never passes for a slow server.
package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
)

// Runner replays one workload into one run directory.
type Runner struct {
	opts         Options
	client       *http.Client
	prompt       *tokenize.PromptBuilder
	defaultModel string
	start        time.Time
	clock        func() int64
	stats        liveStats
	self         *selfMetrics // nil unless ServeMetrics is set
	// scrub removes secrets (the API key, header values, URL credentials)
	// from whatever server-provided or user-provided text is written.
	scrub *Scrubber
	// notes tallies workload values replay ignored, capped or cleaned.
	notes notes
	// chatURL and completionsURL are the generation endpoints.
	chatURL, completionsURL string
}

// newRunner returns a runner for validated opts, with its HTTP client.
func newRunner(opts Options) (*Runner, error) {
	client, err := newHTTPClient(opts)
	if err != nil {
		return nil, err
	}
	return &Runner{opts: opts, client: client, scrub: NewScrubber(opts.secrets()...),
		chatURL: opts.endpoint("/v1/chat/completions"), completionsURL: opts.endpoint("/v1/completions")}, nil
}

// liveStats are counters for the progress line.
type liveStats struct {
	sent, done, failed atomic.Int64
}

// Run replays the workload bucket at workloadDir against opts.Target and
// writes results and run.json into runDir. It checks options and that the
// endpoint answers before it creates anything. When ctx is cancelled
// mid-run, scheduling stops, in-flight requests get opts.Grace to finish and
// are then aborted, unsent ones are recorded as not_sent, and run.json says
// the run is incomplete. The returned RunInfo is also in run.json.
func Run(ctx context.Context, workloadDir, runDir string, opts Options) (*trace.RunInfo, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	reqs, m, err := trace.ReadAll(ctx, workloadDir)
	if err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("workload %s has no requests", workloadDir)
	}
	return runRequests(ctx, reqs, m, workloadDir, runDir, opts)
}

// runRequests replays reqs (the workload at workloadDir, described by m)
// with validated opts. Tests call it with requests the trace reader would
// refuse, so replay's own guards are checked.
func runRequests(ctx context.Context, reqs []trace.Request, m *trace.Manifest, workloadDir, runDir string, opts Options) (info *trace.RunInfo, err error) {
	// Errors quote URLs and what servers answered: scrubbed before anyone
	// prints them.
	scrub := NewScrubber(opts.secrets()...)
	defer func() {
		if err != nil {
			err = scrubbedError(err, scrub)
		}
	}()
	plan, err := buildPlan(reqs, &opts)
	if err != nil {
		return nil, err
	}
	r, err := newRunner(opts)
	if err != nil {
		return nil, err
	}
	client := r.client
	var timeToReady any = trace.NotRecorded
	if opts.WaitReady > 0 {
		d, err := r.waitReady(ctx, opts.WaitReady)
		if err != nil {
			return nil, err
		}
		timeToReady = ms(d)
	}
	if r.defaultModel, err = r.preflight(ctx); err != nil {
		return nil, err
	}
	var counter tokenize.Counter
	var serverTok *serverCounter
	if opts.Tokenizer == TokenizerServer {
		model := opts.Model
		if model == "" {
			model = r.defaultModel
		}
		serverTok = &serverCounter{url: opts.endpoint("/tokenize"), model: model, client: client, headers: r.setHeaders, opts: &r.opts}
		if _, err := serverTok.count(" the"); err != nil {
			return nil, opterr.New("Tokenizer", TokenizerServer, "%v; the endpoint needs a /tokenize route (vLLM, SGLang), or pick a local Tokenizer", err)
		}
		counter = serverTok
	} else {
		tok, err := tokenize.Open(opts.Tokenizer, opts.TokenizerPattern)
		if err != nil {
			return nil, opterr.New("Tokenizer", opts.Tokenizer, "%v", err)
		}
		counter = tok
	}
	if r.prompt, err = tokenize.NewPromptBuilder(counter, max(m.BlockSize, 1)); err != nil {
		return nil, opterr.New("Tokenizer", opts.Tokenizer, "%v", err)
	}
	var scr *scraper
	if opts.MetricsURL != "" {
		scr = newScraper(opts.MetricsURL, runDir, r)
		if opts.WaitIdle > 0 {
			if err := scr.waitIdle(ctx, opts.WaitIdle); err != nil {
				return nil, err
			}
		} else if _, err := scr.fetch(ctx); err != nil {
			return nil, opterr.New("MetricsURL", nil, "%v", err)
		}
	}
	if r.opts.RunID == "" {
		r.opts.RunID = newRunID()
	}
	w, err := trace.NewResultWriter(runDir, r.opts.RotateRows)
	if err != nil {
		return nil, err
	}
	models, server := r.modelsAnswer(ctx)
	info = &trace.RunInfo{SchemaVersion: trace.SchemaVersion, ToolVersion: trace.ToolVersion, RunID: r.opts.RunID, Shard: r.opts.Shard, ShardCount: r.opts.ShardCount,
		Target: RedactURL(r.opts.Target), Workload: workloadDir, Options: r.opts.Recorded(), Scheduled: int64(len(plan)), MaxLatenessMs: ms(r.opts.MaxLateness),
		ToolCommit: toolCommit(), GoVersion: runtime.Version(), HostCPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		CommandLine: r.opts.CommandLine, Labels: r.opts.Labels, Endpoint: RedactURL(r.opts.Target),
		ServerHeader: server, ServerModels: models, TimeToReadyMs: timeToReady, WorkloadSHA256: workloadDigest(workloadDir, m), Tokenizer: counter.Name()}
	if r.opts.ServeMetrics != "" {
		r.self = newSelfMetrics(r.opts.RunID, r.opts.Shard, &r.stats)
		serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
		defer stopServing()
		url, err := r.self.serve(serveCtx, r.opts.ServeMetrics)
		if err != nil {
			return nil, err
		}
		if r.opts.Progress != nil {
			fmt.Fprintf(r.opts.Progress, "replay: serving metrics at %s\n", url)
		}
	}
	health := newHealthSampler(runDir)
	if scr != nil {
		scr.scrape(ctx, "before", 0)
	}
	boundHeap()
	// The run's monotonic zero: the first request is due now, or at
	// --start-at, the zero every shard shares.
	r.start = time.Now()
	if !r.opts.StartAt.IsZero() {
		r.start = r.start.Add(time.Until(r.opts.StartAt)) // keeps the monotonic reading
		if d := time.Until(r.start); d > 0 && r.opts.Progress != nil {
			fmt.Fprintf(r.opts.Progress, "replay: shard %d/%d waits %s for the start time the shards share\n", r.opts.Shard, r.opts.ShardCount, d.Round(time.Millisecond))
		}
	}
	r.clock = monotonicClock(r.start)
	// A provisional run.json, marked incomplete: if the process is killed
	// outright, the run dir still says what it is, and the results parts
	// closed so far (every 10 s or 10k rows) are readable.
	provisional := *info
	provisional.Complete, provisional.Reason = false, "the replay did not finish (still running, or killed): results cover the parts closed before it stopped"
	provisional.StartUnixNs = r.start.UnixNano()
	provisional.StartUTC = r.start.UTC().Format(time.RFC3339Nano)
	if err := trace.WriteJSONAtomic(filepath.Join(runDir, trace.RunInfoName), &provisional); err != nil {
		return nil, fmt.Errorf("write provisional %s: %w", trace.RunInfoName, err)
	}
	var stopScrape func()
	if scr != nil {
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); scr.run(sctx, r.opts.MetricsInterval, r.clock) }()
		stopScrape = func() { cancel(); <-done; scr.scrape(context.WithoutCancel(ctx), "after", r.clock()) }
	}
	runErr := r.execute(ctx, plan, w, info)
	if stopScrape != nil {
		stopScrape()
		info.Metrics = scr.files
	}
	info.Client = health.finish()
	if serverTok != nil && serverTok.failed.Load() > 0 {
		info.TokenizerFailures = serverTok.failed.Load()
		info.Reason = strings.TrimPrefix(info.Reason+"; ", "; ") + fmt.Sprintf("%d server token counts failed (first: %v): session prompt sizes may be off", serverTok.failed.Load(), serverTok.err())
	}
	info.Reason = r.scrub.Scrub(info.Reason)
	info.Notes = r.notes.lines()
	info.StartUTC = time.Unix(0, info.StartUnixNs).UTC().Format(time.RFC3339Nano)
	info.EndUTC = time.Unix(0, info.EndUnixNs).UTC().Format(time.RFC3339Nano)
	info.Parts = w.Parts()
	info.Files = hashRunDir(runDir)
	if err := trace.WriteJSONAtomic(filepath.Join(runDir, trace.RunInfoName), info); err != nil {
		return info, errors.Join(runErr, err)
	}
	return info, runErr
}

// preflight checks that the endpoint answers and returns its first model.
func (r *Runner) preflight(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.opts.endpoint("/v1/models"), nil)
	if err != nil {
		return "", opterr.New("Target", RedactURL(r.opts.Target), "%v", err)
	}
	r.setHeaders(req)
	resp, err := r.client.Do(req)
	if err != nil {
		return "", opterr.New("Target", nil, "cannot reach endpoint %s (%v); start one with 'servetrace sim' or point Target at a running server", RedactURL(r.opts.Target), shortTransport(err))
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list) != nil || len(list.Data) == 0 {
		if r.opts.Model != "" {
			return "", nil // the endpoint answers; the user named the model
		}
		return "", opterr.New("Model", nil, "endpoint %s did not list a model at /v1/models (%s); name one with Model", RedactURL(r.opts.Target), r.opts.httpStatusError(resp))
	}
	return list.Data[0].ID, nil
}

func shortTransport(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// collector receives results, writes them, and tallies run.json figures.
type collector struct {
	w         *trace.ResultWriter
	every     time.Duration
	outcomes  trace.OutcomeCt
	lateness  []int64
	first     int64
	last      int64
	err       error
	done      chan struct{}
	results   chan trace.Result
	lastFlush time.Time
	// Prompt truncation: requests whose usage reported prompt tokens, and
	// the deficits of those the server cut.
	promptChecked int64
	deficits      []int64
}

// A server that reports fewer prompt tokens than were sent, by more than
// the larger of truncationSlackTokens and truncationSlackPct of the prompt,
// cut it: a chat template adds tokens (a few to a few dozen) and a
// different tokenizer moves the count by a few percent, but neither takes
// away a tenth. A llama.cpp or Ollama server with a 2,048-token context
// cut prompts by up to 4,162 tokens and said so only in usage.prompt_tokens.
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
	if len(c.deficits) == 0 {
		return nil
	}
	d := slices.Clone(c.deficits)
	slices.Sort(d)
	return &trace.PromptTruncation{Requests: int64(len(d)), Checked: c.promptChecked, MaxDeficitTokens: d[len(d)-1], P50DeficitTokens: d[(len(d)-1)/2],
		ToleranceTokens: truncationSlackTokens, TolerancePct: truncationSlackPct}
}

func newCollector(w *trace.ResultWriter, every time.Duration, r *Runner) *collector {
	c := &collector{w: w, every: every, outcomes: trace.OutcomeCt{}, first: -1, last: -1,
		done: make(chan struct{}), results: make(chan trace.Result, 4096), lastFlush: time.Now()}
	go c.loop(r)
	return c
}

func (c *collector) loop(r *Runner) {
	defer close(c.done)
	tick := time.NewTicker(min(c.every, time.Second))
	defer tick.Stop()
	for {
		select {
		case res, ok := <-c.results:
			if !ok {
				return
			}
			c.add(res, r)
		case <-tick.C:
			if time.Since(c.lastFlush) >= c.every && c.err == nil {
				c.err = c.w.Flush()
				c.lastFlush = time.Now()
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
		c.lateness = append(c.lateness, *res.SentNs-res.AdmittedNs)
		if c.first < 0 || *res.SentNs < c.first {
			c.first = *res.SentNs
		}
		c.last = max(c.last, *res.SentNs)
	}
	if d, checked := promptDeficit(&res); checked {
		c.promptChecked++
		if d > 0 {
			c.deficits = append(c.deficits, d)
		}
	}
	if c.err == nil {
		c.err = c.w.Write(res)
	}
}

// execute runs the plan and records every request exactly once.
func (r *Runner) execute(ctx context.Context, plan []planned, w *trace.ResultWriter, info *trace.RunInfo) error {
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
	stopProgress := r.progress(len(plan))

	var inflight sync.WaitGroup
	handled := make([]atomic.Bool, len(plan))
	if r.opts.Concurrency > 0 {
		r.runClosedLoop(ctx, reqCtx, plan, col, &inflight, handled)
	} else {
		r.runOpenLoop(ctx, reqCtx, plan, col, &inflight, handled)
	}
	inflight.Wait()
	interrupted := ctx.Err() != nil
	sent := 0
	for i := range plan {
		if handled[i].Load() {
			sent++
		}
	}
	if r.opts.Concurrency > 0 {
		// Closed loop schedules a request when a worker takes it: those
		// never taken were never scheduled.
		plan = plan[:sent]
		info.Scheduled = int64(sent)
	}
	for i, p := range plan {
		if handled[i].Load() {
			continue
		}
		res := r.newResult(p)
		res.AdmittedNs = p.scheduledNs
		res.Outcome, res.Error = trace.OutcomeNotSent, "run ended before the request was sent"
		col.results <- res
	}
	inflight.Wait()
	close(graceDone)
	close(col.results)
	<-col.done
	stopProgress()
	info.EndUnixNs = time.Now().UnixNano()
	flushErr := w.Flush()

	info.Outcomes = col.outcomes
	info.PromptTruncation = col.promptTruncation()
	info.Lateness = summarizeLateness(col.lateness)
	if n := len(plan); n > 1 && plan[n-1].scheduledNs > 0 && r.opts.Concurrency == 0 {
		info.OfferedRate = float64(n-1) / (float64(plan[n-1].scheduledNs) / 1e9)
	}
	if len(col.lateness) > 1 && col.last > col.first {
		info.AchievedRate = float64(len(col.lateness)-1) / (float64(col.last-col.first) / 1e9)
	}
	info.ClientSaturated = info.Lateness.P99Ms > info.MaxLatenessMs
	info.Complete = !interrupted && col.err == nil && flushErr == nil
	switch {
	case interrupted:
		info.Reason = fmt.Sprintf("interrupted after %d of %d requests were sent", sent, len(plan))
	case col.err != nil || flushErr != nil:
		info.Reason = "writing results failed"
	}
	return errors.Join(col.err, flushErr)
}

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

// newResult copies a planned request's identity and shape into a result.
func (r *Runner) newResult(p planned) trace.Result {
	q := p.req
	res := trace.Result{Identity: q.Identity, Shape: q.Shape, Temperature: q.Temperature, TopP: q.TopP, Phase: q.Phase,
		ScheduledNs: p.scheduledNs, RunID: r.opts.RunID, Shard: r.opts.Shard, Warmup: p.warmup}
	if p.warmup && res.Phase == "" {
		res.Phase = "warmup"
	}
	r.makeRecordable(&res)
	return res
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

// progress prints a status line about once a second until stopped.
func (r *Runner) progress(total int) (stop func()) {
	if r.opts.Progress == nil {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		lastSent, lastAt := int64(0), time.Now()
		line := func() string {
			sent, done := r.stats.sent.Load(), r.stats.done.Load()
			rate := float64(sent-lastSent) / time.Since(lastAt).Seconds()
			lastSent, lastAt = sent, time.Now()
			return fmt.Sprintf("\rreplay: %d/%d sent, %d in flight, %d done, %d failed, %.1f req/s, %.0fs   ",
				sent, total, sent-min(sent, done), done, r.stats.failed.Load(), rate, time.Since(r.start).Seconds())
		}
		for {
			select {
			case <-quit:
				fmt.Fprintln(r.opts.Progress, line())
				return
			case <-t.C:
				fmt.Fprint(r.opts.Progress, line())
			}
		}
	})
	return func() { close(quit); wg.Wait() }
}

func summarizeLateness(ns []int64) trace.LatenessSummary {
	if len(ns) == 0 {
		return trace.LatenessSummary{}
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	// Nearest-rank percentiles: lateness is a guard rail, not a reported metric.
	at := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		return float64(s[max(0, min(i, len(s)-1))]) / 1e6
	}
	return trace.LatenessSummary{P50Ms: at(0.50), P99Ms: at(0.99), MaxMs: float64(s[len(s)-1]) / 1e6}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// newRunID returns a sortable, unique run id: UTC time plus random bits.
func newRunID() string {
	return time.Now().UTC().Format("20060102T150405Z") + "-" + randomHex(3)
}

// GCPercent is the GOGC a replay process runs with: fewer, larger
// collections keep GC work (results parts are encoded mid-run) from showing
// up as send lateness.
const GCPercent = 400

// tunedGC is set while TuneGC's setting is in force.
var tunedGC atomic.Bool

// TuneGC sets GOGC to GCPercent for a process that replays and returns
// a function that restores the previous setting. It changes process-wide
// runtime state: call it where the process is owned (a command, a test).
// While it is in force, Run also bounds the heap once the workload is
// loaded (boundHeap).
func TuneGC() (restore func()) {
	old := debug.SetGCPercent(GCPercent)
	oldLimit := debug.SetMemoryLimit(-1)
	tunedGC.Store(true)
	return func() {
		tunedGC.Store(false)
		heapBound.Store(0)
		debug.SetGCPercent(old)
		debug.SetMemoryLimit(oldLimit)
	}
}

// heapHeadroom is what boundHeap allows above GCPercent's goal.
const heapHeadroom = 128 << 20

// boundHeap, under TuneGC and unless the user set GOMEMLIMIT, collects once
// before the schedule starts (the workload's loading garbage would
// otherwise be collected mid-run) and sets a soft memory limit of
// (1 + GOGC/100) times what is then live, plus heapHeadroom. At GOGC 400
// the collector counts what is allocated while it marks as live, so its
// heap goal drifts up run after run (a 10-minute soak went from 461 to
// 750 MB RSS while the heap retained after a full collection stayed flat);
// the limit holds RSS where the first cycles put it and only binds on
// that drift. Should the run's live state really grow past it, the health
// sampler lifts it (liftHeapBound) rather than let the collector run flat
// out.
func boundHeap() {
	if !tunedGC.Load() || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	runtime.GC()
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	live := int64(sample[0].Value.Uint64())
	limit := live*(1+GCPercent/100) + heapHeadroom
	heapBound.Store(limit)
	debug.SetMemoryLimit(limit)
}

// heapBound is the memory limit boundHeap set, 0 when none is in force.
var heapBound atomic.Int64

// gcShareToLift is the share of the CPU the process used, over the last
// gcWindow seconds, that the collector may take before the heap bound is
// lifted: a run whose live state really grows (long histories, many large
// prompts in flight) must not have its collector run flat out, or the
// client's own lateness would be the GC's. A bound that binds keeps the
// collector at 17–30% of the CPU used (measured under -race on a busy
// machine); a replay at GOGC 400 far below.
const gcShareToLift = 0.15

// gcWindow is the valve's window in seconds (health samples).
const gcWindow = 5

// liftHeapBound removes boundHeap's limit, once; it reports whether it did.
func liftHeapBound() bool {
	if heapBound.Swap(0) == 0 {
		return false
	}
	debug.SetMemoryLimit(math.MaxInt64)
	return true
}
