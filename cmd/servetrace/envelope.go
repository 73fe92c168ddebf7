package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/trace"
)

func envelopeCmd() *cli.Command {
	return &cli.Command{
		Name:      "envelope",
		Usage:     "service envelope of a load sweep: offered, accepted, completed and goodput per step, the knee, the highest rate meeting the SLO",
		ArgsUsage: "RUN_DIR...",
		Description: `Each run directory (run id) of a sweep is one step; a single run whose
workload has a phase column (a ramp) is split by phase. Per step: offered,
accepted (not refused with 429/503), completed and good requests per second
with 95% Poisson intervals, TTFT and E2E percentiles, and whether the step
met the SLO (at least --attainment of its requests did). Then the knee where
goodput stops growing, the highest rate meeting the SLO bracketed by the
sweep's resolution, and whether latency recovered after the overload.

Example:
   servetrace analyze envelope runs/sweep/* --slo ttft=800ms,tpot=50ms --html envelope.html`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the envelope as JSON"},
			&cli.StringFlag{Name: "slo", Usage: "objectives, e.g. ttft=800ms,tpot=50ms (without: goodput = completed)"},
			&cli.Float64Flag{Name: "attainment", Value: 0.99, Usage: "share of a step's requests that must meet the SLO"},
			&cli.Float64Flag{Name: "confidence", Value: 0.95, Usage: "confidence of the attainment interval a step is judged by: pass when it lies at or above --attainment, fail when below, else undecided (never counted as meeting the SLO)"},
			&cli.StringFlag{Name: "ttft-mode", Value: string(analyze.TTFTFirstContent), Usage: "first-content|first-chunk"},
			&cli.StringFlag{Name: "html", Usage: "also write a self-contained HTML page with the envelope plot"},
			&cli.IntFlag{Name: "in-memory-rows", Value: analyze.DefaultInMemoryRows, Usage: "hold at most this many result rows (token times and prefix blocks counted in); an envelope holds every row"},
		},
		Action: func(c *cli.Context) error {
			if err := needArgs(c, 1, "RUN_DIR"); err != nil {
				return err
			}
			slo, err := analyze.ParseSLO(c.String("slo"))
			if err != nil {
				return usageError("--slo: " + err.Error())
			}
			var dirs []string
			for _, a := range c.Args().Slice() {
				d, err := analyze.ExpandRunDirs(a)
				if err != nil {
					return usageError(err.Error())
				}
				dirs = append(dirs, d...)
			}
			env, err := interruptible(c.Context, func() (*analyze.Envelope, error) {
				return analyze.FindEnvelope(dirs, analyze.EnvelopeOptions{Options: analyze.Options{SLO: slo, TTFTMode: analyze.TTFTMode(c.String("ttft-mode")), InMemoryRows: c.Int("in-memory-rows")},
					Attainment: c.Float64("attainment"), Confidence: c.Float64("confidence")})
			})
			if err != nil {
				return err
			}
			if path := c.String("html"); path != "" {
				if err := trace.CheckOutputPath(path, dirs); err != nil {
					return usageError("--html: " + err.Error())
				}
				figs, err := analyze.EnvelopeFigures(env)
				if err != nil {
					return fmt.Errorf("--html: %w", err)
				}
				var text strings.Builder
				analyze.WriteEnvelopeTable(&text, env)
				if err := writeHTMLFile(c.App.ErrWriter, "--html", path, func(w io.Writer) error {
					return analyze.WriteFigurePage(w, "servetrace service envelope", text.String(), figs)
				}); err != nil {
					return err
				}
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, env)
			}
			return analyze.WriteEnvelopeTable(c.App.Writer, env)
		},
	}
}
