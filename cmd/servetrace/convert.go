package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/datasets"
	"github.com/servetrace/servetrace/replay"
	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
)

func convertCmd() *cli.Command {
	return &cli.Command{
		Name:      "convert",
		Usage:     "convert logs or public traces into a Parquet trace bucket",
		ArgsUsage: "INPUT... (file, '-' for stdin, or a bundled dataset name)",
		Description: `Reads each input (plain, gzip, zstd or bzip2, told by content whatever
the name; '-' for standard input), detects its format from its start (a
Git LFS pointer, or an xz or zip file, is named as such), and writes
OUT/date=YYYY-MM-DD/hour=HH/part-*.parquet plus _manifest.json.

Formats: Azure LLM trace CSV (2023/2024), Mooncake JSONL, BurstGPT CSV,
ShareGPT conversations, OpenAI-style request logs (openai-log: JSONL, or
JSON documents pretty-printed over many lines or in an array, read through
--map; a body logged as a JSON string is decoded), OpenAI Batch API output
(openai-batch, the request side joined from --batch-input), CSV/TSV logs (csv: columns named by --map), and
OpenTelemetry traces (otlp: OTLP/JSON, the spans with GenAI attributes).

Request logs are anonymised: prompts are tokenized only to count them and
to hash them into salted prefix blocks; ids are salted, tenants and users
HMAC'd; sessions come from a logged conversation id or are inferred from
message prefixes. No text, token id, raw id or key reaches any output file.
The salt (--salt-file or $SERVETRACE_SALT) links ids across conversions.

Lines that cannot be converted go to OUT/_rejects.jsonl with file, line and
reason (never the line's text). Past --max-reject-ratio, or when no line
converts, no trace is written, only OUT/_rejects.jsonl (unless OUT holds an
earlier trace, which is left as it was), and the error names the commonest
reasons with their counts and first lines.

Example:
   servetrace convert azure-code-2023 --out traces/azure
   servetrace convert trace.jsonl --format mooncake --start 2025-02-01T00:00:00Z --out traces/mc
   servetrace convert proxy-logs.jsonl.zst --map litellm --salt-file salt.hex --out traces/prod
   servetrace convert export.tsv --format csv --map columns.map --out traces/gw
   servetrace convert batch_output.jsonl --batch-input batch_input.jsonl --out traces/batch`,
		Flags: []cli.Flag{
			outFlag("output bucket directory", true),
			&cli.StringFlag{Name: "format", Usage: "input format: " + strings.Join(datasets.Formats, "|") + " (default: detected)"},
			startFlag,
			&cli.StringFlag{Name: "api", Value: trace.APIChat, Usage: "api column where the source does not say: chat|completions"},
			&cli.BoolFlag{Name: "stream", Value: true, Usage: "stream column where the source does not say"},
			&cli.StringFlag{Name: "model", Usage: "model column where the source does not say"},
			&cli.BoolFlag{Name: "force", Usage: "replace a bucket that already exists at --out"},
			&cli.Float64Flag{Name: "max-reject-ratio", Value: 0.01, Usage: "fail, writing nothing, when more than this share of lines is rejected"},
			&cli.StringFlag{Name: "map", Value: "openai", Usage: "request logs: where each field is, a preset (" + strings.Join(datasets.MappingPresets(), ", ") + ") or a mapping file ('field: json.path | other.path' per line); unset: openai, or openai-batch for Batch API output"},
			&cli.StringFlag{Name: "batch-input", Usage: "OpenAI Batch API output: the batch's input JSONL, joined by custom_id for the request side (prompts counted, max tokens, sampling)"},
			&cli.StringFlag{Name: "salt-file", Usage: "request logs: file holding the salt (hex or base64, at least 128 bits) that keys ids and prefix hashes; default $SERVETRACE_SALT, else random (ids then do not link across conversions)"},
			&cli.StringFlag{Name: "tokenizer", Value: "cl100k_base", Usage: "request logs: tokenizer for counts where usage is missing and for prefix blocks: " + strings.Join(tokenize.Encodings, "|") + " or a rank file"},
			&cli.IntFlag{Name: "block-size", Value: 512, Usage: "request logs: prefix block size in tokens"},
			&cli.DurationFlag{Name: "session-idle", Value: 30 * time.Minute, Usage: "request logs: a conversation idle this long ends its inferred session"},
			&cli.BoolFlag{Name: "hash-names", Usage: "request logs: replace model and adapter names by keyed hashes"},
			&cli.DurationFlag{Name: "max-disorder", Value: time.Hour, Usage: "request logs: reject a row earlier than this before the latest row seen"},
			&cli.BoolFlag{Name: "sessions-from-prefix", Usage: "Mooncake traces: link a request whose hash ids begin with every full block of an earlier one into its session, as its child (conversation and tool-agent traces carry sessions no other way)"},
			&cli.BoolFlag{Name: "dense-ids", Usage: "renumber prefix block ids 0, 1, 2... by first appearance (Mooncake style)"},
			&cli.IntFlag{Name: "max-dense-ids", Value: datasets.DefaultMaxDenseIDs, Usage: "bound on the dense-id map; older ids seen again get new numbers"},
			&cli.DurationFlag{Name: "time-resolution", Usage: "coarsen arrival times to multiples of this (e.g. 1s)"},
			&cli.IntFlag{Name: "min-tenant-requests", Usage: "fold tenants with fewer requests into one (reads the inputs twice)"},
			&cli.StringFlag{Name: "shard", Usage: "i/N: convert inputs i, i+N, i+2N... into --out beside the other shards (then --merge-shards)"},
			&cli.BoolFlag{Name: "merge-shards", Usage: "join the manifests the shards wrote in --out into one bucket (no inputs)"},
		},
		Action: func(c *cli.Context) error {
			if c.Bool("merge-shards") {
				if c.NArg() > 0 {
					return usageError("--merge-shards takes no inputs: it joins what the shards wrote in --out")
				}
				m, err := trace.MergeShards(c.String("out"))
				if err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "merged %d sources, %d rows (%d rejected) into %s\n", len(m.Sources), m.Rows, m.Rejects, c.String("out"))
				return nil
			}
			if err := needArgs(c, 1, "INPUT"); err != nil {
				return err
			}
			var shard, shards int
			if sh := c.String("shard"); sh != "" {
				i, n, err := replay.ParseShard(sh)
				if err != nil {
					return usageError(err.Error())
				}
				shard, shards = int(i), int(n)
			}
			logOpts, err := logOptions(c)
			if err != nil {
				return usageError(err.Error())
			}
			api := c.String("api")
			if api != trace.APIChat && api != trace.APICompletions {
				return usageError(fmt.Sprintf("--api %q: use chat or completions", api))
			}
			if f := c.String("format"); f != "" && !slices.Contains(datasets.Formats, f) {
				return usageError(fmt.Sprintf("--format %q: use one of %s", f, strings.Join(datasets.Formats, ", ")))
			}
			m, err := datasets.Convert(c.Context, c.Args().Slice(), c.String("out"), datasets.ConvertOptions{
				Options: datasets.Options{Format: c.String("format"), Start: startTime(c), API: api, Stream: c.Bool("stream"), Model: c.String("model"), Log: logOpts,
					SessionsFromPrefix: c.Bool("sessions-from-prefix")},
				Force:          c.Bool("force"),
				MaxRejectRatio: c.Float64("max-reject-ratio"),
				DenseIDs:       c.Bool("dense-ids"), MaxDenseIDs: c.Int("max-dense-ids"),
				TimeResolution: c.Duration("time-resolution"), MinTenantRequests: c.Int("min-tenant-requests"),
				Shard: shard, ShardCount: shards,
				Progress: func(p datasets.Progress) { fmt.Fprintln(c.App.ErrWriter, convertProgress(p)) },
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "converted %d rows (%d rejected) from %d input(s), %s to %s, into %s\n",
				m.Rows, m.Rejects, len(m.Sources), m.Start.Format(time.RFC3339), m.End.Format(time.RFC3339), c.String("out"))
			if m.Rejects > 0 {
				if len(m.RejectReasons) > 0 {
					fmt.Fprintf(c.App.Writer, "rejected by reason: %s\n", datasets.ReasonsText(m.RejectReasons))
				}
				fmt.Fprintf(c.App.Writer, "rejected lines and reasons: %s/%s\n", c.String("out"), trace.RejectsName)
			}
			for _, n := range m.Notes {
				fmt.Fprintf(c.App.Writer, "note: %s\n", n)
			}
			return nil
		},
	}
}

// convertProgress is convert's progress line for an input: how much of
// it is read, and the rows and rejects so far.
func convertProgress(p datasets.Progress) string {
	read := fmt.Sprintf("%d MiB read", p.Read>>20)
	if p.Size > 0 {
		read = fmt.Sprintf("%d of %d MiB read (%.0f%%)", p.Read>>20, p.Size>>20, 100*float64(p.Read)/float64(p.Size))
	}
	return fmt.Sprintf("convert: %s %s: %s, %d rows, %d rejected", p.Stage, p.Input, read, p.Rows, p.Rejects)
}

// logOptions reads the request-log flags of convert.
func logOptions(c *cli.Context) (datasets.LogOptions, error) {
	var mapping *datasets.Mapping // unset: the format's own (openai, or openai-batch)
	if c.IsSet("map") {
		m, err := datasets.LoadMapping(c.String("map"))
		if err != nil {
			return datasets.LogOptions{}, fmt.Errorf("--map: %w", err)
		}
		mapping = m
	}
	salt, err := loadSalt(c.String("salt-file"))
	if err != nil {
		return datasets.LogOptions{}, fmt.Errorf("--salt-file: %w", err)
	}
	tok, err := tokenize.Open(c.String("tokenizer"), "")
	if err != nil {
		return datasets.LogOptions{}, fmt.Errorf("--tokenizer: %w", err)
	}
	if c.Int("block-size") < 1 {
		return datasets.LogOptions{}, fmt.Errorf("--block-size %d: use a positive number of tokens, e.g. 512", c.Int("block-size"))
	}
	var batch *datasets.BatchInput
	if p := c.String("batch-input"); p != "" {
		if batch, err = datasets.LoadBatchInput(c.Context, p); err != nil {
			return datasets.LogOptions{}, fmt.Errorf("--batch-input: %w", err)
		}
	}
	return datasets.LogOptions{Mapping: mapping, Salt: salt, Tokenizer: tok, BlockSize: c.Int("block-size"), SessionIdle: c.Duration("session-idle"),
		HashNames: c.Bool("hash-names"), MaxDisorder: c.Duration("max-disorder"), BatchInput: batch}, nil
}
