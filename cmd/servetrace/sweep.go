package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/replay/pacing"
	"github.com/servetrace/servetrace/sweep"
)

// sweepSetsItself are replay flags a sweep step sets itself.
var sweepSetsItself = []string{"rate", "speed", "concurrency", "duration", "warmup", "run-id", "shard", "start-at", "wait-idle", "target", "max-requests"}

func sweepCmd() *cli.Command {
	def := sweep.DefaultOptions()
	flags := []cli.Flag{
		outFlag("sweep directory to write (a run directory per step, sweep.json, envelope.html)", true),
		&cli.StringFlag{Name: "target", Value: "http://127.0.0.1:8000", Usage: "endpoint base URL"},
		&cli.StringFlag{Name: "targets", Usage: "configurations to compare, NAME=URL,NAME=URL: interleaved A B, B A per step"},
		&cli.StringFlag{Name: "rates", Usage: "fixed steps: arrival rates in req/s, e.g. 1,2,4,8 (replacing the workload's timing)"},
		&cli.StringFlag{Name: "speeds", Usage: "fixed steps: scales of the workload's own timing, e.g. 1,2,4"},
		&cli.StringFlag{Name: "concurrencies", Usage: "fixed steps: closed-loop concurrencies, e.g. 1,4,16,64"},
		&cli.BoolFlag{Name: "search", Usage: "search for the highest rate meeting --slo at --attainment: grow from --start-rate by --growth until a step fails, then bisect to --resolution"},
		&cli.Float64Flag{Name: "start-rate", Value: 1, Usage: "with --search: the first rate (req/s)"},
		&cli.Float64Flag{Name: "growth", Value: 2, Usage: "with --search: factor between rates while growing"},
		&cli.Float64Flag{Name: "resolution", Value: 0.05, Usage: "with --search: stop when the bracket's rates are within this share of each other"},
		&cli.Float64Flag{Name: "max-rate", Usage: "with --search: the highest rate tried (default --start-rate × 4096)"},
		&cli.StringFlag{Name: "slo", Usage: "objectives, e.g. ttft=800ms,tpot=50ms (without: a request counts when it succeeds)"},
		&cli.Float64Flag{Name: "attainment", Value: def.Attainment, Usage: "share of a step's requests that must meet the SLO"},
		&cli.Float64Flag{Name: "min-accuracy", Usage: "accuracy floor: a step whose probe answers (--probes) are right less often fails, however fast (0: off)"},
		&cli.Float64Flag{Name: "confidence", Value: def.Confidence, Usage: "confidence of the attainment interval a step is judged by"},
		&cli.StringFlag{Name: "ttft-mode", Value: string(analyze.TTFTFirstContent), Usage: "first-content|first-chunk"},
		&cli.DurationFlag{Name: "step-duration", Value: def.StepDuration, Usage: "measured time of each step; 0 sizes each step from its level and the workload: at least 10 s, twice the requests a pass needs at the level's rate (closed loop: the rate measured at the levels below), 10 times the slowest E2E p99 met so far"},
		&cli.DurationFlag{Name: "step-warmup", Usage: "warmup before each step's measured time (recorded, excluded from the verdict)"},
		&cli.IntFlag{Name: "repeats", Value: def.Repeats, Usage: "runs of each fixed step per configuration"},
		&cli.IntFlag{Name: "max-extensions", Value: def.MaxExtensions, Usage: "reruns of an undecided level, pooled, before leaving it undecided (never counted as meeting the SLO)"},
		&cli.DurationFlag{Name: "budget", Usage: "stop before a step that would end past this much wall time (0 = none)"},
		&cli.DurationFlag{Name: "idle-timeout", Value: def.IdleTimeout, Usage: "with an engine --metrics-url: wait up to this long before each step for nothing running or waiting"},
		&cli.BoolFlag{Name: "no-recovery", Usage: "skip the recovery step after the first failing step"},
		&cli.Float64Flag{Name: "cost-per-hour", Usage: "the deployment's price per hour: cost per million tokens at the highest rate meeting the SLO"},
		&cli.BoolFlag{Name: "resume", Usage: "finish the sweep recorded in --out (after an interrupt), without repeating its done steps"},
		&cli.BoolFlag{Name: "json", Usage: "print sweep.json instead of the summary"},
	}
	for _, f := range replayFlags() {
		if !slices.Contains(sweepSetsItself, f.Names()[0]) {
			flags = append(flags, f)
		}
	}
	return &cli.Command{
		Name:      "sweep",
		Usage:     "find the service envelope: replay a workload at rising load, step by step, judging each by its SLO attainment interval",
		ArgsUsage: "WORKLOAD | NAME=WORKLOAD...",
		Description: `Runs one replay per step into OUT/step-NNN-CONFIG-MODE-LEVEL/, waiting before
each for the server to report nothing running or waiting (with an engine
--metrics-url), and judges a step by the exact binomial interval of the
share of its requests meeting --slo: pass when it lies at or above
--attainment, fail when below, else undecided: rerun, pooled, up to
--max-extensions times, and never counted as meeting the SLO.
After the first failing step, a recovery step at the highest passing rate
starts on the backlog and measures how long the overload takes to clear.
sweep.json (the plan, every step, every decision and why, the results) is
rewritten after each step; interrupted, --resume finishes it. Two or more
configurations (--targets A=URL,B=URL, or NAME=WORKLOAD arguments) are
interleaved A B, B A, so drift cannot favour one side; analyze compare and
envelope read OUT directly (OUT#A for one configuration).

Examples:
   servetrace sweep workloads/chat --target http://127.0.0.1:8000 --rates 1,2,4,8,16 --step-duration 60s --slo ttft=800ms --out sweeps/a
   servetrace sweep workloads/chat --search --start-rate 2 --slo ttft=800ms,tpot=50ms --attainment 0.99 \
       --metrics-url http://gpu-box:8000/metrics --metrics-url gpu=http://gpu-box:9400/metrics --cost-per-hour 4.5 --out sweeps/b
   servetrace sweep workloads/chat --targets A=http://a:8000,B=http://b:8000 --rates 4,8 --repeats 2 --out sweeps/ab
   servetrace analyze compare sweeps/ab#A sweeps/ab#B`,
		Flags: flags,
		Action: func(c *cli.Context) error {
			if err := needArgs(c, 1, "WORKLOAD"); err != nil {
				return err
			}
			o, err := sweepOptions(c)
			if err != nil {
				return usageError(err.Error())
			}
			defer pacing.TuneProcess()()
			rec, err := sweep.Run(c.Context, c.String("out"), o)
			if errors.Is(err, sweep.ErrInterrupted) {
				return cli.Exit(fmt.Sprintf("sweep interrupted; %s records it: finish it with the same command and --resume", c.String("out")+"/"+sweep.FileName), exitInterrupted)
			}
			if err != nil {
				return inFlags(c.App, err)
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, rec)
			}
			return sweep.WriteSummary(c.App.Writer, rec)
		},
	}
}

// sweepOptions translates the flags.
func sweepOptions(c *cli.Context) (sweep.Options, error) {
	o := sweep.DefaultOptions()
	ro, err := replayOptions(c)
	if err != nil {
		return o, inFlags(c.App, err)
	}
	ro.Speed = 1
	o.Replay = ro
	o.Progress = c.App.ErrWriter
	if o.Configs, err = sweepConfigs(c); err != nil {
		return o, err
	}
	modes := 0
	for _, m := range []struct {
		flag, value string
		mode        sweep.Mode
	}{{"rates", c.String("rates"), sweep.ModeRate}, {"speeds", c.String("speeds"), sweep.ModeSpeed}, {"concurrencies", c.String("concurrencies"), sweep.ModeConcurrency}} {
		if v := m.value; v != "" {
			modes++
			o.Mode = m.mode
			if o.Levels, err = parseLevels(v); err != nil {
				return o, fmt.Errorf("--%s: %w", m.flag, err)
			}
		}
	}
	if c.Bool("search") {
		modes++
		o.Mode = sweep.ModeRate
		s := sweep.DefaultSearch(c.Float64("start-rate"))
		s.Growth, s.Resolution = c.Float64("growth"), c.Float64("resolution")
		if m := c.Float64("max-rate"); m > 0 {
			s.Max = m
		}
		o.Search = s
	}
	if modes != 1 {
		return o, errors.New("give exactly one of --rates, --speeds, --concurrencies or --search")
	}
	if o.SLO, err = analyze.ParseSLO(c.String("slo")); err != nil {
		return o, fmt.Errorf("--slo: %w", err)
	}
	o.Attainment, o.Confidence, o.TTFTMode = c.Float64("attainment"), c.Float64("confidence"), analyze.TTFTMode(c.String("ttft-mode"))
	o.MinAccuracy = c.Float64("min-accuracy")
	if o.MinAccuracy > 0 && o.Replay.Probes == 0 {
		return sweep.Options{}, errors.New("--min-accuracy: give --probes SHARE too, so each step's answers are graded")
	}
	o.StepDuration, o.StepWarmup, o.Repeats, o.MaxExtensions = c.Duration("step-duration"), c.Duration("step-warmup"), c.Int("repeats"), c.Int("max-extensions")
	o.Budget, o.IdleTimeout, o.Recovery = c.Duration("budget"), c.Duration("idle-timeout"), !c.Bool("no-recovery")
	o.CostPerHour, o.Resume = c.Float64("cost-per-hour"), c.Bool("resume")
	return o, nil
}

// sweepConfigs reads the configurations: NAME=WORKLOAD arguments or one
// WORKLOAD, and --targets NAME=URL,... or --target.
func sweepConfigs(c *cli.Context) ([]sweep.Config, error) {
	var workloads, targets [][2]string
	for _, a := range c.Args().Slice() {
		if name, path, ok := strings.Cut(a, "="); ok && !strings.ContainsAny(name, `/\`) {
			workloads = append(workloads, [2]string{name, path})
		} else {
			workloads = append(workloads, [2]string{"", a})
		}
	}
	if len(workloads) > 1 && slices.ContainsFunc(workloads, func(w [2]string) bool { return w[0] == "" }) {
		return nil, errors.New("several workloads: name each, NAME=WORKLOAD")
	}
	if v := c.String("targets"); v != "" {
		if c.IsSet("target") {
			return nil, errors.New("give --target or --targets, not both")
		}
		for _, kv := range strings.Split(v, ",") {
			name, u, ok := strings.Cut(kv, "=")
			if !ok || name == "" || u == "" {
				return nil, fmt.Errorf("--targets: %q is not NAME=URL", kv)
			}
			targets = append(targets, [2]string{name, u})
		}
	} else {
		targets = [][2]string{{"", c.String("target")}}
	}
	if len(workloads) > 1 && len(targets) > 1 {
		return nil, errors.New("compare either several targets or several workloads, not both")
	}
	var out []sweep.Config
	for _, t := range targets {
		for _, w := range workloads {
			name := t[0] + w[0]
			if name == "" {
				name = "A"
			}
			out = append(out, sweep.Config{Name: name, Target: t[1], Workload: w[1]})
		}
	}
	return out, nil
}

// parseLevels reads a comma-separated list of positive numbers.
func parseLevels(v string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(v, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(x > 0) {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, x)
	}
	return out, nil
}
