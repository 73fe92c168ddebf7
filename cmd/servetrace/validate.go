package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/synth"
)

func validateCmd() *cli.Command {
	return &cli.Command{
		Name:      "validate",
		Usage:     "check a synthetic workload against a real trace, measure by measure",
		ArgsUsage: "REAL SYNTH",
		Description: `Compares lengths (KS distance, p50/p90/p99), their rank correlation and the
median output per input decile, inter-arrival gap quantiles, the index of
dispersion of counts at 1/10/60 s, the per-minute rate, the LRU prefix-cache
block hit rate at 0.1/0.3/1/3/10/30/60/100% of REAL's distinct blocks and
the KS distance of the blocks' LRU stack distances (each beside the same
figure between REAL's two halves: how far the trace moves against itself),
the session-length distribution, and, where REAL carries them, images per
request, image sizes and reuse, clip durations, tool and schema sizes, the
adapters' Zipf exponent and the share with sampling extras. Each has a threshold (--threshold
name=value overrides one); the exit status is 1 when any fails.

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
