// Package replay sends a workload to an OpenAI-compatible endpoint with
// open-loop timing and records every request's fate.
//
// One scheduler goroutine computes each send time ahead from the workload's
// timestamps and never waits for a response: every request is handed to its
// own goroutine, so a slow server cannot delay the schedule (no coordinated
// omission). Each result records when the schedule wanted the request sent
// (scheduled_ns), when it was let go (admitted_ns) and when it reached the
// HTTP transport (sent_ns); the run's lateness (sent − admitted) is
// summarised in run.json so a saturated client never passes for a slow server.
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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
)

// Options configures a replay.
type Options struct {
	// Target is the endpoint's base URL, e.g. http://127.0.0.1:8000.
	Target string
	// Model overrides every request's model; when both are empty the
	// endpoint's first listed model is used.
	Model string
	// API forces "chat" or "completions"; empty uses each request's api.
	API string
	// Stream forces streaming on ("true") or off ("false"); "" or "auto"
	// uses each request's stream flag.
	Stream string
	// Speed scales the workload's timing: 2 sends twice as fast.
	Speed float64
	// Timeout bounds each request from send to the end of its response.
	Timeout time.Duration
	// Duration and MaxRequests cut the schedule (0 = no limit).
	Duration    time.Duration
	MaxRequests int
	// MaxLateness marks the run client-saturated when lateness p99 exceeds it.
	MaxLateness time.Duration
	// IgnoreEOS asks the server to generate exactly max_tokens (vLLM, SGLang
	// and the simulator honour it; OpenAI's API rejects it).
	IgnoreEOS bool
	// Tokenizer synthesizes prompts of exact token counts.
	Tokenizer string
	// APIKey is sent as a bearer token; it is never written anywhere.
	APIKey string `json:"-"`
	// RunID names the run (default: generated); Shard numbers this process.
	RunID string
	Shard int32
	// Progress, when set, receives a status line about once a second.
	Progress io.Writer `json:"-"`
}

// DefaultOptions returns options a newcomer can live with.
func DefaultOptions() Options {
	return Options{Speed: 1, Timeout: 10 * time.Minute, MaxLateness: 5 * time.Millisecond, Tokenizer: tokenize.DefaultEncoding}
}

// Runner replays one workload into one run directory.
type Runner struct {
	opts   Options
	client *http.Client
	prompt *tokenize.PromptBuilder
	start  time.Time
	clock  func() int64
}

// planned is one request of the schedule.
type planned struct {
	req         *trace.Request
	scheduledNs int64
}

// Run replays the workload bucket at workloadDir against opts.Target and
// writes results and run.json into runDir. It checks that the endpoint
// answers before it creates anything. When ctx is cancelled mid-run, unsent
// requests are recorded as not_sent, in-flight ones are aborted, and run.json
// says the run is incomplete. The returned RunInfo is also in run.json.
func Run(ctx context.Context, workloadDir, runDir string, opts Options) (*trace.RunInfo, error) {
	def := DefaultOptions()
	if opts.Speed <= 0 {
		return nil, fmt.Errorf("--speed must be positive, got %v", opts.Speed)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = def.Timeout
	}
	if opts.MaxLateness <= 0 {
		opts.MaxLateness = def.MaxLateness
	}
	switch opts.API {
	case "", trace.APIChat, trace.APICompletions:
	default:
		return nil, fmt.Errorf("--api %q: use chat or completions", opts.API)
	}
	switch opts.Stream {
	case "", "auto", "true", "false":
	default:
		return nil, fmt.Errorf("--stream %q: use auto, true or false", opts.Stream)
	}
	opts.Target = strings.TrimRight(opts.Target, "/")
	if !strings.HasPrefix(opts.Target, "http://") && !strings.HasPrefix(opts.Target, "https://") {
		return nil, fmt.Errorf("--target %q must be an http:// or https:// base URL, e.g. http://127.0.0.1:8000", opts.Target)
	}
	reqs, m, err := trace.ReadAll(ctx, workloadDir)
	if err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("workload %s has no requests", workloadDir)
	}
	tok, err := tokenize.Get(opts.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer: %w", err)
	}
	pb, err := tokenize.NewPromptBuilder(tok, max(m.BlockSize, 1))
	if err != nil {
		return nil, err
	}
	r := &Runner{opts: opts, client: newHTTPClient(), prompt: pb}
	defaultModel, err := r.preflight(ctx)
	if err != nil {
		return nil, err
	}
	if opts.Model == "" {
		opts.Model = defaultModel
		r.opts.Model = ""
	}
	plan := r.schedule(reqs)
	if opts.RunID == "" {
		opts.RunID = newRunID()
	}
	r.opts.RunID = opts.RunID
	w, err := trace.NewResultWriter(runDir, 0)
	if err != nil {
		return nil, err
	}
	info := &trace.RunInfo{SchemaVersion: trace.SchemaVersion, ToolVersion: trace.ToolVersion, RunID: opts.RunID, Shard: opts.Shard,
		Target: opts.Target, Workload: workloadDir, Options: opts, Scheduled: int64(len(plan)), MaxLatenessMs: ms(opts.MaxLateness)}
	runErr := r.execute(ctx, plan, defaultModel, w, info)
	info.Parts = w.Parts()
	if err := trace.WriteJSONAtomic(filepath.Join(runDir, trace.RunInfoName), info); err != nil {
		return info, errors.Join(runErr, err)
	}
	return info, runErr
}

// preflight checks that the endpoint answers and returns its first model.
func (r *Runner) preflight(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.opts.Target+"/v1/models", nil)
	if err != nil {
		return "", fmt.Errorf("--target %s: %w", r.opts.Target, err)
	}
	if r.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.opts.APIKey)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("cannot reach endpoint %s (%v); start one with 'servetrace sim' or point --target at a running server", r.opts.Target, shortTransport(err))
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
		return "", fmt.Errorf("endpoint %s did not list a model at /v1/models (HTTP %d); pass --model", r.opts.Target, resp.StatusCode)
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

// schedule turns workload timestamps into send offsets, cut by Duration and
// MaxRequests.
func (r *Runner) schedule(reqs []trace.Request) []planned {
	t0 := reqs[0].TS
	plan := make([]planned, 0, len(reqs))
	for i := range reqs {
		off := int64(float64(reqs[i].TS-t0) * 1000 / r.opts.Speed)
		if r.opts.Duration > 0 && off >= int64(r.opts.Duration) {
			break
		}
		if r.opts.MaxRequests > 0 && len(plan) >= r.opts.MaxRequests {
			break
		}
		plan = append(plan, planned{req: &reqs[i], scheduledNs: off})
	}
	return plan
}

// execute runs the schedule and records every request exactly once.
func (r *Runner) execute(ctx context.Context, plan []planned, defaultModel string, w *trace.ResultWriter, info *trace.RunInfo) error {
	results := make(chan trace.Result, 4096)
	var writeErr error
	outcomes := trace.OutcomeCt{}
	var lateness []int64
	var firstSent, lastSent int64 = -1, -1
	var done atomic.Int64
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for res := range results {
			outcomes[res.Outcome]++
			if res.SentNs != nil {
				lateness = append(lateness, *res.SentNs-res.AdmittedNs)
				if firstSent < 0 || *res.SentNs < firstSent {
					firstSent = *res.SentNs
				}
				lastSent = max(lastSent, *res.SentNs)
			}
			if writeErr == nil {
				writeErr = w.Write(res)
			}
			done.Add(1)
		}
	}()

	r.start = time.Now()
	r.clock = monotonicClock(r.start)
	info.StartUnixNs = r.start.UnixNano()
	runCtx, stopRequests := context.WithCancel(ctx)
	defer stopRequests()
	stopProgress := r.progress(len(plan), &done)

	var inflight sync.WaitGroup
	sent := 0
	for ; sent < len(plan); sent++ {
		p := plan[sent]
		if !r.waitUntil(ctx, p.scheduledNs) {
			break
		}
		res := r.newResult(p)
		res.AdmittedNs = p.scheduledNs // no concurrency cap: admitted when scheduled
		inflight.Go(func() {
			r.send(runCtx, p.req, defaultModel, &res)
			results <- res
		})
	}
	interrupted := ctx.Err() != nil
	if interrupted {
		stopRequests() // abort what is in flight
	}
	for _, p := range plan[sent:] {
		res := r.newResult(p)
		res.AdmittedNs = p.scheduledNs
		res.Outcome, res.Error = trace.OutcomeNotSent, "run ended before the request was due"
		results <- res
	}
	inflight.Wait()
	close(results)
	<-collected
	stopProgress()
	info.EndUnixNs = time.Now().UnixNano()
	flushErr := w.Flush()

	info.Outcomes = outcomes
	info.Lateness = summarizeLateness(lateness)
	if n := len(plan); n > 1 && plan[n-1].scheduledNs > 0 {
		info.OfferedRate = float64(n-1) / (float64(plan[n-1].scheduledNs) / 1e9)
	}
	if len(lateness) > 1 && lastSent > firstSent {
		info.AchievedRate = float64(len(lateness)-1) / (float64(lastSent-firstSent) / 1e9)
	}
	info.ClientSaturated = info.Lateness.P99Ms > info.MaxLatenessMs
	info.Complete = !interrupted && writeErr == nil && flushErr == nil
	switch {
	case interrupted:
		info.Reason = fmt.Sprintf("interrupted after %d of %d requests were sent", sent, len(plan))
	case writeErr != nil || flushErr != nil:
		info.Reason = "writing results failed"
	}
	return errors.Join(writeErr, flushErr)
}

// newResult copies a planned request's identity and shape into a result.
func (r *Runner) newResult(p planned) trace.Result {
	q := p.req
	return trace.Result{Identity: q.Identity, Shape: q.Shape, Temperature: q.Temperature, TopP: q.TopP, Phase: q.Phase,
		ScheduledNs: p.scheduledNs, RunID: r.opts.RunID, Shard: r.opts.Shard}
}

// send materializes and sends one request, filling res.
func (r *Runner) send(ctx context.Context, q *trace.Request, defaultModel string, res *trace.Result) {
	api := q.API
	if r.opts.API != "" {
		api = r.opts.API
	}
	if api == "" {
		api = trace.APIChat
	}
	res.API = api
	stream := q.Stream
	switch r.opts.Stream {
	case "true":
		stream = true
	case "false":
		stream = false
	}
	res.Stream = stream
	model := q.Model
	if r.opts.Model != "" {
		model = r.opts.Model
	}
	if model == "" {
		model = defaultModel
	}
	res.Model = model
	prompt := r.prompt.Build(int(q.InputTokens), q.PrefixBlocks, tokenize.SeedFor(q.RequestID))
	res.PromptTokensSent = q.InputTokens
	maxTokens := q.MaxTokens
	if maxTokens <= 0 {
		maxTokens = max(q.OutputTokens, 1)
	}
	body := requestBody{Model: model, MaxTokens: maxTokens, Stream: stream, Temperature: q.Temperature, TopP: q.TopP, IgnoreEOS: r.opts.IgnoreEOS}
	if api == trace.APIChat {
		body.Messages = []chatMessage{{Role: "user", Content: prompt}}
	} else {
		body.Prompt = &prompt
	}
	if stream {
		body.StreamOptions = &struct {
			IncludeUsage bool `json:"include_usage"`
		}{true}
	}
	b, err := json.Marshal(body)
	if err != nil {
		res.Outcome, res.Error = trace.OutcomeConnError, "encode request: "+err.Error()
		return
	}
	r.exchange(ctx, b, stream, res)
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
		left := ns - r.clock()
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
func (r *Runner) progress(total int, done *atomic.Int64) (stop func()) {
	if r.opts.Progress == nil {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-quit:
				fmt.Fprintf(r.opts.Progress, "\rreplay: %d/%d requests finished          \n", done.Load(), total)
				return
			case <-t.C:
				fmt.Fprintf(r.opts.Progress, "\rreplay: %d/%d requests finished, %.0fs elapsed", done.Load(), total, time.Since(r.start).Seconds())
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
