// Package analyze turns replay results into latency, throughput and outcome
// figures, each percentile with a confidence interval and its sample count.
//
// Definitions (docs/architecture.md, one definition everywhere):
//   - TTFT = first_token_ns − sent_ns (first-content mode, the default) or
//     first_chunk_ns − sent_ns (first-chunk mode, as vllm bench serve counts).
//     TTFT from the intended time (− scheduled_ns) is reported beside it so
//     client-side queueing is never hidden.
//   - ITL = gaps between consecutive token_times_ns, per event, pooled over
//     requests; several tokens in one event are one gap.
//   - TPOT = (done − first token) / (observed_output_tokens − 1), only where
//     that count is above 1.
//   - E2E = done − sent.
//   - Latency figures use successful (ok) requests; failed, timed-out and
//     cancelled requests are counted by class and stay in the denominator of
//     the success rate. Warmup requests are excluded and counted.
//   - Throughput counts successful requests over the span from the first
//     send to the last completion: output tokens/s and total (prompt+output)
//     tokens/s are reported separately, never mixed.
package analyze

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/servetrace/servetrace/analyze/peer"
	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/trace"
)

// TTFTMode says which event ends TTFT.
type TTFTMode string

// TTFT modes: the first event with content (the default), or the first
// chunk with non-empty choices even if its text is empty, as vllm bench
// serve counts it.
const (
	TTFTFirstContent TTFTMode = "first-content"
	TTFTFirstChunk   TTFTMode = "first-chunk"
)

// Options controls Analyze.
type Options struct {
	// TTFTMode is TTFTFirstContent (default) or TTFTFirstChunk.
	TTFTMode TTFTMode
	// Percentiles to report, in percent (default 50, 90, 95, 99, 99.9).
	Percentiles []float64
	// Bootstrap configures the bootstrap intervals of per-request metrics
	// (TTFT, TPOT, E2E, lateness); pooled ITL events get none (their
	// intervals are batch means with requests as the unit).
	Bootstrap BootstrapOptions
	// Precision is the target relative half-width for the stability figures
	// (default 0.05).
	Precision float64
	// Interval chooses each per-request percentile's headline interval
	// (default IntervalAuto: order statistics where the series looks
	// independent, batch means where it does not).
	Interval IntervalMethod
	// SLO, when set, adds goodput: requests that succeeded and met every
	// objective.
	SLO SLO
	// Stall is the gap between token events counted as a stall (default
	// DefaultStall).
	Stall time.Duration
	// By lists breakdown dimensions (see Dimensions).
	By []string
	// Window, when set, adds a time series of windows of this length.
	Window time.Duration
	// VsLogged, when set, compares replayed TTFT and E2E with those the
	// source trace logged for the same requests: a trace bucket path, or
	// VsLoggedAuto for run.json's workload.
	VsLogged string
	// Curves adds quantile curves with bands and the ITL histogram, for
	// plots, and a time series (about 40 windows) when Window is unset.
	Curves bool
	// InMemoryRows is the most result rows analyzed held in memory
	// (default DefaultInMemoryRows); runs of more are streamed, in fixed
	// memory, without time series, curves or repeats.
	InMemoryRows int
	// Baseline, when set, is a run directory of the same workload replayed
	// unloaded: the report adds each session's makespan slowdown against
	// it (SessionSlowdown).
	Baseline string
}

// DefaultStall is the token gap counted as a stall when none is given.
const DefaultStall = 500 * time.Millisecond

// DefaultPercentiles are reported when none are asked for.
var DefaultPercentiles = []float64{50, 90, 95, 99, 99.9}

// RunSummary is what run.json says about one run directory.
type RunSummary struct {
	Dir             string                `json:"dir"`
	RunID           string                `json:"run_id"`
	Shard           int32                 `json:"shard"`
	ShardCount      int32                 `json:"shard_count,omitempty"`
	Complete        bool                  `json:"complete"`
	Reason          string                `json:"reason,omitempty"`
	ClientSaturated bool                  `json:"client_saturated"`
	Lateness        trace.LatenessSummary `json:"lateness"`
	OfferedRate     float64               `json:"offered_rate_rps"`
	// AllAtOnce marks a run that sent every request at once (vLLM's
	// request rate inf); OfferedRate is then 0.
	AllAtOnce    bool               `json:"offered_all_at_once,omitempty"`
	AchievedRate float64            `json:"achieved_rate_rps"`
	Target       string             `json:"target"`
	Client       trace.ClientHealth `json:"client"`
	// PromptTruncation is set when the server reported prompts shorter
	// than sent: it cut them, so the run measured shorter prompts.
	PromptTruncation *trace.PromptTruncation `json:"prompt_truncation,omitempty"`
	// Tool names the peer tool whose result file this run is ("" for a
	// servetrace run); such a run records no client health.
	Tool string `json:"tool,omitempty"`
	// noTiming marks a peer run whose file keeps neither send times nor a
	// duration: no rate follows from it.
	noTiming bool
	// fileDurationS is a peer tool's own benchmark duration (a vLLM
	// result's), over which a report of that file alone counts throughput.
	fileDurationS float64
}

// TruncationWarning is the report's warning about a server that cut
// prompts, or "" when none were cut.
func (r RunSummary) TruncationWarning() string {
	pt := r.PromptTruncation
	if pt == nil || pt.Requests == 0 {
		return ""
	}
	return fmt.Sprintf("WARNING: the server cut %d of %d prompts (by up to %d tokens, median %d): these latencies are for shorter prompts than the workload's; raise the server's context length or shorten the workload",
		pt.Requests, pt.Checked, pt.MaxDeficitTokens, pt.P50DeficitTokens)
}

// Report is the result of an analysis.
type Report struct {
	Runs     []RunSummary `json:"runs"`
	TTFTMode TTFTMode     `json:"ttft_mode"`
	// Interval is how the headline intervals were chosen (Options.Interval).
	Interval IntervalMethod `json:"interval_method"`
	Requests Counts         `json:"requests"`
	// Metrics maps a metric name (ttft_ms, ...) to its distribution.
	Metrics    map[string]Distribution `json:"metrics"`
	Throughput Throughput              `json:"throughput"`
	Goodput    *Goodput                `json:"goodput,omitempty"`
	// Energy is the GPUs' energy over the run (a DCGM exporter scraped).
	Energy *Energy `json:"energy,omitempty"`
	// Sent describes what was actually sent and served.
	Sent Sent `json:"sent"`
	// Smoothness describes the streams' token pacing.
	Smoothness Smoothness `json:"smoothness"`
	// Features counts what replay did with each feature of the requests:
	// sent, stripped on purpose, refused by the target.
	Features []FeatureUse `json:"features,omitempty"`
	// Reasoning describes reasoning before answers, where streamed.
	Reasoning *Reasoning `json:"reasoning,omitempty"`
	// SpecDecode is speculative decoding's acceptance, from the engine's
	// scraped counters and the stream's tokens per event.
	SpecDecode *SpecDecode `json:"spec_decode,omitempty"`
	// Breakdowns maps a dimension (--by) to its groups.
	Breakdowns map[string][]Group `json:"breakdowns,omitempty"`
	// Series is the time series (--window), with regions and recovery.
	Series *Series `json:"series,omitempty"`
	// VsLogged compares the replay with the source trace's log.
	VsLogged *VsLogged `json:"vs_logged,omitempty"`
	// Repeats is set when the directories hold several runs.
	Repeats *Repeats `json:"repeats,omitempty"`
	// Curves are quantile functions with 95% bands (Options.Curves).
	Curves map[string]Curve `json:"curves,omitempty"`
	// ITLHistogram bins the pooled inter-token gaps (Options.Curves).
	ITLHistogram *Histogram `json:"itl_histogram,omitempty"`
	// Phases is where the time went inside the server, from its
	// request spans (replay --collect-spans, servetrace spans).
	Phases *Phases `json:"phases,omitempty"`
	// Probes is the accuracy of the probe requests' answers (replay
	// --probes), overall and by window, where the runs sent any.
	Probes *Probes `json:"probes,omitempty"`
	// Sessions is what the runs' sessions (conversations, agent graphs)
	// took end to end, sessions as the unit, where any has two requests.
	Sessions *Sessions `json:"sessions,omitempty"`
	// SessionSlowdown is each session's makespan over its makespan in an
	// unloaded run of the same workload (Options.Baseline).
	SessionSlowdown *SessionSlowdown `json:"session_slowdown,omitempty"`
	// Streamed is set when the rows were too many to hold and were
	// streamed: how exact the figures are.
	Streamed *Streamed `json:"streamed,omitempty"`
	// Given are peer tools' summary-only results, their own figures as
	// given: no per-request data, so no interval.
	Given []GivenRun `json:"given,omitempty"`
	// Notes are warnings a reader must see: an incomplete run, a saturated
	// client, percentiles the sample cannot bound.
	Notes []string `json:"notes,omitempty"`
}

// Counts tallies requests.
type Counts struct {
	Total    int            `json:"total"`
	Warmup   int            `json:"warmup_excluded"`
	Counted  int            `json:"counted"`
	Outcomes map[string]int `json:"outcomes"`
	// SuccessRate is ok / counted.
	SuccessRate float64 `json:"success_rate"`
	// NotStreamed counts ok requests without streaming: no TTFT, ITL or TPOT.
	NotStreamed int `json:"not_streamed"`
}

// Throughput over the measured span.
//
// Intervals (95%) treat completions as a Poisson process over the span:
// exact for the request rate, and for token rates the compound-Poisson
// normal interval Σx ± 1.96·√(Σx²) over the span, x the tokens of each
// request.
type Throughput struct {
	DurationS          float64    `json:"duration_s"`
	RequestsPerS       float64    `json:"requests_per_s"`
	RequestsPerSCI     [2]float64 `json:"requests_per_s_ci95"`
	OutputTokensPerS   float64    `json:"output_tokens_per_s"`
	OutputTokensPerSCI [2]float64 `json:"output_tokens_per_s_ci95"`
	TotalTokensPerS    float64    `json:"total_tokens_per_s"`
	TotalTokensPerSCI  [2]float64 `json:"total_tokens_per_s_ci95"`
	// InputTokens and OutputTokens are the totals of successful requests.
	InputTokens  float64 `json:"input_tokens"`
	OutputTokens float64 `json:"output_tokens"`
}

// MetricOrder lists metric names in report order.
var MetricOrder = []string{"ttft_ms", "ttfa_ms", "ttft_from_scheduled_ms", "itl_ms", "itl_per_request_ms", "tpot_ms", "e2e_ms", "e2e_from_scheduled_ms", "queue_wait_ms", "lateness_ms"}

// metricHelp describes each metric in one line.
var metricHelp = map[string]string{
	"ttft_ms":                "time to first token, from send",
	"ttfa_ms":                "time to first answer token (content or a tool call, after any reasoning), from send",
	"ttft_from_scheduled_ms": "time to first token, from the intended send time",
	"itl_ms":                 "gap between token events, pooled over every event",
	"itl_per_request_ms":     "each request's mean gap between token events",
	"tpot_ms":                "time per output token after the first",
	"e2e_ms":                 "send to last byte",
	"e2e_from_scheduled_ms":  "intended send time to last byte",
	"queue_wait_ms":          "client queue wait under a concurrency cap: admitted minus intended",
	"lateness_ms":            "client lateness: sent minus admitted",
}

// Analyze reads one or more run directories and reports on their results
// pooled together.
func Analyze(runDirs []string, opts Options) (*Report, error) {
	return AnalyzeContext(context.Background(), runDirs, opts)
}

// AnalyzeContext is Analyze, stopping with ctx's error between run
// directories, result parts and the report's stages once ctx ends.
func AnalyzeContext(ctx context.Context, runDirs []string, opts Options) (*Report, error) {
	if len(runDirs) == 0 {
		return nil, fmt.Errorf("no run directory given")
	}
	if opts.TTFTMode == "" {
		opts.TTFTMode = TTFTFirstContent
	}
	if opts.TTFTMode != TTFTFirstContent && opts.TTFTMode != TTFTFirstChunk {
		return nil, opterr.New("TTFTMode", opts.TTFTMode, "use %s or %s", TTFTFirstContent, TTFTFirstChunk)
	}
	if len(opts.Percentiles) == 0 {
		opts.Percentiles = DefaultPercentiles
	}
	if opts.Interval == "" {
		opts.Interval = IntervalAuto
	}
	if opts.Interval != IntervalAuto && opts.Interval != IntervalOrder && opts.Interval != IntervalBatch {
		return nil, opterr.New("Interval", opts.Interval, "use %s, %s or %s", IntervalAuto, IntervalOrder, IntervalBatch)
	}
	if opts.Precision <= 0 {
		opts.Precision = 0.05
	}
	if opts.Bootstrap.Resamples <= 0 {
		opts.Bootstrap.Resamples = 2000
	}
	for _, p := range opts.Percentiles {
		if !(p > 0 && p < 100) {
			return nil, opterr.New("Percentiles", p, "not between 0 and 100 (exclusive)")
		}
	}
	for _, d := range opts.By {
		if !slices.Contains(Dimensions, d) {
			return nil, opterr.New("By", d, "use one or more of %s", strings.Join(Dimensions, ", "))
		}
	}
	if opts.InMemoryRows < 0 {
		return nil, opterr.New("InMemoryRows", opts.InMemoryRows, "must be positive (0: %d)", DefaultInMemoryRows)
	}
	if err := checkBaseline(opts.Baseline); err != nil {
		return nil, err
	}
	limit := cmp.Or(opts.InMemoryRows, DefaultInMemoryRows)
	peers := peerFiles{}
	rows, held, err := heldRows(runDirs, peers)
	if err != nil {
		return nil, err
	}
	if held > int64(limit) {
		if err := streamable(rows, held, limit, opts); err != nil {
			return nil, err
		}
		tallies := newProbeSessionTap(opts.Window)
		rep, err := analyzeStreamed(ctx, runDirs, rows, held, limit, opts, peers, tallies.tap())
		if err != nil {
			return nil, err
		}
		if hasServerPhases(runDirs) {
			rep.Notes = append(rep.Notes, fmt.Sprintf("server phases are not joined when the rows (%d) are streamed: raise --in-memory-rows to see where the time went", rows))
		}
		rep.peerThroughput()
		if err := rep.addProbesAndSessions(tallies, runDirs, opts); err != nil {
			return nil, err
		}
		return rep, nil
	}
	rep := &Report{TTFTMode: opts.TTFTMode, Interval: opts.Interval, Metrics: map[string]Distribution{}}
	tallies := newProbeSessionTap(opts.Window)
	l, err := loadColumnsWith(ctx, runDirs, opts.VsLogged != "" || hasServerPhases(runDirs), peers, tallies.tap())
	if err != nil {
		return nil, err
	}
	rep.Runs, rep.Notes, rep.Given = l.runs, l.notes, l.given
	compute(rep, l.cols, opts)
	rep.peerThroughput()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	phases, notes, err := serverPhases(l, opts)
	if err != nil {
		return nil, err
	}
	rep.Phases = phases
	rep.Notes = append(rep.Notes, notes...)
	if err := rep.addProbesAndSessions(tallies, runDirs, opts); err != nil {
		return nil, err
	}
	rep.Sent = summarizeSent(l.cols)
	rep.Features = featureUses(l.cols)
	rep.Reasoning = reasoningOf(l.cols)
	if len(l.runIDs) > 1 {
		rep.Repeats = repeats(l.cols, l.runIDs, l.runRows, opts)
	}
	if len(opts.By) > 0 {
		rep.Breakdowns = map[string][]Group{}
		for _, d := range opts.By {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			rep.Breakdowns[d] = breakdown(l.cols, d, opts, rep.Throughput.DurationS)
		}
	}
	if src := opts.VsLogged; src != "" {
		if src == VsLoggedAuto {
			if len(l.infos) == 0 || l.infos[0].Workload == "" {
				return nil, opterr.New("VsLogged", VsLoggedAuto, "run.json names no workload; give the source trace's path")
			}
			src = l.infos[0].Workload
		}
		v, err := vsLogged(l.cols, src, opts)
		if err != nil {
			return nil, err
		}
		rep.VsLogged = v
	}
	if opts.Window == 0 && opts.Curves && rep.Throughput.DurationS > 0 {
		opts.Window = niceWindow(rep.Throughput.DurationS / 40)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	scrapes, err := readScrapes(l.dirs)
	if err != nil {
		return nil, err
	}
	rep.Notes = append(rep.Notes, scrapeNotes(scrapes)...)
	rep.Energy = energyOf(scrapes, int64(rep.Throughput.OutputTokens))
	rep.SpecDecode = specDecodeOf(scrapes, l.cols)
	if opts.Window > 0 {
		rep.Series = timeSeries(l.cols, scrapes, opts)
	}
	return rep, nil
}

// peerThroughput sets the throughput of a report of peer runs as their
// files give it: over the tool's own duration for a single file (measured
// from the sends it reconstructs, a file without send times gave 4.73
// req/s where vLLM reported 8.40), none for files without timing.
func (rep *Report) peerThroughput() {
	if peerOnly(rep.Runs) {
		// A peer tool records no schedule apart from its sends: a lateness
		// or queue wait of 0 would be no measurement.
		delete(rep.Metrics, "lateness_ms")
		delete(rep.Metrics, "queue_wait_ms")
	}
	if len(rep.Runs) == 1 && rep.Runs[0].fileDurationS > 0 && rep.Throughput.DurationS > 0 {
		rep.rescaleThroughput(rep.Runs[0].fileDurationS)
	}
	if untimed(rep.Runs) {
		rep.Throughput = Throughput{}
		if g := rep.Goodput; g != nil {
			g.RequestsPerS, g.CI95 = 0, [2]float64{}
		}
		rep.Notes = append(rep.Notes, "no throughput is reported: the result files keep neither send times nor a duration")
	}
}

// peerOnly reports whether every run is another tool's.
func peerOnly(runs []RunSummary) bool {
	for _, r := range runs {
		if r.Tool == "" {
			return false
		}
	}
	return len(runs) > 0
}

// untimed reports whether every run is a peer run without timing.
func untimed(runs []RunSummary) bool {
	for _, r := range runs {
		if !r.noTiming {
			return false
		}
	}
	return len(runs) > 0
}

// loaded is one or more run directories read into memory.
type loaded struct {
	runs  []RunSummary
	infos []*trace.RunInfo
	cols  *resultColumns
	dirs  []string
	notes []string
	// given are peer tools' summary-only results.
	given []GivenRun
	// runIDs in first-seen order, and each run's rows (shards merged).
	runIDs  []string
	runRows map[string][]int32
}

// addRows records rows [from, to) as belonging to run id.
func (l *loaded) addRows(id string, from, to int) {
	if _, ok := l.runRows[id]; !ok {
		l.runIDs = append(l.runIDs, id)
	}
	for i := from; i < to; i++ {
		l.runRows[id] = append(l.runRows[id], int32(i))
	}
}

// load reads the run directories' run.json and results, and notes what a
// reader must know about each run.
func load(runDirs []string) (*loaded, error) { return loadColumns(runDirs, false) }

// loadColumns is load, reading request ids too when ids is set.
func loadColumns(runDirs []string, withIDs bool) (*loaded, error) {
	return loadColumnsContext(context.Background(), runDirs, withIDs)
}

// loadColumnsContext is loadColumns, stopping between directories and
// parts once ctx ends.
func loadColumnsContext(ctx context.Context, runDirs []string, withIDs bool) (*loaded, error) {
	return loadColumnsWith(ctx, runDirs, withIDs, nil, nil)
}

// loadColumnsWith is loadColumnsContext with the peer result files
// already opened (nil: none).
func loadColumnsWith(ctx context.Context, runDirs []string, withIDs bool, peers peerFiles, tap *batchTap) (*loaded, error) {
	l := &loaded{cols: &resultColumns{wantIDs: withIDs, tap: tap}, runRows: map[string][]int32{}}
	ids := map[string]bool{}
	for _, dir := range runDirs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if peer.IsResultFile(dir) {
			runs, err := peers.open(dir)
			if err != nil {
				return nil, err
			}
			for i := range runs {
				r := &runs[i]
				l.notes = append(l.notes, r.Notes...)
				if !r.HasRecords() {
					l.given = append(l.given, GivenRun{Source: r.Source, Tool: r.Tool, Model: r.Model, Figures: r.Figures, Remedy: r.Remedy})
					continue
				}
				from := l.cols.n
				err := r.Each(func(batch []peer.Request) error {
					if err := ctx.Err(); err != nil {
						return err
					}
					l.cols.appendPeer(r, batch, l.cols.n-from)
					return nil
				})
				if err != nil {
					return nil, err
				}
				sum := peerRunSummary(r)
				l.addRows(sum.RunID, from, l.cols.n)
				l.runs = append(l.runs, sum)
				ids[sum.RunID] = true
			}
			continue
		}
		ri, err := trace.ReadRunInfo(dir)
		if err != nil {
			return nil, err
		}
		from := l.cols.n
		if err := readResultColumns(ctx, dir, l.cols); err != nil {
			return nil, err
		}
		l.addRows(ri.RunID, from, l.cols.n)
		l.infos = append(l.infos, ri)
		l.dirs = append(l.dirs, dir)
		ids[ri.RunID] = true
		sum, notes := runSummaryOf(dir, ri)
		l.runs, l.notes = append(l.runs, sum), append(l.notes, notes...)
	}
	if len(ids) > 1 {
		l.notes = append(l.notes, fmt.Sprintf("%d different run ids: pooled above as repeats of one configuration; the repeats section gives the interval with runs as the unit", len(ids)))
	}
	l.notes = append(l.notes, l.cols.names.notes()...)
	return l, nil
}

// runSummaryOf is what run.json says about the run in dir, and the notes a
// reader must see about it: a busy or saturated client, a partial run.
func runSummaryOf(dir string, ri *trace.RunInfo) (RunSummary, []string) {
	sum := RunSummary{Dir: dir, RunID: ri.RunID, Shard: ri.Shard, ShardCount: ri.ShardCount, Complete: ri.Complete, Reason: ri.Reason,
		ClientSaturated: ri.ClientSaturated, Lateness: ri.Lateness, OfferedRate: ri.OfferedRate, AchievedRate: ri.AchievedRate, Target: ri.Target,
		Client: ri.Client, PromptTruncation: ri.PromptTruncation}
	var notes []string
	if c := ri.Client; c.CPUUtilization > 0.8 || c.SchedLatencyP99Ms > 2 {
		notes = append(notes, fmt.Sprintf("run %s: the client was busy (CPU %.0f%% of %d cores, Go scheduler latency p99 %.1f ms): token timestamps, and so ITL, may include client delay",
			dir, 100*c.CPUUtilization, ri.GOMAXPROCS, c.SchedLatencyP99Ms))
	}
	if !ri.Complete {
		notes = append(notes, fmt.Sprintf("run %s is partial (%s): its figures cover only what was recorded", dir, ri.Reason))
	}
	if ri.ClientSaturated {
		notes = append(notes, fmt.Sprintf("run %s: the client was saturated (lateness p99 %.1f ms > %.1f ms): latencies may reflect the load generator, not the server; lower the rate or use more client cores",
			dir, ri.Lateness.P99Ms, ri.MaxLatenessMs))
	}
	return sum, notes
}

// timedValue is one request's value of a metric, at its send time.
type timedValue struct {
	at int64
	v  float64
}

// tally is what every row adds to, whether the rows are held or streamed:
// counts, the measured span, token totals, SLO hits and stalls.
type tally struct {
	counts Counts
	first  int64 // first send, -1 if none
	last   int64 // last completion
	outTok int64
	totTok int64
	// Sums of squared per-request tokens, for throughput intervals.
	outTokSq, totTokSq float64
	met                int // requests meeting the SLO
	// Streaming smoothness: gaps above the stall threshold, the longest
	// gap, and the output tokens of the streams they came from.
	stalls         int
	longestStallNs int64
	streamedTokens int64
}

func newTally() tally { return tally{counts: Counts{Outcomes: map[string]int{}}, first: -1, last: -1} }

// metricID names a per-request metric (metricNames) without a map lookup
// per value.
type metricID int

const (
	mLateness metricID = iota
	mQueueWait
	mE2E
	mE2EFromScheduled
	mTTFT
	mTTFA
	mTTFTFromScheduled
	mITLPerRequest
	mTPOT
	numMetrics
)

// metricNames are the report's names of the per-request metrics.
var metricNames = [numMetrics]string{"lateness_ms", "queue_wait_ms", "e2e_ms", "e2e_from_scheduled_ms", "ttft_ms", "ttfa_ms", "ttft_from_scheduled_ms", "itl_per_request_ms", "tpot_ms"}

// rowSink receives one row's values: per-request metrics in ms at the
// request's send time, the token times (ns from send) of a streamed ok
// request with at least two events, and an ok request's prompt and output
// tokens.
type rowSink interface {
	value(m metricID, at int64, v float64)
	tokenTimes(at int64, times []int64)
	tokens(prompt, output int64)
}

// addRow tallies row i of c and hands its metric values to sink, by the
// definitions of docs/architecture.md: one place, so the held and the
// streamed analyses cannot disagree. answers says whether time to first
// answer is reported; stallNs is the stall threshold.
func (t *tally) addRow(c *resultColumns, i int, opts Options, answers bool, stallNs int64, sink rowSink) {
	cnt := &t.counts
	cnt.Total++
	if c.warmup[i] {
		cnt.Warmup++
		return
	}
	cnt.Counted++
	cnt.Outcomes[c.outcome[i]]++
	sent, done := c.sent[i], c.done[i]
	if sent != null {
		sink.value(mLateness, sent, nsToMs(sent-c.admitted[i]))
		sink.value(mQueueWait, sent, nsToMs(c.admitted[i]-c.scheduled[i]))
	}
	if c.outcome[i] != trace.OutcomeOK || sent == null || done == null {
		return
	}
	if t.first < 0 || sent < t.first {
		t.first = sent
	}
	t.last = max(t.last, done)
	out := c.observedOut[i]
	t.outTok += out
	prompt := c.promptSent[i]
	if c.usagePrompt[i] != null {
		prompt = c.usagePrompt[i]
	}
	t.totTok += prompt + out
	t.outTokSq += float64(out) * float64(out)
	t.totTokSq += float64(prompt+out) * float64(prompt+out)
	sink.tokens(c.promptSent[i], out)
	sink.value(mE2E, sent, nsToMs(done-sent))
	sink.value(mE2EFromScheduled, sent, nsToMs(done-c.scheduled[i]))
	ttftAt := c.firstToken[i]
	if opts.TTFTMode == TTFTFirstChunk {
		ttftAt = c.firstChunk[i]
	}
	if ttftAt == null {
		if !c.stream[i] {
			cnt.NotStreamed++
		}
		if opts.SLO.meets(0, 0, nsToMs(done-sent), false, false) {
			t.met++
		}
		return
	}
	sink.value(mTTFT, sent, nsToMs(ttftAt-sent))
	if fa := c.firstAnswer[i]; answers && fa != null {
		sink.value(mTTFA, sent, nsToMs(fa-sent))
	}
	sink.value(mTTFTFromScheduled, sent, nsToMs(ttftAt-c.scheduled[i]))
	times := c.tokenTimesOf(i)
	if len(times) > 1 {
		sink.value(mITLPerRequest, sent, nsToMs(times[len(times)-1]-times[0])/float64(len(times)-1))
		sink.tokenTimes(sent, times)
	}
	for j := 1; j < len(times); j++ {
		gap := times[j] - times[j-1]
		if gap > stallNs {
			t.stalls++
		}
		t.longestStallNs = max(t.longestStallNs, gap)
	}
	t.streamedTokens += out
	tpot, hasTPOT := 0.0, false
	if ft := c.firstToken[i]; ft != null && out > 1 {
		tpot, hasTPOT = nsToMs(done-ft)/float64(out-1), true
		sink.value(mTPOT, sent, tpot)
	}
	if opts.SLO.meets(nsToMs(ttftAt-sent), tpot, nsToMs(done-sent), true, hasTPOT) {
		t.met++
	}
}

// stallThreshold is opts.Stall in ns, DefaultStall when unset.
func stallThreshold(opts Options) int64 {
	if opts.Stall <= 0 {
		return int64(DefaultStall)
	}
	return int64(opts.Stall)
}

// extracted holds the per-request metric values and tallies of a set of
// result rows held in memory.
type extracted struct {
	tally
	timed  map[string][]timedValue // one per request, in time order
	pooled map[string][]float64    // per event (ITL)
	// itlGroups are the requests' runs of pooled ITL values, in the
	// order the rows came (compute sorts them by send time).
	itlGroups []requestGroup
	itl       []float64
	prompts   []int64 // prompt tokens sent, per successful request
	outputs   []int64 // output tokens observed, per successful request
}

func (x *extracted) value(m metricID, at int64, v float64) {
	name := metricNames[m]
	x.timed[name] = append(x.timed[name], timedValue{at, v})
}

func (x *extracted) tokenTimes(at int64, times []int64) {
	x.itlGroups = append(x.itlGroups, requestGroup{at: at, start: len(x.itl), n: len(times) - 1})
	for j := 1; j < len(times); j++ {
		x.itl = append(x.itl, nsToMs(times[j]-times[j-1]))
	}
}

func (x *extracted) tokens(prompt, output int64) {
	x.prompts = append(x.prompts, prompt)
	x.outputs = append(x.outputs, output)
}

// values returns a metric's per-request values in time order.
func (x *extracted) values(name string) []float64 {
	tv := x.timed[name]
	vals := make([]float64, len(tv))
	for i, t := range tv {
		vals[i] = t.v
	}
	return vals
}

// extract computes every per-request metric of rows (docs/architecture.md definitions).
func extract(c *resultColumns, opts Options) *extracted { return extractRows(c, opts, nil) }

// extractRows is extract over the rows idx (nil: every row).
func extractRows(c *resultColumns, opts Options, idx []int32) *extracted {
	x := &extracted{tally: newTally(), timed: map[string][]timedValue{}, pooled: map[string][]float64{}}
	if idx == nil {
		x.itl = make([]float64, 0, max(0, len(c.tokenTimes)-c.n))
	}
	stallNs := stallThreshold(opts)
	n := c.n
	if idx != nil {
		n = len(idx)
	}
	answers := anyReasoned(c, idx)
	for k := range n {
		i := k
		if idx != nil {
			i = int(idx[k])
		}
		x.addRow(c, i, opts, answers, stallNs, x)
	}
	if len(x.itl) > 0 {
		x.pooled["itl_ms"] = x.itl
	}
	for _, tv := range x.timed {
		slices.SortStableFunc(tv, func(a, b timedValue) int { return cmp.Compare(a.at, b.at) })
	}
	return x
}

// compute fills the report's counts, metrics and throughput from rows.
func compute(rep *Report, cols *resultColumns, opts Options) {
	x := extract(cols, opts)
	rep.setCounts(&x.tally)
	for name := range x.timed {
		if name == "queue_wait_ms" && !slices.ContainsFunc(x.timed[name], func(t timedValue) bool { return t.v != 0 }) {
			continue // no concurrency cap held anything back
		}
		rep.Metrics[name] = SummarizeBootstrap(x.values(name), opts.Percentiles, opts.Bootstrap, opts.Precision, opts.Interval)
	}
	for name, v := range x.pooled {
		var groups []requestGroup
		if name == "itl_ms" {
			groups = x.itlGroups
		}
		rep.Metrics[name] = summarizePooled(v, groups, opts.Percentiles, opts.Interval) // sorts v
		if opts.Curves && name == "itl_ms" {
			rep.Curves = map[string]Curve{name: curveOf(v)}
			h := histogramOf(v, 60)
			rep.ITLHistogram = &h
		}
	}
	if opts.Curves {
		if rep.Curves == nil {
			rep.Curves = map[string]Curve{}
		}
		for _, name := range []string{"ttft_ms", "tpot_ms", "e2e_ms"} {
			if v := x.values(name); len(v) > 1 {
				sortFloatsParallel(v)
				rep.Curves[name] = curveOf(v)
			}
		}
	}
	rep.metricNotes(opts)
	rep.Smoothness = smoothnessOf(&x.tally, itlCV(x.pooled["itl_ms"]), opts)
	rep.setRates(&x.tally, opts)
}

// setCounts records the tallied request counts and success rate.
func (rep *Report) setCounts(t *tally) {
	c := t.counts
	if c.Counted > 0 {
		c.SuccessRate = float64(c.Outcomes[trace.OutcomeOK]) / float64(c.Counted)
	}
	rep.Requests = c
	if ok := c.Outcomes[trace.OutcomeOK]; c.Counted > 0 && ok == 0 {
		var classes []string
		for _, o := range slices.Sorted(maps.Keys(c.Outcomes)) {
			classes = append(classes, fmt.Sprintf("%s %d", o, c.Outcomes[o]))
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("every one of the %d counted requests failed (%s): no latency, throughput or goodput can be given, and the zeros shown are no measurement",
			c.Counted, strings.Join(classes, ", ")))
	}
}

// metricNotes adds the notes on TTFT's and E2E's precision: the highest
// percentile's bootstrap half-width against the target, and percentiles
// the sample cannot bound.
func (rep *Report) metricNotes(opts Options) {
	for _, name := range slices.Sorted(maps.Keys(rep.Metrics)) {
		d := rep.Metrics[name]
		if name == "ttft_ms" || name == "e2e_ms" {
			// Stability of the highest percentile that can be bounded.
			for i := len(d.Quantiles) - 1; i >= 0; i-- {
				q := d.Quantiles[i]
				if q.CIHi == nil || q.RelHalfWidth == nil {
					continue
				}
				if *q.RelHalfWidth > opts.Precision {
					rep.Notes = append(rep.Notes, fmt.Sprintf("%s p%g is known to ±%.0f%% (bootstrap); ±%.0f%% needs about %d samples, %d here",
						name, q.P, 100**q.RelHalfWidth, 100*opts.Precision, *q.NeededN, d.N))
				}
				break
			}
		}
		if name == "ttft_ms" || name == "e2e_ms" {
			rep.Notes = append(rep.Notes, unboundedNotes(name, d)...)
		}
	}
}

// setRates notes unstreamed successes and sets throughput and, with an
// SLO, goodput from the tallies.
func (rep *Report) setRates(t *tally, opts Options) {
	c, first, last, outTokens, totalTokens, met := rep.Requests, t.first, t.last, t.outTok, t.totTok, t.met
	if c.NotStreamed > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d successful requests were not streamed: they have E2E but no TTFT, ITL or TPOT", c.NotStreamed))
	}
	if last > first && first >= 0 {
		span := float64(last-first) / 1e9
		ok := c.Outcomes[trace.OutcomeOK]
		rate := func(sum, sumSq float64) [2]float64 {
			h := 1.959963984540054 * math.Sqrt(sumSq)
			return [2]float64{max(0, sum-h) / span, (sum + h) / span}
		}
		rep.Throughput = Throughput{DurationS: span, RequestsPerS: float64(ok) / span, RequestsPerSCI: poissonRateCI(ok, span),
			OutputTokensPerS: float64(outTokens) / span, OutputTokensPerSCI: rate(float64(outTokens), t.outTokSq),
			TotalTokensPerS: float64(totalTokens) / span, TotalTokensPerSCI: rate(float64(totalTokens), t.totTokSq),
			InputTokens: float64(totalTokens - outTokens), OutputTokens: float64(outTokens)}
	}
	if !opts.SLO.Empty() {
		g := &Goodput{SLO: opts.SLO, Eligible: c.Counted, Met: met, ErrorBudgetUsed: c.Counted - met}
		if c.Counted > 0 {
			g.MetShare = float64(met) / float64(c.Counted)
		}
		if span := rep.Throughput.DurationS; span > 0 {
			g.RequestsPerS, g.CI95 = float64(met)/span, poissonRateCI(met, span)
		}
		rep.Goodput = g
	}
}

// rescaleThroughput counts the report's throughput and goodput over span
// seconds instead of the measured span.
func (rep *Report) rescaleThroughput(span float64) {
	t := &rep.Throughput
	f := t.DurationS / span
	t.DurationS = span
	t.RequestsPerS *= f
	t.RequestsPerSCI = poissonRateCI(rep.Requests.Outcomes[trace.OutcomeOK], span)
	t.OutputTokensPerS, t.TotalTokensPerS = t.OutputTokensPerS*f, t.TotalTokensPerS*f
	for _, ci := range []*[2]float64{&t.OutputTokensPerSCI, &t.TotalTokensPerSCI} {
		ci[0], ci[1] = ci[0]*f, ci[1]*f
	}
	if g := rep.Goodput; g != nil {
		g.RequestsPerS, g.CI95 = float64(g.Met)/span, poissonRateCI(g.Met, span)
	}
}

// minSamplesForUpper is the smallest n whose 95% interval for the
// p-quantile has an upper bound: 1 − p^n ≥ 0.975.
func minSamplesForUpper(p float64) int {
	n := 1
	for pow := p; 1-pow < 0.975; pow *= p {
		n++
	}
	return n
}

func nsToMs(ns int64) float64 { return float64(ns) / 1e6 }

// niceWindow rounds a window length in seconds up to 1, 2 or 5 times a
// power of ten, at least one second.
func niceWindow(s float64) time.Duration {
	for _, base := range []float64{1, 10, 100, 1000} {
		for _, m := range []float64{1, 2, 5} {
			if s <= m*base {
				return time.Duration(m * base * float64(time.Second))
			}
		}
	}
	return time.Duration(s * float64(time.Second))
}
