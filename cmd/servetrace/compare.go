package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/trace/anon"
)

func compareCmd() *cli.Command {
	return &cli.Command{
		Name:      "compare",
		Usage:     "did B really move the latency of A? per metric: better, worse or inconclusive",
		ArgsUsage: "A B",
		Description: `A and B are each a run directory, a comma-separated list of run
directories (repeats of one configuration), or a directory whose
subdirectories are run directories. For TTFT, TPOT and E2E at p50 and p99 it
prints B−A and B/A with intervals and a verdict; Holm's correction keeps the
chance of any false verdict across the rows under 1 − --confidence.

The verdict is inconclusive, with the reason, when the sides are not
comparable: different workload sha256, token distributions that differ
(Kolmogorov–Smirnov distance above --max-ks), different error rates, a
client-saturated run, or run.json labels or server fingerprints that differ
in anything but the label named by --testing.

With --outputs it also says whether B's answers are A's: requests sent
greedy (temperature 0 or a seed) answer for answer by their fingerprints,
with the changed share's exact interval ("identical" or "changed"), and
sampled ones by output length (Kolmogorov–Smirnov) and finish reasons (χ²).
Both runs need one output salt (replay --salt-file, or $SERVETRACE_SALT).

Example:
   servetrace analyze compare runs/base runs/new --testing config
   servetrace analyze compare runs/unloaded runs/loaded --outputs`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the comparison as JSON"},
			&cli.Float64Flag{Name: "confidence", Value: 0.95, Usage: "confidence of intervals and verdicts (family-wise)"},
			&cli.StringFlag{Name: "testing", Usage: "the run.json label under test (set with replay --label KEY=VALUE); it may differ between the sides"},
			&cli.StringFlag{Name: "ttft-mode", Value: string(analyze.TTFTFirstContent), Usage: "first-content|first-chunk"},
			&cli.IntFlag{Name: "resamples", Value: 2000, Usage: "bootstrap replicates per metric"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "bootstrap seed"},
			&cli.BoolFlag{Name: "outputs", Usage: "also compare the answers (one run a side, replayed under one --salt-file): greedy ones answer for answer, sampled ones by length and finish reason"},
			&cli.Float64Flag{Name: "max-ks", Value: 0.05, Usage: "largest token-distribution KS distance still comparable"},
			&cli.IntFlag{Name: "in-memory-rows", Value: analyze.DefaultInMemoryRows, Usage: "hold at most this many result rows a side (token times and prefix blocks counted in); a comparison holds every row"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return usageError(fmt.Sprintf("compare: want two sides A and B, got %d argument(s) (see 'servetrace analyze compare --help')", c.NArg()))
			}
			if c.Int("resamples") < 100 {
				return usageError("--resamples must be at least 100")
			}
			a, err := analyze.ExpandRunDirs(c.Args().Get(0))
			if err != nil {
				return usageError(err.Error())
			}
			b, err := analyze.ExpandRunDirs(c.Args().Get(1))
			if err != nil {
				return usageError(err.Error())
			}
			res, err := interruptible(c.Context, func() (*analyze.Comparison, error) {
				return analyze.Compare(a, b, analyze.CompareOptions{TTFTMode: analyze.TTFTMode(c.String("ttft-mode")), Confidence: c.Float64("confidence"),
					Bootstrap: analyze.BootstrapOptions{Resamples: c.Int("resamples"), Seed: c.Uint64("seed")}, Testing: c.String("testing"), MaxKS: c.Float64("max-ks"),
					InMemoryRows: c.Int("in-memory-rows")})
			})
			if err != nil {
				return err
			}
			if c.Bool("outputs") {
				if len(a) != 1 || len(b) != 1 {
					return usageError(fmt.Sprintf("--outputs compares one run with one run; A has %d, B %d", len(a), len(b)))
				}
				if res.Outputs, err = analyze.CompareOutputs(a[0], b[0], c.Float64("confidence")); err != nil {
					if errors.Is(err, analyze.ErrSaltsDiffer) {
						return fmt.Errorf("%w (replay --salt-file FILE, or $%s, the same for both)", err, anon.SaltEnv)
					}
					return err
				}
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, res)
			}
			return analyze.WriteComparisonTable(c.App.Writer, res)
		},
	}
}
