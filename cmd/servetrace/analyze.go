package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/trace"
)

func analyzeCmd() *cli.Command {
	return &cli.Command{
		Name:      "analyze",
		Usage:     "report latency, throughput and outcomes of one or more runs",
		ArgsUsage: "RUN_DIR|RESULT_FILE|SWEEP_DIR...",
		Description: `Every percentile comes with its sample count, a 95% distribution-free
interval from order statistics (a bound the sample cannot give is shown as —)
and, for per-request metrics, a 95% bootstrap interval: moving blocks of
requests when latencies are correlated in time, seeded and reproducible. The
notes say how many samples a tail percentile would need for --precision.
Several run directories are pooled. Another tool's result file can be given
instead of a run directory, told apart by its content: vllm bench serve (every
vintage; a sweep directory too), SGLang bench_serving JSONL, AIPerf, GenAI-Perf,
guidellm and LLMPerf. Per-request data get the same intervals as a servetrace
run; a summary-only file's figures are reported as the tool gave them.

Example:
   servetrace analyze runs/a
   servetrace analyze runs/a --json --percentiles 50,99,99.9 --ttft-mode first-chunk
   servetrace analyze runs/a --slo ttft=800ms,tpot=50ms
   servetrace analyze runs/agents --baseline runs/agents-alone`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON (same as --format json)"},
			&cli.BoolFlag{Name: "markdown", Usage: "print the report as Markdown (same as --format markdown)"},
			&cli.StringFlag{Name: "format", Value: "table", Usage: "table|json|markdown|vllm (vllm: the JSON field names of vllm bench serve results)"},
			&cli.StringFlag{Name: "ttft-mode", Value: string(analyze.TTFTFirstContent), Usage: "first-content|first-chunk (first-chunk counts a role-only chunk, as vllm bench does)"},
			&cli.StringFlag{Name: "percentiles", Value: "50,90,95,99,99.9", Usage: "comma-separated percentiles"},
			&cli.IntFlag{Name: "resamples", Value: 2000, Usage: "bootstrap replicates per metric"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "bootstrap seed (same seed, same intervals)"},
			&cli.StringFlag{Name: "block", Value: "auto", Usage: "bootstrap block length in requests: auto (from the autocorrelation) or N (1 = independent)"},
			&cli.StringFlag{Name: "interval", Value: string(analyze.IntervalAuto), Usage: "the interval the tables show for each percentile: auto (order statistics where requests look independent in time, batch means where they are correlated), order or batch; JSON has both"},
			&cli.Float64Flag{Name: "precision", Value: 0.05, Usage: "target relative half-width for the 'samples needed' figures"},
			&cli.StringFlag{Name: "slo", Usage: "objectives for goodput, e.g. ttft=800ms,tpot=50ms,e2e=10s"},
			&cli.StringFlag{Name: "by", Usage: "breakdowns, comma-separated: " + strings.Join(analyze.Dimensions, ", ")},
			&cli.DurationFlag{Name: "stall", Value: analyze.DefaultStall, Usage: "a gap between token events above this is a stall"},
			&cli.DurationFlag{Name: "window", Usage: "add a time series in windows of this length (e.g. 10s), with regions and recovery"},
			&cli.StringFlag{Name: "html", Usage: "also write a self-contained HTML report with plots to this file"},
			&cli.IntFlag{Name: "in-memory-rows", Value: analyze.DefaultInMemoryRows, Usage: "analyze runs of up to this many result rows in memory; longer runs (and other tools' result files) are streamed in fixed memory (percentiles within 0.1%), without --window, --html, --vs-logged or repeats of several runs"},
			&cli.StringFlag{Name: "baseline", Usage: "an unloaded run of the same workload (e.g. replayed at a low --speed): add each session's makespan slowdown against it, sessions matched by session_id"},
			&cli.StringFlag{Name: "vs-logged", Usage: "compare replayed TTFT/E2E with those the source trace logged for the same requests: auto (run.json's workload) or a trace bucket path"},
		},
		Action: func(c *cli.Context) error {
			if err := needArgs(c, 1, "RUN_DIR"); err != nil {
				return err
			}
			pcts, err := parsePercentiles(c.String("percentiles"))
			if err != nil {
				return usageError(err.Error())
			}
			block := analyze.BlockAuto
			if b := c.String("block"); b != "auto" {
				n, err := strconv.Atoi(b)
				if err != nil || n < 1 {
					return usageError(fmt.Sprintf("--block %q: use auto or a positive number of requests", b))
				}
				block = n
			}
			if f := c.String("format"); !slices.Contains([]string{"table", "json", "markdown", "vllm"}, f) {
				return usageError(fmt.Sprintf("--format %q: use table, json, markdown or vllm", f))
			}
			if c.Duration("stall") <= 0 || c.Duration("window") < 0 {
				return usageError("--stall must be positive and --window not negative, e.g. --stall 500ms --window 10s")
			}
			if c.Int("resamples") < 100 || c.Float64("precision") <= 0 || c.Float64("precision") >= 1 {
				return usageError("--resamples must be at least 100 and --precision within (0, 1), e.g. --precision 0.05")
			}
			slo, err := analyze.ParseSLO(c.String("slo"))
			if err != nil {
				return usageError("--slo: " + err.Error())
			}
			if path := c.String("html"); path != "" {
				if err := trace.CheckOutputPath(path, c.Args().Slice()); err != nil {
					return usageError("--html: " + err.Error())
				}
			}
			opts := analyze.Options{TTFTMode: analyze.TTFTMode(c.String("ttft-mode")), Percentiles: pcts,
				Bootstrap: analyze.BootstrapOptions{Resamples: c.Int("resamples"), Seed: c.Uint64("seed"), Block: block}, Precision: c.Float64("precision"),
				Interval: analyze.IntervalMethod(c.String("interval")), SLO: slo, Stall: c.Duration("stall"), By: splitList(c.String("by")), Window: c.Duration("window"), Curves: c.String("html") != "", VsLogged: c.String("vs-logged"),
				InMemoryRows: c.Int("in-memory-rows"), Baseline: c.String("baseline")}
			dirs, err := expandSweepDirs(c.Args().Slice())
			if err != nil {
				return usageError(err.Error())
			}
			rep, err := interruptible(c.Context, func() (*analyze.Report, error) { return analyze.AnalyzeContext(c.Context, dirs, opts) })
			if err != nil {
				return err
			}
			if path := c.String("html"); path != "" {
				if err := writeReportHTML(c.App.ErrWriter, path, rep); err != nil {
					return err
				}
			}
			format := c.String("format")
			if c.Bool("json") {
				format = "json"
			}
			if c.Bool("markdown") {
				format = "markdown"
			}
			switch format {
			case "json":
				return writeJSON(c.App.Writer, rep)
			case "vllm":
				if len(rep.Runs) == 0 {
					return usageError("--format vllm: the input holds only summaries, whose figures are the tool's own (see --format table or json, under given)")
				}
				return writeJSON(c.App.Writer, analyze.VLLMFormat(rep))
			case "markdown":
				return analyze.WriteMarkdown(c.App.Writer, rep)
			}
			return analyze.WriteTable(c.App.Writer, rep)
		},
		Subcommands: []*cli.Command{compareCmd(), envelopeCmd()},
	}
}

func parsePercentiles(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		var v float64
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%g", &v); err != nil || !(v > 0 && v < 100) {
			return nil, fmt.Errorf("--percentiles: %q is not a number between 0 and 100, e.g. --percentiles 50,90,99", strings.TrimSpace(f))
		}
		out = append(out, v)
	}
	return out, nil
}

// writeReportHTML renders the report's plots and writes the page to path.
func writeReportHTML(stderr io.Writer, path string, rep *analyze.Report) error {
	figs, err := analyze.Figures(rep)
	if err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	return writeHTMLFile(stderr, "--html", path, func(w io.Writer) error { return analyze.WriteHTML(w, rep, figs) })
}

// expandSweepDirs replaces each argument that is a directory without a
// run.json by the runs and result files under it (a sweep); run
// directories and files pass as they are.
func expandSweepDirs(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil || !st.IsDir() {
			out = append(out, a)
			continue
		}
		if _, err := os.Stat(filepath.Join(a, trace.RunInfoName)); err == nil {
			out = append(out, a)
			continue
		}
		d, err := analyze.ExpandRunDirs(a)
		if err != nil {
			return nil, err
		}
		out = append(out, d...)
	}
	return out, nil
}
