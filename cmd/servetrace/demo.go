package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/datasets"
	"github.com/servetrace/servetrace/replay"
	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/sweep"
	"github.com/servetrace/servetrace/synth"
	"github.com/servetrace/servetrace/trace"
)

// demoMarker marks a directory the demo wrote, so a rerun may replace it.
const demoMarker = ".servetrace-demo"

func demoCmd() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "run the whole pipeline on a bundled trace against the built-in simulator",
		Description: `Converts the bundled Azure LLM code trace (2023), fits a model, generates a
workload, starts the simulator on a free loopback port, replays the workload
against it, and prints the analysis; replays an agentic workload generated
from the same model (planners fanning out to sub-agents and joining their
answers) and prints its sessions' makespans; then sweeps the simulator at
rising rates and prints its service envelope. Needs no network and no GPU.

Example:
   servetrace demo --out demo-out --duration 45s`,
		Flags: []cli.Flag{
			outFlag("directory for every artifact (replaced if an earlier demo wrote it)", false),
			&cli.DurationFlag{Name: "duration", Value: 45 * time.Second, Usage: "length of the generated workload"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "workload seed"},
			&cli.Float64Flag{Name: "speed", Value: 1, Usage: "replay time scale"},
			&cli.DurationFlag{Name: "sweep-step", Value: demoStepLength, Usage: "measured time of each sweep step (a queue above capacity needs time to show its growth)"},
		},
		Action: runDemo,
	}
}

func runDemo(c *cli.Context) error {
	out := c.String("out")
	if out == "" {
		out = "demo-out"
	}
	if err := prepareDemoDir(out); err != nil {
		return err
	}
	w := c.App.Writer
	step := func(name string, t0 time.Time, what string) {
		fmt.Fprintf(w, "  %-9s %5.1fs  %s\n", name, time.Since(t0).Seconds(), what)
	}
	ctx := c.Context
	const source = "azure-code-2023"
	tracesDir, modelPath, workloadDir, runDir := filepath.Join(out, "trace"), filepath.Join(out, "model.json"), filepath.Join(out, "workload"), filepath.Join(out, "run")
	d, _ := datasets.Lookup(source)
	fmt.Fprintf(w, "servetrace demo: %s (%s; licence %s, cite %s)\n", source, d.Description, d.Licence, d.Citation)

	t0 := time.Now()
	m, err := datasets.Convert(ctx, []string{source}, tracesDir, datasets.ConvertOptions{Options: datasets.Options{API: "chat", Stream: true}})
	if err != nil {
		return fmt.Errorf("demo convert: %w", err)
	}
	step("convert", t0, fmt.Sprintf("%d rows → %s", m.Rows, tracesDir))

	t0 = time.Now()
	model, err := synth.Fit(ctx, tracesDir, synth.FitOptions{})
	if err != nil {
		return fmt.Errorf("demo fit: %w", err)
	}
	if err := synth.WriteModel(modelPath, model); err != nil {
		return err
	}
	step("fit", t0, fmt.Sprintf("%.2f req/s, inter-arrival CV %.1f, %s renewal + %s latent rate, input p50 %.0f / output p50 %.0f tokens → %s",
		model.MeanRatePerS(), model.Arrivals.InterArrivalCV, model.Arrivals.Renewal.Dist, model.Arrivals.Latent.Kind,
		model.MainLengths().Input.Quantile(0.5), model.MainLengths().Output.Quantile(0.5), modelPath))

	t0 = time.Now()
	wm, err := synth.GenerateToBucket(ctx, modelPath, workloadDir, synth.GenerateOptions{Duration: c.Duration("duration"), Seed: c.Uint64("seed")}, false)
	if err != nil {
		return fmt.Errorf("demo generate: %w", err)
	}
	step("generate", t0, fmt.Sprintf("%d requests over %v → %s", wm.Rows, c.Duration("duration"), workloadDir))

	t0 = time.Now()
	collector, err := freeLoopbackAddr()
	if err != nil {
		return fmt.Errorf("demo sim: %w", err)
	}
	// The simulator exports its request spans to the replay, as vLLM
	// does with --otlp-traces-endpoint, so the report says where the time
	// went.
	rs, err := startSimProcess(ctx, "--otlp-traces-endpoint", collector)
	if err != nil {
		return fmt.Errorf("demo sim: %w", err)
	}
	defer rs.stop()
	o := sim.DefaultOptions()
	p, _ := sim.LookupPreset(o.Preset)
	step("sim", t0, fmt.Sprintf("simulator at %s (its own process): continuous batching, preset %s (%s); request spans to %s", rs.URL, p.Name, p.Description, collector))

	t0 = time.Now()
	ropts := replay.DefaultOptions()
	ropts.Target, ropts.Speed = rs.URL, c.Float64("speed")
	// A probe beside one request in twenty grades the answers under load.
	ropts.CollectSpans, ropts.Probes = collector, demoProbes
	if isTerminal(os.Stderr) {
		ropts.Progress = c.App.ErrWriter
	}
	info, err := replay.Run(ctx, workloadDir, runDir, ropts)
	if err != nil {
		return fmt.Errorf("demo replay: %w", err)
	}
	step("replay", t0, fmt.Sprintf("%d requests, probes among them (%.0f%%, graded exactly) → %s", info.Scheduled, 100*demoProbes, runDir))

	rep, err := analyze.Analyze([]string{runDir}, analyze.Options{Curves: true, By: []string{"input_bucket"}})
	if err != nil {
		return fmt.Errorf("demo analyze: %w", err)
	}
	fmt.Fprintln(w)
	short := *rep
	short.Series = nil // the time series is in the HTML report
	if err := analyze.WriteTable(w, &short); err != nil {
		return err
	}
	reportPath := filepath.Join(out, "report.html")
	if err := writeReportHTML(io.Discard, reportPath, rep); err != nil {
		return fmt.Errorf("demo report: %w", err)
	}
	// The agents run before the sweep, whose last step overloads the
	// simulator; their line is printed after it.
	agents, err := demoAgents(c, modelPath, filepath.Join(out, "agents"), rs.URL)
	if err != nil {
		return err
	}
	sweepDir := filepath.Join(out, "sweep")
	capacity, err := workloadCapacity(ctx, workloadDir, p.Engine)
	if err != nil {
		return fmt.Errorf("demo sweep: %w", err)
	}
	rec, err := demoSweep(c, w, rs.URL, workloadDir, sweepDir, capacity)
	if err != nil {
		return err
	}
	if err := demoAgreement(w, rec, rep, runDir, capacity); err != nil {
		return err
	}
	fmt.Fprintln(w, agents)
	fmt.Fprintf(w, "\nartifacts:\n  trace bucket  %s/\n  model         %s\n  workload      %s/\n  run           %s/ (results/*.parquet, run.json)\n  report        %s (open in a browser)\n  sweep         %s/ (sweep.json, a run per step, envelope.html)\n",
		tracesDir, modelPath, workloadDir, runDir, reportPath, sweepDir)
	fmt.Fprintf(w, "next: servetrace analyze %s --json   |   duckdb -c \"SELECT outcome, count(*) FROM '%s/results/*.parquet' GROUP BY 1\"\n", runDir, runDir)
	return nil
}

// The demo's sweep: Poisson rates at demoLevelShares of the simulator's
// capacity for the demo's workload (from its cost model), two below and
// two above, steps of demoStepLength after demoStepWarmup, judged against
// demoSLO; a sweep that does not know the capacity must find it between
// its second and third level.
var (
	demoLevelShares = []float64{0.35, 0.7, 1.3, 1.6}
	demoStepLength  = 8 * time.Second
	demoStepWarmup  = 2 * time.Second
	demoSLO         = analyze.SLO{TTFT: time.Second}
)

// demoAttainment is the share of requests the demo's SLO asks for.
const demoAttainment = 0.9

// demoProbes is the share of the demo replay's requests a probe goes
// beside.
const demoProbes = 0.05

// The demo's agentic workload: planners arriving at demoAgentRate a
// second (Poisson) for demoAgentStep, or the demo's duration if shorter,
// with the fitted lengths and mix; each is followed by demoAgentWidth
// sub-agents after a tool call of demoAgentToolMs and a join of their
// answers (synth's subagent-storm). About ten seconds in all.
const (
	demoAgentRate   = 4.0
	demoAgentStep   = 8 * time.Second
	demoAgentWidth  = 4
	demoAgentToolMs = 250.0
)

// demoAgents generates the demo's agentic workload from its model,
// replays it against the simulator and returns the line that says what its
// sessions took end to end, with sessions as the unit.
func demoAgents(c *cli.Context, modelPath, dir, target string) (string, error) {
	t0 := time.Now()
	step := min(demoAgentStep, c.Duration("duration"))
	workloadDir, runDir := filepath.Join(dir, "workload"), filepath.Join(dir, "run")
	scenarios := []synth.Scenario{
		{Name: synth.ScenarioRamp, Params: &synth.Ramp{Rates: []float64{demoAgentRate}, Step: synth.Duration(step)}},
		{Name: synth.ScenarioSubagentStorm, Params: &synth.SubagentStorm{Share: 1, Width: demoAgentWidth, ToolMs: demoAgentToolMs}},
	}
	wm, err := synth.GenerateToBucket(c.Context, modelPath, workloadDir, synth.GenerateOptions{Seed: c.Uint64("seed"), Scenarios: scenarios}, false)
	if err != nil {
		return "", fmt.Errorf("demo agents: generate: %w", err)
	}
	ro := replay.DefaultOptions()
	ro.Target, ro.Speed = target, c.Float64("speed")
	if isTerminal(os.Stderr) {
		ro.Progress = c.App.ErrWriter
	}
	if _, err := replay.Run(c.Context, workloadDir, runDir, ro); err != nil {
		return "", fmt.Errorf("demo agents: replay: %w", err)
	}
	rep, err := analyze.Analyze([]string{runDir}, analyze.Options{Percentiles: []float64{50, 99}})
	if err != nil {
		return "", fmt.Errorf("demo agents: analyze: %w", err)
	}
	return fmt.Sprintf("  %-9s %5.1fs  %s (%d requests: planners at %g req/s for %v, each %d sub-agents after a %g ms tool and a join) → %s",
		"agents", time.Since(t0).Seconds(), demoSessionsText(rep.Sessions), wm.Rows, demoAgentRate, step, demoAgentWidth, demoAgentToolMs, dir), nil
}

// demoSessionsText says an agent run's sessions: how many, and their
// makespans' percentiles in seconds with 95% order-statistic intervals,
// a floor ("≥x") where the sessions are too few to bound one above.
func demoSessionsText(s *analyze.Sessions) string {
	if s == nil {
		return "agent sessions: 0 sessions"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "agent sessions: %d sessions", s.Sessions)
	if s.MakespanMs.N == 0 {
		b.WriteString(", none complete")
	}
	bound := func(p *float64) string {
		if p == nil {
			return "—"
		}
		return fmt.Sprintf("%.2f", *p/1000)
	}
	for i, q := range s.MakespanMs.Quantiles {
		sep := ", makespan"
		if i > 0 {
			sep = ","
		}
		if q.CIHi == nil {
			lo := q.Value
			if q.CILo != nil {
				lo = max(lo, *q.CILo)
			}
			fmt.Fprintf(&b, "%s p%g ≥%.2f s", sep, q.P, lo/1000)
			continue
		}
		fmt.Fprintf(&b, "%s p%g %.2f s [%s, %s]", sep, q.P, q.Value/1000, bound(q.CILo), bound(q.CIHi))
	}
	if s.Incomplete > 0 {
		fmt.Fprintf(&b, "; %d with a request not ok left out", s.Incomplete)
	}
	return b.String()
}

// freeLoopbackAddr returns a loopback address no one listens on now.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// workloadCapacity is the requests a second the simulator's engine
// completes of the workload's requests when saturated.
func workloadCapacity(ctx context.Context, workloadDir string, engine sim.EngineOptions) (float64, error) {
	b, err := trace.OpenBucket(workloadDir)
	if err != nil {
		return 0, err
	}
	var prompts, outputs []int64
	err = b.Scan(ctx, func(q *trace.Request) error {
		prompts, outputs = append(prompts, q.InputTokens), append(outputs, q.OutputTokens)
		return nil
	})
	return engine.Capacity(prompts, outputs), err
}

// demoSweep runs a short sweep of the workload against the simulator,
// scraping its engine and DCGM metrics, and prints the envelope.
func demoSweep(c *cli.Context, w io.Writer, target, workloadDir, dir string, capacity float64) (*sweep.Record, error) {
	t0 := time.Now()
	o := sweep.DefaultOptions()
	o.Configs = []sweep.Config{{Name: "sim", Target: target, Workload: workloadDir}}
	for _, share := range demoLevelShares {
		o.Levels = append(o.Levels, math.Round(10*share*capacity)/10)
	}
	o.StepDuration, o.StepWarmup, o.Attainment = c.Duration("sweep-step"), demoStepWarmup, demoAttainment
	o.SLO = demoSLO
	o.CostPerHour = 3   // an H100's hourly price, roughly
	o.Recovery = false  // its step would take the demo past two minutes
	o.MaxExtensions = 1 // an undecided level runs once more, then stays undecided
	o.Replay.Metrics = []replay.MetricsEndpoint{{Role: replay.RoleEngine, URL: target + "/metrics"}, {Role: replay.RoleGPU, URL: target + "/dcgm/metrics"}}
	o.Replay.MetricsInterval = 500 * time.Millisecond
	if isTerminal(os.Stderr) {
		o.Progress = c.App.ErrWriter
	}
	rec, err := sweep.Run(c.Context, dir, o)
	if err != nil {
		return nil, fmt.Errorf("demo sweep: %w", err)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  %-9s %5.1fs  Poisson rates %v req/s (%v of the simulator's capacity for this workload, %.1f req/s by its cost model), %s each after %s of warmup, SLO TTFT ≤ 1 s for 90%% of requests; a step whose queue was still growing fails → %s\n",
		"sweep", time.Since(t0).Seconds(), o.Levels, demoLevelShares, capacity, o.StepDuration, demoStepWarmup, dir)
	return rec, sweep.WriteSummary(w, rec)
}

// demoAgreement sets the sweep's bracket beside what else says where the
// limit lies: the capacity the simulator's cost model gives for the
// workload's requests, and the main replay's own attainment of the SLO at
// its mean and busiest rates.
func demoAgreement(w io.Writer, rec *sweep.Record, rep *analyze.Report, runDir string, capacity float64) error {
	if len(rec.Results) == 0 {
		return nil
	}
	lo, hi := rec.Results[0].Bracket[0], rec.Results[0].Bracket[1]
	holds := "holds it"
	if !(capacity >= lo && (hi == 0 || capacity < hi)) {
		holds = "does not hold it"
	}
	limit := fmt.Sprintf("[%g, %g) req/s", lo, hi)
	switch {
	case hi == 0:
		limit = fmt.Sprintf("above %g req/s", lo)
	case slices.Contains(rec.Results[0].Undecided, hi):
		limit = fmt.Sprintf("[%g, %g] req/s (%g undecided)", lo, hi, hi)
		if capacity >= lo && capacity <= hi {
			holds = "holds it"
		}
	}
	fmt.Fprintf(w, "  capacity: the simulator's cost model serves this workload's requests at %.1f req/s when saturated; the sweep's limit %s %s\n", capacity, limit, holds)
	main, err := analyze.MeasureStep([]string{runDir}, analyze.EnvelopeOptions{Options: analyze.Options{SLO: demoSLO}, Attainment: demoAttainment})
	if err != nil {
		return err
	}
	peak := 0.0
	if rep.Series != nil {
		for _, win := range rep.Series.Windows {
			peak = max(peak, win.SendRate)
		}
	}
	fmt.Fprintf(w, "  the replay above: a mean %.2f req/s, its busiest window %.1f req/s, met the SLO for %.0f%% of its requests (%s); the sweep's limit %s\n",
		main.OfferedRate, peak, 100*main.Attainment, map[bool]string{true: "a pass", false: "a fail"}[main.Attainment >= demoAttainment],
		demoReplayVerdict(rec.Results[0], main.Attainment >= demoAttainment, main.OfferedRate, peak))
	return nil
}

// demoReplayVerdict says whether the sweep's limit agrees with a replay
// that met the SLO (met) or not at its mean rate (offered) and busiest
// window (peak).
func demoReplayVerdict(r sweep.Result, met bool, offered, peak float64) string {
	lo, hi := r.Bracket[0], r.Bracket[1]
	failed := 0.0 // the lowest level the sweep failed
	for _, l := range r.Levels {
		if l.Verdict == "fail" && (failed == 0 || l.Level < failed) {
			failed = l.Level
		}
	}
	verdict := "agrees"
	switch {
	case met && failed > 0 && offered >= failed:
		verdict = fmt.Sprintf("disagrees: it met the SLO at a mean rate the sweep failed (%g)", failed)
	case met && hi > 0 && offered >= hi:
		verdict = fmt.Sprintf("does not contradict it: its mean rate is at or past %g, which the sweep left undecided", hi)
	case !met && lo > 0 && peak < lo:
		verdict = "disagrees: it missed the SLO though even its busiest window stayed under the limit"
	case !met:
		verdict += ": its bursts pass the limit"
	default:
		verdict += ": its rate stays under the limit"
	}
	return verdict
}

// prepareDemoDir empties out if an earlier demo wrote it and refuses any
// other non-empty directory, so the demo never deletes a user's data.
func prepareDemoDir(out string) error {
	ents, err := os.ReadDir(out)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("demo --out %s: %w", out, err)
	case len(ents) > 0:
		if _, err := os.Stat(filepath.Join(out, demoMarker)); err != nil {
			return fmt.Errorf("demo --out %s exists and was not written by the demo; choose another --out", out)
		}
		if err := os.RemoveAll(out); err != nil {
			return fmt.Errorf("demo: clear earlier output %s: %w", out, err)
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	f, err := trace.CreateFile(filepath.Join(out, demoMarker))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	_, err = f.WriteString("written by servetrace demo; the next demo run replaces this directory\n")
	return errors.Join(err, f.Close())
}
