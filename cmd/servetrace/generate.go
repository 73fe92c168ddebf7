package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/synth"
)

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
cancel-storm, slow-consumer, mixed-sampling, version-switch, tenant-skew,
adapter-churn, image-storm, schema-storm, subagent-storm, long-horizon,
tool-latency-shift (the agent calls' tool delays stretched).
docs/scenarios.md lists their keys and defaults; a key a scenario does not
take is an error.

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
			&cli.Int64Flag{Name: "max-input-tokens", Usage: "cap every prompt as replay sends it (e.g. the server's context length): first turns are cut to it; a later turn or agent call whose conversation would pass it is not generated, nor what waits on it"},
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
					return usageError("--scenarios: " + err.Error())
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
