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
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/replay/pacing"
	"github.com/servetrace/servetrace/replay/scrub"
	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
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
	spans        *spanRun     // nil unless CollectSpans is set
	// scrub removes secrets (the API key, header values, URL credentials)
	// from whatever server-provided or user-provided text is written.
	scrub *scrub.Scrubber
	// notes tallies workload values replay ignored, capped or cleaned.
	notes notes
	// scrapeBytes counts what the run's metrics scrapes wrote
	// (maxScrapesBytes).
	scrapeBytes atomic.Int64
	// chatURL and completionsURL are the generation endpoints.
	chatURL, completionsURL string
	// graph is the stream's agent graph, for its notes (nil: none).
	graph *graph
	// answerKey keys the answers' fingerprints, eventKey greedy answers'
	// per-event hashes (outputhash.go).
	answerKey *anon.Keyed
	eventKey  uint64
	// media holds the run's synthetic images and clips; images serves
	// them with ImageTransport "url" (nil otherwise). toolSets and schemas
	// hold synthetic tool lists and schemas by shape; adapterRank maps
	// the workload's adapters to the server's by popularity (Adapters).
	media       *mediaCache
	images      *imageServer
	toolSets    sync.Map
	schemas     sync.Map // synthetic schemas by name and size
	adapterRank map[string]string
}

// newRunner returns a runner for validated opts, with its HTTP client.
func newRunner(opts Options) (*Runner, error) {
	client, err := newHTTPClient(opts)
	if err != nil {
		return nil, err
	}
	return &Runner{opts: opts, client: client, scrub: scrub.New(opts.secrets()...), media: newMediaCache(mediaCacheBytes),
		chatURL: opts.endpoint("/v1/chat/completions"), completionsURL: opts.endpoint("/v1/completions"), answerKey: opts.OutputSalt.Keyed(outputDomain), eventKey: eventKey(opts.OutputSalt)}, nil
}

// liveStats are counters for the progress line.
type liveStats struct {
	sent, done, failed atomic.Int64
	// builtLate counts requests whose body was built at their send time.
	builtLate atomic.Int64
}

// Run replays the workload bucket at workloadDir against opts.Target and
// writes results and run.json into runDir. It checks options and that the
// endpoint answers, and opens its listeners, before it creates anything;
// a run that fails before it starts removes what it created and closes
// its listeners. When ctx is cancelled
// mid-run, scheduling stops, in-flight requests get opts.Grace to finish and
// are then aborted, unsent ones are recorded as not_sent, and run.json says
// the run is incomplete. The returned RunInfo is also in run.json.
func Run(ctx context.Context, workloadDir, runDir string, opts Options) (*trace.RunInfo, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if err := trace.CheckOutputPath(runDir, []string{workloadDir}); err != nil {
		return nil, err
	}
	b, err := trace.OpenBucket(workloadDir)
	if err != nil {
		return nil, err
	}
	if b.Manifest.Rows == 0 {
		return nil, fmt.Errorf("workload %s has no requests", workloadDir)
	}
	return runRequests(ctx, b.Scan, b.Manifest, workloadDir, runDir, opts)
}

// runRequests replays the requests src reads (the workload at workloadDir,
// described by m) with validated opts, step by step: plan, connect,
// prompts, scraper, results, start, execute, finish. The schedule streams
// from src with a bounded look-ahead, so memory does not grow with the
// workload. Tests call it with requests the trace reader would refuse, so
// replay's own guards are checked.
func runRequests(ctx context.Context, src source, m *trace.Manifest, workloadDir, runDir string, opts Options) (info *trace.RunInfo, err error) {
	// Errors quote URLs and what servers answered: scrubbed before anyone
	// prints them.
	scrubber := scrub.New(opts.secrets()...)
	defer func() {
		if err != nil {
			err = scrub.Err(err, scrubber)
		}
	}()
	// The runner's own context: the prefetcher stops with it on any return.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	openLoop := opts.Concurrency == 0
	check, err := checkWorkload(ctx, src, &opts)
	if err != nil {
		return nil, err
	}
	// The stream reads ahead while the run sets up.
	s := newStream(ctx, src, &opts, openLoop, openLoop, check.graph, streamUnits)
	defer s.halt()
	if streamDone != nil {
		defer streamDone(s)
	}
	r, err := newRunner(opts)
	if err != nil {
		return nil, err
	}
	// The run's connections close with it: h1's idle pool keeps no
	// goroutine that would see a server close them.
	defer r.client.CloseIdleConnections()
	timeToReady, err := r.connect(ctx)
	if err != nil {
		return nil, err
	}
	counter, serverTok, err := r.preparePrompts(m.BlockSize, check.counts)
	if err != nil {
		return nil, err
	}
	r.rankAdapters(check.adapters)
	r.graph = s.graph
	if check.graph && !openLoop {
		r.notes.add("parent_ids are followed in open loop only: closed loop sent the requests that name parents without waiting on them", "")
	}
	if r.opts.ImageTransport == ImageTransportURL {
		if r.images, err = startImageServer(ctx, r.media); err != nil {
			return nil, err
		}
		defer r.images.stop()
	}
	scrs, idleWait, err := r.prepareScrapers(ctx, runDir)
	if err != nil {
		return nil, err
	}
	if r.opts.RunID == "" {
		r.opts.RunID = newRunID()
	}
	// Until the run starts (its provisional run.json written), what it
	// makes is unmade should it fail: a run that cannot start leaves
	// nothing behind and nothing running. The listeners come first, so
	// a port that is taken fails it before it creates anything.
	var undo startUndo
	started := false
	defer func() {
		if !started {
			undo.run()
		}
	}()
	spanRun, err := r.listenSpans(check.planned)
	if err != nil {
		return nil, err
	}
	undo.then(spanRun.close)
	r.spans = spanRun
	stopServing, err := r.serveSelfMetrics(ctx)
	if err != nil {
		return nil, err
	}
	defer stopServing()
	// Nothing is created in runDir before here.
	undo.dirs(filepath.Join(runDir, trace.ResultsDir))
	w, err := trace.NewResultWriter(runDir, r.opts.RotateRows)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	undo.then(w.Close) // its part file held ahead, and its lock
	w.SetEncoder(pacing.InBackground)
	if len(scrs) > 0 {
		// Made now, so that a link planted in its place stops the run
		// instead of its scrapes.
		undo.dirs(filepath.Join(runDir, "metrics"))
		if err := trace.MakeDir(filepath.Join(runDir, "metrics")); err != nil {
			return nil, err
		}
	}
	if err := spanRun.writeKept(runDir); err != nil {
		return nil, err
	}
	if spanRun != nil {
		undo.file(filepath.Join(runDir, SpansName))
	}
	info = r.newRunInfo(ctx, workloadDir, m, timeToReady, counter.Name())
	info.Scheduled = check.planned // what the check counted; the run's own count replaces it
	if r.opts.WaitIdle > 0 {
		info.IdleWaitMs = new(ms(idleWait))
	}
	health, err := newHealthSampler(runDir)
	if err != nil {
		return nil, err
	}
	undo.file(health.path)
	if floor, err := clientFloor(ctx, r.opts); err == nil {
		info.ClientFloor = floor
	} else if ctx.Err() == nil {
		r.notes.add("the client's floor could not be measured ("+shorten(err.Error())+")", "")
	}
	var pre *prefetcher
	clockStarted := make(chan struct{})
	if openLoop {
		pre = r.startPrefetch(ctx, s.toBuild, s.full, clockStarted)
		select {
		case <-pre.warm:
		case <-ctx.Done():
		}
	}
	// The look-ahead fills before the clock starts: reading it (a burst
	// of Parquet decoding) would otherwise compete with the first sends.
	select {
	case <-s.full:
	case <-ctx.Done():
	}
	scrs.scrape(ctx, "before", 0)
	gen := pacing.BoundHeap()
	health.bound(gen)
	defer pacing.EndHeapBound(gen)
	r.startClock()
	close(clockStarted)
	if err := writeProvisional(runDir, info, r.start); err != nil {
		health.finish()
		return nil, err
	}
	started = true
	stopScrape := r.scrapeDuring(ctx, scrs)
	runErr := r.execute(ctx, s, pre, w, info, check.planned)
	if s.err != nil {
		// A fault in the workload met mid-run: what was sent is recorded.
		runErr = errors.Join(runErr, fmt.Errorf("reading workload %s: %w", workloadDir, s.err))
		info.Complete = false
		info.Reason = strings.TrimPrefix(info.Reason+"; ", "; ") + "the workload could not be read to its end: " + shorten(s.err.Error())
	}
	info.Metrics = stopScrape()
	info.Client = health.finish()
	info.Client.BuiltAtSend = r.stats.builtLate.Load()
	if err := spanRun.finish(ctx, runDir, info, r.opts.SpansWait, func(s string) { r.notes.add(s, "") }); err != nil {
		runErr = errors.Join(runErr, err)
	}
	return info, r.finish(runDir, info, w, serverTok, runErr)
}

// connect waits for the endpoint when asked (WaitReady), checks that it
// answers, and learns its first model. It returns the time to ready in
// ms, or trace.NotRecorded.
func (r *Runner) connect(ctx context.Context) (timeToReady any, err error) {
	timeToReady = trace.NotRecorded
	if r.opts.WaitReady > 0 {
		d, err := r.waitReady(ctx, r.opts.WaitReady)
		if err != nil {
			return nil, err
		}
		timeToReady = ms(d)
	}
	if r.defaultModel, err = r.preflight(ctx); err != nil {
		return nil, err
	}
	return timeToReady, nil
}

// preparePrompts opens the tokenizer (or the endpoint's /tokenize, checked
// once) and the prompt builder for prefix blocks of blockSize tokens;
// counts says the workload will count text (workloadCheck.counts).
// serverTok is set when the endpoint counts.
func (r *Runner) preparePrompts(blockSize int, counts bool) (counter tokenize.Counter, serverTok *serverCounter, err error) {
	if r.opts.Tokenizer == TokenizerServer {
		model := r.opts.Model
		if model == "" {
			model = r.defaultModel
		}
		serverTok = &serverCounter{url: r.opts.endpoint("/tokenize"), model: model, client: r.client, headers: r.setHeaders, opts: &r.opts}
		if _, err := serverTok.count(" the"); err != nil {
			return nil, nil, opterr.New("Tokenizer", TokenizerServer, "%v; the endpoint needs a /tokenize route (vLLM, SGLang), or pick a local Tokenizer", err)
		}
		counter = serverTok
	} else {
		// A bundled tokenizer is built only where the workload counts
		// text: the prompts need no build, and a build costs 0.1–0.3 s of
		// the client's CPU.
		tok, err := tokenize.OpenLazy(r.opts.Tokenizer, r.opts.TokenizerPattern)
		if err == nil && counts {
			err = tok.Load()
		}
		if err != nil {
			return nil, nil, opterr.New("Tokenizer", r.opts.Tokenizer, "%v", err)
		}
		counter = tok
	}
	if r.prompt, err = tokenize.NewPromptBuilder(counter, max(blockSize, 1)); err != nil {
		return nil, nil, opterr.New("Tokenizer", r.opts.Tokenizer, "%v", err)
	}
	r.prompt = r.prompt.Salted(r.opts.PromptSalt)
	return counter, serverTok, nil
}

// prepareScrapers checks that each Metrics endpoint answers (an engine
// endpoint, with WaitIdle, until it reports the server idle) and returns
// their scrapers and how long the idle wait took; none without Metrics.
func (r *Runner) prepareScrapers(ctx context.Context, runDir string) (scrapers, time.Duration, error) {
	var waited time.Duration
	if r.opts.WaitIdle > 0 {
		var err error
		if waited, err = r.waitIdleEngines(ctx, runDir); err != nil {
			return nil, 0, err
		}
	}
	var out scrapers
	for i, ep := range r.opts.Metrics {
		scr := newScraper(i, runDir, r)
		if ep.Role != RoleEngine || r.opts.WaitIdle == 0 {
			if _, _, err := scr.fetch(ctx); err != nil {
				return nil, 0, opterr.New("Metrics", nil, "%s endpoint: %v", ep.Role, err)
			}
		}
		out = append(out, scr)
	}
	return out, waited, nil
}

// newRunInfo returns run.json's provenance for this run, before it starts.
func (r *Runner) newRunInfo(ctx context.Context, workloadDir string, m *trace.Manifest, timeToReady any, tokenizer string) *trace.RunInfo {
	models, server := r.modelsAnswer(ctx)
	return &trace.RunInfo{SchemaVersion: trace.SchemaVersion, ToolVersion: trace.ToolVersion, RunID: r.opts.RunID, Shard: r.opts.Shard, ShardCount: r.opts.ShardCount,
		Target: scrub.URL(r.opts.Target), Workload: workloadDir, Options: r.opts.Recorded(), MaxLatenessMs: ms(r.opts.MaxLateness),
		ToolCommit: toolCommit(), GoVersion: runtime.Version(), HostCPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		CommandLine: r.opts.CommandLine, Labels: r.opts.Labels, Endpoint: scrub.URL(r.opts.Target),
		ServerHeader: server, ServerModels: models, Server: r.fingerprint(ctx, models), Host: hostInfo(),
		TimeToReadyMs: timeToReady, WorkloadSHA256: workloadDigest(workloadDir, m), Tokenizer: tokenizer}
}

// serveSelfMetrics, with ServeMetrics, serves the replayer's own metrics
// until the returned stop is called (or the process ends).
func (r *Runner) serveSelfMetrics(ctx context.Context) (stop func(), err error) {
	if r.opts.ServeMetrics == "" {
		return func() {}, nil
	}
	r.self = newSelfMetrics(r.opts.RunID, r.opts.Shard, &r.stats)
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	url, err := r.self.serve(serveCtx, r.opts.ServeMetrics)
	if err != nil {
		stopServing()
		return nil, err
	}
	if r.opts.Progress != nil {
		fmt.Fprintf(r.opts.Progress, "replay: serving metrics at %s\n", url)
	}
	return stopServing, nil
}

// startClock sets the run's monotonic zero: the first request is due now,
// or at StartAt, the zero every shard shares.
func (r *Runner) startClock() {
	r.start = time.Now()
	if !r.opts.StartAt.IsZero() {
		r.start = r.start.Add(time.Until(r.opts.StartAt)) // keeps the monotonic reading
		if d := time.Until(r.start); d > 0 && r.opts.Progress != nil {
			fmt.Fprintf(r.opts.Progress, "replay: shard %d/%d waits %s for the start time the shards share\n", r.opts.Shard, r.opts.ShardCount, d.Round(time.Millisecond))
		}
	}
	r.clock = monotonicClock(r.start)
}

// writeProvisional writes run.json marked incomplete: if the process is
// killed outright, the run dir still says what it is, and the results
// parts closed so far (every 10 s or 10k rows) are readable.
func writeProvisional(runDir string, info *trace.RunInfo, start time.Time) error {
	provisional := *info
	provisional.Complete, provisional.Reason = false, "the replay did not finish (still running, or killed): results cover the parts closed before it stopped"
	provisional.StartUnixNs = start.UnixNano()
	provisional.StartUTC = start.UTC().Format(time.RFC3339Nano)
	if err := trace.WriteJSONAtomic(filepath.Join(runDir, trace.RunInfoName), &provisional); err != nil {
		return fmt.Errorf("write provisional %s: %w", trace.RunInfoName, err)
	}
	return nil
}

// scrapeDuring scrapes every MetricsInterval until the returned stop,
// which takes the last scrapes and returns the scrape files; without
// scrapers, stop returns nil.
func (r *Runner) scrapeDuring(ctx context.Context, scrs scrapers) (stop func() []string) {
	if len(scrs) == 0 {
		return func() []string { return nil }
	}
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, scr := range scrs {
		wg.Go(func() { scr.run(sctx, r.opts.MetricsInterval, r.clock) })
	}
	return func() []string {
		cancel()
		wg.Wait()
		scrs.scrape(context.WithoutCancel(ctx), "after", r.clock())
		return scrs.files()
	}
}

// finish completes run.json (what went wrong on the way, the notes, times,
// parts and file hashes) and writes it; it returns runErr with any error
// of the write.
func (r *Runner) finish(runDir string, info *trace.RunInfo, w *trace.ResultWriter, serverTok *serverCounter, runErr error) error {
	if serverTok != nil && serverTok.failed.Load() > 0 {
		info.TokenizerFailures = serverTok.failed.Load()
		info.Reason = strings.TrimPrefix(info.Reason+"; ", "; ") + fmt.Sprintf("%d server token counts failed (first: %v): session prompt sizes may be off", serverTok.failed.Load(), serverTok.err())
	}
	info.Reason = r.scrub.Scrub(info.Reason)
	for _, n := range r.graph.graphNotes() {
		if n.t.n > 0 {
			r.notes.addN(n.what, n.t.first, n.t.n)
		}
	}
	info.Notes = r.notes.lines()
	info.StartUTC = time.Unix(0, info.StartUnixNs).UTC().Format(time.RFC3339Nano)
	info.EndUTC = time.Unix(0, info.EndUnixNs).UTC().Format(time.RFC3339Nano)
	info.Parts = w.Parts()
	info.Files = hashRunDir(runDir)
	if err := trace.WriteJSONAtomic(filepath.Join(runDir, trace.RunInfoName), info); err != nil {
		return errors.Join(runErr, err)
	}
	return runErr
}

// preflight checks that the endpoint answers and returns its first model.
func (r *Runner) preflight(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.opts.endpoint("/v1/models"), nil)
	if err != nil {
		return "", opterr.New("Target", scrub.URL(r.opts.Target), "%v", err)
	}
	r.setHeaders(req)
	resp, err := r.client.Do(req)
	if err != nil {
		return "", opterr.New("Target", nil, "cannot reach endpoint %s (%v); start one with 'servetrace sim' or point Target at a running server", scrub.URL(r.opts.Target), shortTransport(err))
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
		return "", opterr.New("Model", nil, "endpoint %s did not list a model at /v1/models (%s); name one with Model", scrub.URL(r.opts.Target), r.opts.httpStatusError(resp))
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

// newResult copies a planned request's identity and shape into a result.
func (r *Runner) newResult(p *planned) trace.Result {
	q := p.req
	res := trace.Result{Identity: q.Identity, Shape: q.Shape, Temperature: q.Temperature, TopP: q.TopP, Seed: q.Seed, Phase: q.Phase, Role: q.Role,
		ScheduledNs: p.scheduledNs, RunID: r.opts.RunID, Shard: r.opts.Shard, Warmup: p.warmup}
	if p.warmup && res.Phase == "" {
		res.Phase = "warmup"
	}
	if p.probe != nil {
		res.Probe = p.probe.Kind
	}
	r.makeRecordable(&res)
	return res
}

// progress prints a status line about once a second until stopped; total
// is at most how many requests the run sends.
func (r *Runner) progress(total int64) (stop func()) {
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

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// newRunID returns a sortable, unique run id: UTC time plus random bits.
func newRunID() string {
	return time.Now().UTC().Format("20060102T150405Z") + "-" + randomHex(3)
}
