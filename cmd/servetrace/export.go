package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/datasets"
	"github.com/servetrace/servetrace/trace"
)

func exportCmd() *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "write a trace bucket in a public trace format (Azure CSV, Mooncake JSONL, vLLM bench custom), or a replay run as OpenTelemetry spans",
		ArgsUsage: "BUCKET (or RUN with --format otlp)",
		Description: `Writes the bucket's rows, in arrival order, as an Azure LLM trace CSV
(TIMESTAMP,ContextTokens,GeneratedTokens) or Mooncake JSONL (timestamp in ms
from the bucket's anchor, lengths, hash_ids). --dense-ids renumbers prefix
block ids 0, 1, 2... by first appearance, as Mooncake's traces are, so a
bucket converted from logs (salted 64-bit ids) can feed tools that expect
Mooncake's ids. vllm-custom writes the JSONL dataset of 'vllm bench serve
--dataset-name custom' ({"prompt": ..., "output_tokens": N}): synthetic
prompts of each row's input length in --tokenizer's tokens, rows that share
prefix blocks sharing their leading text.

otlp exports a replay run dir instead (RUN: run.json and results/): one
OTLP/JSON TracesData document per line, as the OpenTelemetry collector's
file exporter writes them, one CLIENT span per request from sent to done,
an event per streamed token event, gen_ai.* attributes (model, usage,
finish reason), the request id and outcome, status ERROR for every
outcome but ok; trace ids are derived from the run id and request id.

Example:
   servetrace export traces/mine --format mooncake --dense-ids --out mine.jsonl
   servetrace export runs/r1 --format otlp --out r1.otlp.jsonl`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Required: true, Usage: strings.Join(datasets.ExportFormats, "|")},
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "file to write (default: standard output)"},
			&cli.BoolFlag{Name: "dense-ids", Usage: "renumber prefix block ids by first appearance (Mooncake style)"},
			&cli.IntFlag{Name: "max-dense-ids", Value: datasets.DefaultMaxDenseIDs, Usage: "bound on the dense-id map; older ids seen again get new numbers"},
			&cli.StringFlag{Name: "tokenizer", Value: "cl100k_base", Usage: "vllm-custom: tokenizer the prompts are sized for (match the server's)"},
		},
		Action: func(c *cli.Context) error {
			what := "BUCKET"
			if c.String("format") == datasets.FormatOTLP {
				what = "RUN"
			}
			if err := needArgs(c, 1, what); err != nil {
				return err
			}
			if f := c.String("format"); !slices.Contains(datasets.ExportFormats, f) {
				return usageError(fmt.Sprintf("--format %q: use %s", f, strings.Join(datasets.ExportFormats, " or ")))
			}
			o := datasets.ExportOptions{DenseIDs: c.Bool("dense-ids"), MaxDenseIDs: c.Int("max-dense-ids"), Tokenizer: c.String("tokenizer")}
			if path := c.String("out"); path != "" {
				if err := trace.CheckOutputPath(path, c.Args().Slice()); err != nil {
					return usageError("--out: " + err.Error())
				}
				var n int64
				err := trace.WriteFileAtomic(path, func(w io.Writer) error {
					var err error
					n, err = datasets.Export(c.Context, c.Args().First(), w, c.String("format"), o)
					return err
				})
				if err != nil {
					return fmt.Errorf("export to %s: %w", path, err)
				}
				unit := "rows"
				if c.String("format") == datasets.FormatOTLP {
					unit = "spans"
				}
				fmt.Fprintf(c.App.ErrWriter, "wrote %d %s to %s\n", n, unit, path)
				return nil
			}
			_, err := datasets.Export(c.Context, c.Args().First(), c.App.Writer, c.String("format"), o)
			return err
		},
	}
}
