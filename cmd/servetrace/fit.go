package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/replay"
	"github.com/servetrace/servetrace/synth"
	"github.com/servetrace/servetrace/trace"
)

func fitCmd() *cli.Command {
	return &cli.Command{
		Name:      "fit",
		Usage:     "fit a workload model (model.json) to a trace bucket",
		ArgsUsage: "BUCKET | --shard I/N BUCKET | --merge PARTIAL...",
		Description: `Fits, in one streaming pass: arrivals (a Fourier or piecewise intensity by
Poisson maximum likelihood with QAIC, a Gamma/Weibull renewal law by maximum
likelihood with AIC, and a latent rate fitted to the dispersion curve),
joint input/output lengths per (model, api) class (a Gaussian copula over
empirical marginals, or output quantiles per input bin), prefix heat (reuse
share, depth and age, Zipf exponent of group popularity), sessions (turns,
think time, history growth) and the attribute mix. docs/model.md documents
every field of model.json.

A fit too big for one machine runs in shards: --shard I/N fits the time
slice [I/N, (I+1)/N) of the span into a partial file (the fit's statistics,
gzip JSON), and --merge joins the N partials of one trace into the model,
as one fit would have made it. Sessions and prefix reuse that cross a slice
boundary are seen in part (docs/architecture.md, "Sharded fit").

Example:
   servetrace fit traces/azure --out azure-model.json
   servetrace fit traces/azure --span 0-70 --out train.json   # hold out the last 30%
   servetrace fit traces/azure --shard 0/4 --out parts/0.fitpart.gz   # ... to 3/4
   servetrace fit --merge parts/*.fitpart.gz --out azure-model.json`,
		Flags: []cli.Flag{
			outFlag("model file to write (with --shard: the shard's partial file)", true),
			&cli.StringFlag{Name: "span", Usage: "fit part of the trace: FROM-TO in percent of its span (e.g. 0-70)"},
			&cli.BoolFlag{Name: "no-latent", Usage: "skip the latent-rate layer (its fit simulates the process a few hundred times)"},
			&cli.StringFlag{Name: "shard", Usage: "I/N: fit the time slice [I/N, (I+1)/N) of the span into a partial file for --merge"},
			&cli.BoolFlag{Name: "merge", Usage: "merge the partial files given as arguments (every shard of one trace, once) into the model"},
		},
		Action: func(c *cli.Context) error {
			switch {
			case c.Bool("merge"):
				return fitMerge(c)
			case c.String("shard") != "":
				return fitShard(c)
			}
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
			m, err := synth.Fit(c.Context, c.Args().First(), synth.FitOptions{Span: span, NoLatent: c.Bool("no-latent"), Progress: progressTo(c.App.ErrWriter)})
			if err != nil {
				return err
			}
			return writeFittedModel(c, m)
		},
	}
}

// fitShard writes shard I/N's partial statistics.
func fitShard(c *cli.Context) error {
	if err := needArgs(c, 1, "BUCKET"); err != nil {
		return err
	}
	if c.NArg() > 1 {
		return usageError(fmt.Sprintf("fit --shard: one BUCKET, not %d arguments", c.NArg()))
	}
	if c.Bool("no-latent") {
		return usageError("--no-latent: give it to 'fit --merge', which fits the arrivals")
	}
	i, n, err := replay.ParseShard(c.String("shard"))
	if err != nil {
		return usageError(withFlagHints(c.App, err))
	}
	span, err := parseSpan("span", c.String("span"))
	if err != nil {
		return usageError(err.Error())
	}
	dir := c.Args().First()
	if _, err := trace.OpenBucket(dir); err != nil {
		return err
	}
	if err := trace.CheckOutputPath(c.String("out"), c.Args().Slice()); err != nil {
		return usageError("--out: " + err.Error())
	}
	p, err := synth.FitPartial(c.Context, dir, synth.FitOptions{Span: span, Progress: progressTo(c.App.ErrWriter)}, int(i), int(n))
	if err != nil {
		return err
	}
	if err := c.Context.Err(); err != nil {
		return fmt.Errorf("fit interrupted, no partial written: %w", err)
	}
	if err := synth.WritePartial(c.String("out"), p); err != nil {
		return err
	}
	from, to := time.UnixMicro(p.FromUs).UTC(), time.UnixMicro(p.ToUs).UTC()
	fmt.Fprintf(c.App.Writer, "fitted shard %d/%d of %s: %d requests (%d session starts) in [%s, %s)\n", p.Shard, p.Shards, dir, p.Rows, p.FirstTurns,
		from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))
	fmt.Fprintf(c.App.Writer, "wrote %s (merge every shard's with 'servetrace fit --merge')\n", c.String("out"))
	return nil
}

// fitMerge merges the partial files given as arguments into the model.
func fitMerge(c *cli.Context) error {
	if err := needArgs(c, 1, "PARTIAL files"); err != nil {
		return err
	}
	for _, f := range []string{"span", "shard"} {
		if c.IsSet(f) {
			return usageError(fmt.Sprintf("--%s: a merge takes the span and the shards from its partial files", f))
		}
	}
	if err := trace.CheckOutputPath(c.String("out"), c.Args().Slice()); err != nil {
		return usageError("--out: " + err.Error())
	}
	m, err := synth.FitMerged(c.Context, c.Args().Slice(), synth.FitOptions{NoLatent: c.Bool("no-latent"), Progress: progressTo(c.App.ErrWriter)})
	if err != nil {
		return err
	}
	return writeFittedModel(c, m)
}

func progressTo(w io.Writer) func(string) { return func(s string) { fmt.Fprintln(w, s) } }

// writeFittedModel writes the model to --out and prints its summary.
func writeFittedModel(c *cli.Context, m *synth.Model) error {
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
}
