package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/synth"
	"github.com/servetrace/servetrace/trace"
)

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
