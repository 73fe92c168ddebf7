package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/synth"
	"github.com/servetrace/servetrace/trace"
)

// parseSpan reads "FROM-TO" in percent ("0-70", "70-100%") as fractions.
func parseSpan(flag, s string) ([2]float64, error) {
	if s == "" {
		return [2]float64{}, nil
	}
	a, b, ok := strings.Cut(strings.TrimSuffix(s, "%"), "-")
	lo, err1 := strconv.ParseFloat(strings.TrimSpace(a), 64)
	hi, err2 := strconv.ParseFloat(strings.TrimSpace(b), 64)
	if !ok || err1 != nil || err2 != nil || lo < 0 || hi > 100 || lo >= hi {
		return [2]float64{}, fmt.Errorf("--%s %q: want FROM-TO in percent of the trace's span, e.g. 0-70 or 70-100", flag, s)
	}
	return [2]float64{lo / 100, hi / 100}, nil
}

func fitCmd() *cli.Command {
	return &cli.Command{
		Name:      "fit",
		Usage:     "fit a workload model (model.json) to a trace bucket",
		ArgsUsage: "BUCKET",
		Description: `Fits, in one streaming pass: arrivals (a Fourier or piecewise intensity by
Poisson maximum likelihood with QAIC, a Gamma/Weibull renewal law by maximum
likelihood with AIC, and a latent rate fitted to the dispersion curve),
joint input/output lengths per (model, api) class (a Gaussian copula over
empirical marginals, or output quantiles per input bin), prefix heat (reuse
share, depth and age, Zipf exponent of group popularity), sessions (turns,
think time, history growth) and the attribute mix. docs/model.md documents
every field of model.json.

Example:
   servetrace fit traces/azure --out azure-model.json
   servetrace fit traces/azure --span 0-70 --out train.json   # hold out the last 30%`,
		Flags: []cli.Flag{
			outFlag("model file to write", true),
			&cli.StringFlag{Name: "span", Usage: "fit part of the trace: FROM-TO in percent of its span (e.g. 0-70)"},
			&cli.BoolFlag{Name: "no-latent", Usage: "skip the latent-rate layer (its fit simulates the process a few hundred times)"},
		},
		Action: func(c *cli.Context) error {
			if err := needArgs(c, 1, "BUCKET"); err != nil {
				return err
			}
			span, err := parseSpan("span", c.String("span"))
			if err != nil {
				return usageError(err.Error())
			}
			if _, err := trace.OpenBucket(c.Args().First()); err != nil {
				return err // before the output check: a wrong input is the first thing to say
			}
			if err := trace.CheckOutputPath(c.String("out"), c.Args().Slice()); err != nil {
				return usageError("--out: " + err.Error())
			}
			m, err := synth.Fit(c.Context, c.Args().First(), synth.FitOptions{Span: span, NoLatent: c.Bool("no-latent"),
				Progress: func(s string) { fmt.Fprintln(c.App.ErrWriter, s) }})
			if err != nil {
				return err
			}
			// An interrupted fit writes nothing, even if it got to the end.
			if err := c.Context.Err(); err != nil {
				return fmt.Errorf("fit interrupted, no model written: %w", err)
			}
			if err := synth.WriteModel(c.String("out"), m); err != nil {
				return err
			}
			a := m.Arrivals
			l := m.MainLengths()
			fmt.Fprintf(c.App.Writer, "fitted %d requests (%d session starts): %.3f req/s, inter-arrival CV %.2f\n", m.Source.Rows, m.Source.FirstTurns, m.MeanRatePerS(), a.InterArrivalCV)
			fmt.Fprintf(c.App.Writer, "arrivals: %s\n", a.Chosen)
			if len(a.Dispersion) > 0 {
				var parts []string
				for _, d := range a.Dispersion {
					parts = append(parts, fmt.Sprintf("%gs %.3g/%.3g", d.WindowS, d.Trace, d.Model))
				}
				fmt.Fprintf(c.App.Writer, "dispersion of counts (trace/model): %s\n", strings.Join(parts, ", "))
			}
			fmt.Fprintf(c.App.Writer, "lengths: %d class(es); main: input p50 %.0f, output p50 %.0f tokens, Spearman %.3f, copula rho %.3f, sampler %s\n",
				len(m.Lengths), l.Input.Quantile(0.5), l.Output.Quantile(0.5), l.Spearman, l.Rho, l.Sampler)
			if p := m.Prefix; p != nil {
				fmt.Fprintf(c.App.Writer, "prefix: %.1f%% of requests reuse a prefix (mean depth %.0f%%), %d groups, Zipf alpha %.2f [%.2f, %.2f]\n",
					100*p.ReuseShare, 100*p.Depth.Mean, p.Groups, p.ZipfAlpha, p.ZipfAlphaCI95[0], p.ZipfAlphaCI95[1])
			}
			if s := m.Sessions; s != nil {
				fmt.Fprintf(c.App.Writer, "sessions: %d, %.1f%% multi-turn, think time p50 %.1f s\n", s.Sessions, 100*s.MultiTurnShare, s.ThinkS.Quantile(0.5))
			}
			fmt.Fprintf(c.App.Writer, "wrote %s\n", c.String("out"))
			return nil
		},
	}
}

func generateCmd() *cli.Command {
	return &cli.Command{
		Name:      "generate",
		Usage:     "generate a workload bucket from a model.json, with edge-case scenarios",
		ArgsUsage: "MODEL.json",
		Description: `Draws arrivals, lengths, prefixes, sessions and attributes from the model.
The workload has the same schema as a trace, so DuckDB, pandas or replay
read it alike, and it is deterministic: the same model, options and seed
give byte-identical files.

Scenarios (--scenario NAME[:key=value,...], repeatable, or a YAML file with
--scenarios) layer edge cases on the workload and label their rows' phase:
flash-crowd, ramp, long-context-storm, hot-prefix-shift, cold-cache,
cancel-storm, slow-consumer, mixed-sampling, version-switch, tenant-skew.
docs/scenarios.md lists their keys and defaults.

Examples:
   servetrace generate azure-model.json --seed 7 --out workloads/azure
   servetrace generate m.json --time-scale 24 --duration 1h --out day-in-an-hour
   servetrace generate m.json --duration 10m --scenario flash-crowd:at=2m,for=1m,factor=8 --out wl
   servetrace generate m.json --scenario ramp:rates=2/4/8/16,step=60s --out sweep`,
		Flags: []cli.Flag{
			outFlag("output workload directory", true),
			&cli.DurationFlag{Name: "duration", Usage: "length of the workload (default: the fitted span, or to the end of a ramp)"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "random seed (same seed, same workload)"},
			&cli.Float64Flag{Name: "rate-scale", Value: 1, Usage: "multiply the arrival rate (more load, same shape)"},
			&cli.Float64Flag{Name: "time-scale", Value: 1, Usage: "play the daily/weekly pattern this many times faster (24: a day in an hour), bursts unchanged"},
			&cli.StringSliceFlag{Name: "scenario", Usage: "scenario NAME or NAME:key=value,... (repeatable)"},
			&cli.StringFlag{Name: "scenarios", Usage: "YAML file of scenarios (scenarios: [{name: ..., ...}])"},
			startFlag,
			&cli.StringFlag{Name: "model-name", Usage: "model column for every request (default: the trace's mix)"},
			&cli.StringFlag{Name: "api", Usage: "api column for every request: chat|completions (default: the trace's mix)"},
			&cli.Int64Flag{Name: "max-input-tokens", Usage: "cap input lengths (e.g. the server's context length)"},
			&cli.BoolFlag{Name: "force", Usage: "replace a workload that already exists at --out"},
		},
		Action: func(c *cli.Context) error {
			if err := needArgs(c, 1, "MODEL.json"); err != nil {
				return err
			}
			if c.IsSet("duration") && c.Duration("duration") <= 0 {
				return usageError("--duration must be positive, e.g. --duration 60s")
			}
			for _, f := range []string{"rate-scale", "time-scale"} {
				if !(c.Float64(f) > 0) {
					return usageError(fmt.Sprintf("--%s %v must be positive", f, c.Float64(f)))
				}
			}
			var scenarios []synth.Scenario
			if path := c.String("scenarios"); path != "" {
				s, err := synth.ReadScenarioFile(path)
				if err != nil {
					return usageError(err.Error())
				}
				scenarios = append(scenarios, s...)
			}
			for _, arg := range c.StringSlice("scenario") {
				s, err := synth.ParseScenario(arg)
				if err != nil {
					return usageError("--scenario: " + err.Error())
				}
				scenarios = append(scenarios, s)
			}
			opts := synth.GenerateOptions{Duration: c.Duration("duration"), Seed: c.Uint64("seed"), Start: startTime(c), Model: c.String("model-name"), API: c.String("api"),
				RateScale: c.Float64("rate-scale"), TimeScale: c.Float64("time-scale"), MaxInputTokens: c.Int64("max-input-tokens"), Scenarios: scenarios}
			man, err := synth.GenerateToBucket(c.Context, c.Args().First(), c.String("out"), opts, c.Bool("force"))
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "generated %d requests over %v (seed %d) into %s\n", man.Rows, time.Duration(man.Generator["duration_s"].(float64)*float64(time.Second)), c.Uint64("seed"), c.String("out"))
			return nil
		},
	}
}

func validateCmd() *cli.Command {
	return &cli.Command{
		Name:      "validate",
		Usage:     "check a synthetic workload against a real trace, measure by measure",
		ArgsUsage: "REAL SYNTH",
		Description: `Compares lengths (KS distance, p50/p90/p99), their rank correlation and the
median output per input decile, inter-arrival gap quantiles, the index of
dispersion of counts at 1/10/60 s, the per-minute rate, the LRU prefix-cache
block hit rate at 0.5M/1.5M/5M/15M/50M tokens and the session-length
distribution. Each has a threshold (--threshold name=value overrides one);
the exit status is 1 when any fails.

Example (fit on the first 70%, check on the held-out 30%):
   servetrace fit traces/azure --span 0-70 --out train.json
   servetrace generate train.json --duration 17m --out synth
   servetrace validate traces/azure synth --real-span 70-100`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "real-span", Usage: "compare against part of REAL: FROM-TO in percent of its span"},
			&cli.StringFlag{Name: "synth-span", Usage: "compare part of SYNTH: FROM-TO in percent of its span"},
			&cli.StringSliceFlag{Name: "threshold", Usage: "override a check's threshold: NAME=VALUE (repeatable)"},
			&cli.BoolFlag{Name: "json", Usage: "write the checks as JSON"},
		},
		Action: func(c *cli.Context) error {
			if err := needArgs(c, 2, "REAL SYNTH"); err != nil {
				return err
			}
			var o synth.ValidateOptions
			var err error
			if o.RealSpan, err = parseSpan("real-span", c.String("real-span")); err != nil {
				return usageError(err.Error())
			}
			if o.SynthSpan, err = parseSpan("synth-span", c.String("synth-span")); err != nil {
				return usageError(err.Error())
			}
			o.Thresholds = map[string]float64{}
			for _, kv := range c.StringSlice("threshold") {
				k, v, ok := strings.Cut(kv, "=")
				x, perr := strconv.ParseFloat(v, 64)
				if _, known := synth.DefaultThresholds[k]; !ok || perr != nil || !known || x < 0 {
					return usageError(fmt.Sprintf("--threshold %q: want NAME=VALUE with a known check name (e.g. ks_input_tokens=0.05) and a value ≥ 0", kv))
				}
				o.Thresholds[k] = x
			}
			v, err := synth.Validate(c.Context, c.Args().Get(0), c.Args().Get(1), o)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				if err := writeJSON(c.App.Writer, v); err != nil {
					return err
				}
			} else if err := synth.WriteValidation(c.App.Writer, v); err != nil {
				return err
			}
			if !v.Pass {
				return cli.Exit("", exitFailure)
			}
			return nil
		},
	}
}
