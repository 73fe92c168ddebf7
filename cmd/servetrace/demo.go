package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/datasets"
	"github.com/servetrace/servetrace/replay"
	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/sweep"
	"github.com/servetrace/servetrace/synth"
)

// demoMarker marks a directory the demo wrote, so a rerun may replace it.
const demoMarker = ".servetrace-demo"

func demoCmd() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "run the whole pipeline on a bundled trace against the built-in simulator",
		Description: `Converts the bundled Azure LLM code trace (2023), fits a model, generates a
workload, starts the simulator on a free loopback port, replays the workload
against it, and prints the analysis; then sweeps the simulator at rising
rates and prints its service envelope. Needs no network and no GPU.

Example:
   servetrace demo --out demo-out --duration 60s`,
		Flags: []cli.Flag{
			outFlag("directory for every artifact (replaced if an earlier demo wrote it)", false),
			&cli.DurationFlag{Name: "duration", Value: time.Minute, Usage: "length of the generated workload"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "workload seed"},
			&cli.Float64Flag{Name: "speed", Value: 1, Usage: "replay time scale"},
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
	rs, err := startSimProcess(ctx)
	if err != nil {
		return fmt.Errorf("demo sim: %w", err)
	}
	defer rs.stop()
	o := sim.DefaultOptions()
	p, _ := sim.LookupPreset(o.Preset)
	step("sim", t0, fmt.Sprintf("simulator at %s (its own process): continuous batching, preset %s (%s)", rs.URL, p.Name, p.Description))

	t0 = time.Now()
	ropts := replay.DefaultOptions()
	ropts.Target, ropts.Speed = rs.URL, c.Float64("speed")
	if isTerminal(os.Stderr) {
		ropts.Progress = c.App.ErrWriter
	}
	info, err := replay.Run(ctx, workloadDir, runDir, ropts)
	if err != nil {
		return fmt.Errorf("demo replay: %w", err)
	}
	step("replay", t0, fmt.Sprintf("%d requests → %s", info.Scheduled, runDir))

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
	sweepDir := filepath.Join(out, "sweep")
	if err := demoSweep(c, w, rs.URL, workloadDir, sweepDir); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nartifacts:\n  trace bucket  %s/\n  model         %s\n  workload      %s/\n  run           %s/ (results/*.parquet, run.json)\n  report        %s (open in a browser)\n  sweep         %s/ (sweep.json, a run per step, envelope.html)\n",
		tracesDir, modelPath, workloadDir, runDir, reportPath, sweepDir)
	fmt.Fprintf(w, "next: servetrace analyze %s --json   |   duckdb -c \"SELECT outcome, count(*) FROM '%s/results/*.parquet' GROUP BY 1\"\n", runDir, runDir)
	return nil
}

// demoSweep runs a short sweep of the workload against the simulator,
// scraping its engine and DCGM metrics, and prints the envelope.
func demoSweep(c *cli.Context, w io.Writer, target, workloadDir, dir string) error {
	t0 := time.Now()
	o := sweep.DefaultOptions()
	o.Configs = []sweep.Config{{Name: "sim", Target: target, Workload: workloadDir}}
	o.Levels, o.StepDuration, o.Attainment = []float64{2, 4, 8, 12}, 4*time.Second, 0.9
	o.SLO = analyze.SLO{TTFT: time.Second}
	o.CostPerHour = 3 // an H100's hourly price, roughly
	o.Replay.Metrics = []replay.MetricsEndpoint{{Role: replay.RoleEngine, URL: target + "/metrics"}, {Role: replay.RoleGPU, URL: target + "/dcgm/metrics"}}
	o.Replay.MetricsInterval = 500 * time.Millisecond
	if isTerminal(os.Stderr) {
		o.Progress = c.App.ErrWriter
	}
	rec, err := sweep.Run(c.Context, dir, o)
	if err != nil {
		return fmt.Errorf("demo sweep: %w", err)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  %-9s %5.1fs  rates 2, 4, 8, 12 req/s, %s each, SLO TTFT ≤ 1 s for 90%% of requests → %s\n", "sweep", time.Since(t0).Seconds(), o.StepDuration, dir)
	return sweep.WriteSummary(w, rec)
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
	return os.WriteFile(filepath.Join(out, demoMarker), []byte("written by servetrace demo; the next demo run replaces this directory\n"), 0o644)
}
