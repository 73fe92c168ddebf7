// Command servetrace converts LLM request logs and public traces into Parquet
// trace buckets, fits and generates workloads, replays them against
// OpenAI-compatible endpoints (or its built-in simulator), and analyzes the
// results. This file only parses flags and wires packages together.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/datasets"
	"github.com/servetrace/servetrace/replay"
	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args, os.Stdout, os.Stderr))
}

// run executes the CLI and returns the exit code. Errors are printed as one
// line on stderr, never as a stack trace.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "servetrace: internal error: %v (please report this)\n", r)
			code = 70
		}
	}()
	app := newApp(stdout, stderr)
	app.Metadata = map[string]any{"args": args}
	if err := app.RunContext(ctx, hoistFlags(app, args)); err != nil {
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			if msg := err.Error(); msg != "" {
				fmt.Fprintln(stderr, "servetrace: "+msg)
			}
			return max(ec.ExitCode(), 1)
		}
		fmt.Fprintln(stderr, "servetrace: "+oneLine(err.Error()))
		return 1
	}
	return 0
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:                 "servetrace",
		Usage:                "LLM-serving workloads: trace → fit → generate → replay → analyze",
		Version:              trace.ToolVersion,
		EnableBashCompletion: true,
		// Repeatable flags take one value each: a header value or a scenario
		// spec may itself hold commas.
		DisableSliceFlagSeparator: true,
		Suggest:                   true,
		Writer:                    stdout,
		ErrWriter:                 stderr,
		HideHelpCommand:           true,
		Description: `Start with 'servetrace demo', which runs the whole pipeline on a bundled
trace against the built-in simulator. Each command below has --help with an
example.`,
		Commands: []*cli.Command{
			convertCmd(), exportCmd(), fitCmd(), generateCmd(), validateCmd(), replayCmd(), simCmd(), analyzeCmd(), datasetsCmd(), demoCmd(),
		},
		// run prints errors and picks the exit code; urfave's default
		// handler would call os.Exit itself.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(c *cli.Context, err error, isSub bool) error {
			return cli.Exit(fmt.Sprintf("%v (see 'servetrace %s --help')", err, c.Command.Name), 2)
		},
	}
}

// needArgs checks the positional argument count.
func needArgs(c *cli.Context, min int, what string) error {
	if c.NArg() < min {
		return cli.Exit(fmt.Sprintf("%s: missing %s (see 'servetrace %s --help')", c.Command.Name, what, c.Command.Name), 2)
	}
	return nil
}

func outFlag(usage string, required bool) *cli.StringFlag {
	return &cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: usage, Required: required}
}

var startFlag = &cli.TimestampFlag{Name: "start", Usage: "anchor for relative times (RFC 3339)", Layout: time.RFC3339,
	Value: cli.NewTimestamp(trace.DefaultStart)}

func startTime(c *cli.Context) time.Time {
	if t := c.Timestamp("start"); t != nil {
		return t.UTC()
	}
	return trace.DefaultStart
}

func convertCmd() *cli.Command {
	return &cli.Command{
		Name:      "convert",
		Usage:     "convert logs or public traces into a Parquet trace bucket",
		ArgsUsage: "INPUT... (file, '-' for stdin, or a bundled dataset name)",
		Description: `Reads each input (plain, gzip or zstd; '-' for standard input), detects
its format from the header or first line, and writes
OUT/date=YYYY-MM-DD/hour=HH/part-*.parquet plus _manifest.json.

Formats: Azure LLM trace CSV (2023/2024), Mooncake JSONL, BurstGPT CSV,
ShareGPT conversations, OpenAI-style request logs (openai-log: JSONL read
through --map), and CSV/TSV logs (csv: columns named by --map).

Request logs are anonymised: prompts are tokenized only to count them and
to hash them into salted prefix blocks; ids are salted, tenants and users
HMAC'd; sessions come from a logged conversation id or are inferred from
message prefixes. No text, token id, raw id or key reaches any output file.
The salt (--salt-file or $SERVETRACE_SALT) links ids across conversions.

Lines that cannot be converted go to OUT/_rejects.jsonl with file, line and
reason (never the line's text); past --max-reject-ratio nothing is written.

Example:
   servetrace convert azure-code-2023 --out traces/azure
   servetrace convert trace.jsonl --format mooncake --start 2025-02-01T00:00:00Z --out traces/mc
   servetrace convert proxy-logs.jsonl.zst --map litellm --salt-file salt.hex --out traces/prod
   servetrace convert export.tsv --format csv --map columns.map --out traces/gw`,
		Flags: []cli.Flag{
			outFlag("output bucket directory", true),
			&cli.StringFlag{Name: "format", Usage: "input format: " + strings.Join(datasets.Formats, "|") + " (default: detected)"},
			startFlag,
			&cli.StringFlag{Name: "api", Value: trace.APIChat, Usage: "api column where the source does not say: chat|completions"},
			&cli.BoolFlag{Name: "stream", Value: true, Usage: "stream column where the source does not say"},
			&cli.StringFlag{Name: "model", Usage: "model column where the source does not say"},
			&cli.BoolFlag{Name: "force", Usage: "replace a bucket that already exists at --out"},
			&cli.Float64Flag{Name: "max-reject-ratio", Value: 0.01, Usage: "fail, writing nothing, when more than this share of lines is rejected"},
			&cli.StringFlag{Name: "map", Value: "openai", Usage: "request logs: where each field is, a preset (" + strings.Join(datasets.MappingPresets(), ", ") + ") or a mapping file ('field: json.path | other.path' per line)"},
			&cli.StringFlag{Name: "salt-file", Usage: "request logs: file holding the salt (hex or base64, at least 128 bits) that keys ids and prefix hashes; default $SERVETRACE_SALT, else random (ids then do not link across conversions)"},
			&cli.StringFlag{Name: "tokenizer", Value: "cl100k_base", Usage: "request logs: tokenizer for counts where usage is missing and for prefix blocks: " + strings.Join(tokenize.Encodings, "|") + " or a rank file"},
			&cli.IntFlag{Name: "block-size", Value: 512, Usage: "request logs: prefix block size in tokens"},
			&cli.DurationFlag{Name: "session-idle", Value: 30 * time.Minute, Usage: "request logs: a conversation idle this long ends its inferred session"},
			&cli.BoolFlag{Name: "hash-names", Usage: "request logs: replace model and adapter names by keyed hashes"},
			&cli.DurationFlag{Name: "max-disorder", Value: time.Hour, Usage: "request logs: reject a row earlier than this before the latest row seen"},
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
					return cli.Exit("--merge-shards takes no inputs: it joins what the shards wrote in --out", 2)
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
					return cli.Exit(err.Error(), 2)
				}
				shard, shards = int(i), int(n)
			}
			logOpts, err := logOptions(c)
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			api := c.String("api")
			if api != trace.APIChat && api != trace.APICompletions {
				return cli.Exit(fmt.Sprintf("--api %q: use chat or completions", api), 2)
			}
			if f := c.String("format"); f != "" && !slices.Contains(datasets.Formats, f) {
				return cli.Exit(fmt.Sprintf("--format %q: use one of %s", f, strings.Join(datasets.Formats, ", ")), 2)
			}
			m, err := datasets.Convert(c.Context, c.Args().Slice(), c.String("out"), datasets.ConvertOptions{
				Options:        datasets.Options{Format: c.String("format"), Start: startTime(c), API: api, Stream: c.Bool("stream"), Model: c.String("model"), Log: logOpts},
				Force:          c.Bool("force"),
				MaxRejectRatio: c.Float64("max-reject-ratio"),
				DenseIDs:       c.Bool("dense-ids"), MaxDenseIDs: c.Int("max-dense-ids"),
				TimeResolution: c.Duration("time-resolution"), MinTenantRequests: c.Int("min-tenant-requests"),
				Shard: shard, ShardCount: shards,
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

func replayCmd() *cli.Command {
	def := replay.DefaultOptions()
	return &cli.Command{
		Name:      "replay",
		Usage:     "replay a workload against an OpenAI-compatible endpoint",
		ArgsUsage: "WORKLOAD",
		Description: `Sends every request at its timestamp (open loop: a slow server never delays
the schedule), streams responses with per-token timestamps, and writes
OUT/results/part-*.parquet and OUT/run.json. --rate replaces the workload's
timing with an arrival process; --concurrency runs closed loop instead.
The API key is read from --api-key-env or --api-key-file and never written.
Interrupted (Ctrl-C), in-flight requests get --grace to finish; the run dir
stays readable and is marked incomplete.

Examples:
   servetrace sim &
   servetrace replay workloads/azure-10m --target http://127.0.0.1:8000 --speed 2 --out runs/a
   servetrace replay workloads/azure-10m --rate 20 --arrival gamma --burstiness 0.5 --warmup 30s --out runs/b
   servetrace replay traces/prod --from 2024-05-10T14:00:00Z --to 2024-05-10T14:10:00Z --lead-in 1m --out runs/incident
   servetrace replay workloads/azure-10m --concurrency 16 --duration 2m --out runs/closed`,
		Flags: []cli.Flag{
			outFlag("run directory to write", true),
			&cli.StringFlag{Name: "target", Value: "http://127.0.0.1:8000", Usage: "endpoint base URL"},
			&cli.StringFlag{Name: "model", Usage: "model name for every request (default: the workload's, else the endpoint's first)"},
			&cli.StringFlag{Name: "model-map", Usage: "rename the workload's models: a=b,c=d"},
			&cli.StringFlag{Name: "api", Usage: "force chat|completions (default: each request's api)"},
			&cli.StringFlag{Name: "stream", Value: "auto", Usage: "auto|true|false: force streaming on or off"},
			&cli.Float64Flag{Name: "speed", Value: def.Speed, Usage: "time scale of the workload's timing: 2 replays twice as fast"},
			&cli.Float64Flag{Name: "rate", Usage: "replace the workload's timing with RATE requests/s"},
			&cli.StringFlag{Name: "arrival", Value: def.Arrival, Usage: "with --rate: poisson|gamma|constant"},
			&cli.Float64Flag{Name: "burstiness", Value: def.Burstiness, Usage: "with --arrival gamma: shape (1 = Poisson, below 1 burstier)"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed of the --rate arrival process"},
			&cli.IntFlag{Name: "concurrency", Usage: "closed loop: keep N requests in flight"},
			&cli.IntFlag{Name: "max-concurrency", Usage: "open loop with a cap: at most N in flight, others wait (admitted_ns records when)"},
			&cli.StringFlag{Name: "from", Usage: "replay a window from this RFC 3339 time or offset (10m)"},
			&cli.StringFlag{Name: "to", Usage: "end of the window (RFC 3339 time or offset)"},
			&cli.DurationFlag{Name: "lead-in", Usage: "with --from: also replay this much before the window, as warmup"},
			&cli.DurationFlag{Name: "duration", Usage: "replay only the first DURATION"},
			&cli.IntFlag{Name: "max-requests", Usage: "replay at most N requests"},
			&cli.StringFlag{Name: "warmup", Usage: "mark the first DURATION (30s) or N requests (100) as warmup, excluded by analyze"},
			&cli.DurationFlag{Name: "connect-timeout", Value: def.ConnectTimeout, Usage: "dial timeout"},
			&cli.DurationFlag{Name: "first-token-timeout", Usage: "give up on a stream with no token after this long (0 = wait)"},
			&cli.DurationFlag{Name: "timeout", Value: def.Timeout, Usage: "per-request timeout, send to end of response"},
			&cli.DurationFlag{Name: "grace", Value: def.Grace, Usage: "on interrupt, time in-flight requests may still finish"},
			&cli.DurationFlag{Name: "rotate-every", Value: def.RotateEvery, Usage: "close a results part this often (a kill loses at most the open part)"},
			&cli.DurationFlag{Name: "max-lateness", Value: def.MaxLateness, Usage: "mark the run client-saturated past this lateness p99"},
			&cli.BoolFlag{Name: "ignore-eos", Usage: "send ignore_eos (vLLM, SGLang, the simulator; OpenAI rejects it)"},
			&cli.BoolFlag{Name: "force-output-len", Usage: "send ignore_eos and min_tokens = max_tokens, so outputs have the workload's length"},
			&cli.StringFlag{Name: "http", Value: "1.1", Usage: "HTTP version: 1.1|2 (2 over http:// is h2 by prior knowledge)"},
			&cli.StringFlag{Name: "ca-cert", Usage: "PEM certificate to trust for an https endpoint"},
			&cli.BoolFlag{Name: "insecure", Usage: "skip TLS certificate verification"},
			&cli.StringFlag{Name: "tokenizer", Value: def.Tokenizer, Usage: "prompt tokenizer: " + strings.Join(tokenize.Encodings, "|") + ", a tiktoken rank file path (Llama 3 style), or 'server' (the endpoint's /tokenize)"},
			&cli.StringFlag{Name: "tokenizer-pattern", Usage: "pre-tokenizer regex for a rank-file --tokenizer (default: Llama 3's)"},
			&cli.StringFlag{Name: "api-key-env", Usage: "name of the environment variable holding the API key"},
			&cli.StringFlag{Name: "api-key-file", Usage: "file holding the API key"},
			&cli.StringSliceFlag{Name: "header", Usage: "extra request header Name=value (repeatable; values are never written)"},
			&cli.StringFlag{Name: "run-id", Usage: "run id (default: generated); shards of one run share it"},
			&cli.StringFlag{Name: "shard", Usage: "i/N: send this shard's part of the workload (whole sessions, at the full schedule's times); give all shards one --run-id and --start-at"},
			&cli.TimestampFlag{Name: "start-at", Layout: time.RFC3339, Usage: "wall-clock time of the schedule's zero (RFC 3339), shared by every shard"},
			&cli.DurationFlag{Name: "wait-ready", Usage: "poll the endpoint up to this long until it serves, and record the time to ready"},
			&cli.StringFlag{Name: "metrics-url", Usage: "the server's Prometheus metrics URL, scraped before, during and after the run"},
			&cli.DurationFlag{Name: "metrics-interval", Value: def.MetricsInterval, Usage: "scrape interval for --metrics-url"},
			&cli.DurationFlag{Name: "wait-idle", Usage: "with --metrics-url: wait up to this long for no running or waiting requests before starting"},
			&cli.StringSliceFlag{Name: "label", Usage: "key=value recorded in run.json (repeatable)"},
			&cli.StringFlag{Name: "serve-metrics", Usage: "serve the replayer's own Prometheus metrics at ADDR/metrics during the run (e.g. 127.0.0.1:9464)"},
		},
		Action: func(c *cli.Context) error {
			if err := needArgs(c, 1, "WORKLOAD"); err != nil {
				return err
			}
			opts, err := replayOptions(c)
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			defer replay.TuneGC()() // this process only replays
			info, err := replay.Run(c.Context, c.Args().First(), c.String("out"), opts)
			if err != nil {
				return err
			}
			if err := printRunSummary(c.App.Writer, c.String("out"), info); err != nil {
				return err
			}
			if !info.Complete {
				// The partial results are valid and analyzable, but a script
				// must not mistake an interrupted run for a complete one.
				return cli.Exit(fmt.Sprintf("replay incomplete (%s); partial results in %s", info.Reason, c.String("out")), 130)
			}
			return nil
		},
	}
}

func replayOptions(c *cli.Context) (replay.Options, error) {
	key, err := apiKey(c.String("api-key-env"), c.String("api-key-file"))
	if err != nil {
		return replay.Options{}, err
	}
	warmDur, warmN, err := replay.ParseWarmup(c.String("warmup"))
	if err != nil {
		return replay.Options{}, err
	}
	modelMap, err := replay.ParseKeyValues("--model-map", c.String("model-map"))
	if err != nil {
		return replay.Options{}, err
	}
	labels := map[string]string{}
	for _, l := range c.StringSlice("label") {
		kv, err := replay.ParseKeyValues("--label", l)
		if err != nil {
			return replay.Options{}, err
		}
		maps.Copy(labels, kv)
	}
	headers := map[string]string{}
	for _, h := range c.StringSlice("header") {
		kv, err := replay.ParseKeyValues("--header", h)
		if err != nil {
			return replay.Options{}, err
		}
		maps.Copy(headers, kv)
	}
	o := replay.Options{
		Target: c.String("target"), Model: c.String("model"), ModelMap: modelMap, API: c.String("api"), Stream: c.String("stream"),
		Speed: c.Float64("speed"), Rate: c.Float64("rate"), Arrival: c.String("arrival"), Burstiness: c.Float64("burstiness"), Seed: c.Uint64("seed"),
		Concurrency: c.Int("concurrency"), MaxConcurrency: c.Int("max-concurrency"),
		From: c.String("from"), To: c.String("to"), LeadIn: c.Duration("lead-in"),
		Duration: c.Duration("duration"), MaxRequests: c.Int("max-requests"), WarmupDuration: warmDur, WarmupRequests: warmN,
		ConnectTimeout: c.Duration("connect-timeout"), FirstTokenTimeout: c.Duration("first-token-timeout"), Timeout: c.Duration("timeout"),
		Grace: c.Duration("grace"), RotateEvery: c.Duration("rotate-every"), MaxLateness: c.Duration("max-lateness"), IgnoreEOS: c.Bool("ignore-eos"), Tokenizer: c.String("tokenizer"), TokenizerPattern: c.String("tokenizer-pattern"),
		ForceOutputLen: c.Bool("force-output-len"), HTTP: c.String("http"), CACert: c.String("ca-cert"), Insecure: c.Bool("insecure"),
		APIKey: key, Headers: headers, RunID: c.String("run-id"),
		WaitReady: c.Duration("wait-ready"), MetricsURL: c.String("metrics-url"), MetricsInterval: c.Duration("metrics-interval"),
		WaitIdle: c.Duration("wait-idle"), Labels: labels, ServeMetrics: c.String("serve-metrics"),
	}
	if sh := c.String("shard"); sh != "" {
		i, n, err := replay.ParseShard(sh)
		if err != nil {
			return replay.Options{}, err
		}
		o.Shard, o.ShardCount = i, n
		if c.String("run-id") == "" {
			return replay.Options{}, fmt.Errorf("--shard %s: give every shard the same --run-id, so analyze merges them", sh)
		}
	}
	if ts := c.Timestamp("start-at"); ts != nil {
		o.StartAt = *ts
	}
	if args, ok := c.App.Metadata["args"].([]string); ok {
		o.CommandLine = replay.RedactArgs(args)
	}
	if isTerminal(os.Stderr) {
		o.Progress = c.App.ErrWriter
	}
	return o, nil
}

// apiKey reads the API key from the named environment variable or file.
func apiKey(envName, file string) (string, error) {
	switch {
	case envName != "" && file != "":
		return "", errors.New("give --api-key-env or --api-key-file, not both")
	case envName != "":
		v := os.Getenv(envName)
		if v == "" {
			return "", fmt.Errorf("--api-key-env %s: that environment variable is empty or unset", envName)
		}
		return v, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--api-key-file: %w", err)
		}
		if k := strings.TrimSpace(string(b)); k != "" {
			return k, nil
		}
		return "", fmt.Errorf("--api-key-file %s is empty", file)
	}
	return "", nil
}

func printRunSummary(w io.Writer, dir string, info *trace.RunInfo) error {
	state := "complete"
	if !info.Complete {
		state = "INCOMPLETE: " + info.Reason
	}
	fmt.Fprintf(w, "replayed %d requests (%s) into %s:", info.Scheduled, state, dir)
	for _, o := range trace.Outcomes {
		if n := info.Outcomes[o]; n > 0 {
			fmt.Fprintf(w, " %s %d", o, n)
		}
	}
	fmt.Fprintf(w, "; client lateness p99 %.2f ms\n", info.Lateness.P99Ms)
	if info.ClientSaturated {
		fmt.Fprintf(w, "warning: the client was saturated (lateness p99 %.2f ms > %.2f ms): latencies may reflect the load generator\n", info.Lateness.P99Ms, info.MaxLatenessMs)
	}
	return nil
}

func simCmd() *cli.Command {
	def := sim.DefaultOptions()
	var presetNames []string
	for _, p := range sim.Presets() {
		presetNames = append(presetNames, p.Name)
	}
	return &cli.Command{
		Name:  "sim",
		Usage: "serve the built-in OpenAI-compatible engine simulator",
		Description: `Serves /v1/completions, /v1/chat/completions (streaming and not), /v1/models,
/tokenize, /health and /metrics (vLLM's metric names) on loopback until
interrupted. A continuous-batching engine runs in real time: each iteration
batches every running decode with chunked prefills up to
--max-num-batched-tokens, and lasts
    iter-base + prefill-per-token x prefill tokens + decode-per-seq x decodes
    + kv-per-token x KV tokens read.
The KV cache has --kv-blocks blocks of --block-size tokens, with prefix
caching, LRU eviction and preemption by recompute; past --max-waiting queued
requests the server answers 429. --preset picks constants for a public
model/GPU pair (derived from spec sheets: see the docs); each flag overrides.
Fault flags inject errors so every client failure path can be tested.

Examples:
   servetrace sim --addr 127.0.0.1:8000 --preset qwen2.5-7b-a100
   servetrace sim --preset zero --tokens-per-chunk 4          # client benchmarks, speculative-style chunks
   servetrace sim --fail-rate 0.01 --reset-rate 0.01 --stall-rate 0.01 --stall-for 3s --seed 7`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "addr", Value: "127.0.0.1:8000", Usage: "listen address (loopback unless --allow-remote)"},
			&cli.BoolFlag{Name: "allow-remote", Usage: "allow a non-loopback --addr"},
			&cli.StringFlag{Name: "models", Value: strings.Join(def.Models, ","), Usage: "comma-separated model names to serve"},
			&cli.StringFlag{Name: "tokenizer", Value: def.Tokenizer, Usage: "prompt tokenizer: " + strings.Join(tokenize.Encodings, "|")},
			&cli.StringFlag{Name: "preset", Value: def.Preset, Usage: "engine constants: " + strings.Join(presetNames, "|")},
			&cli.DurationFlag{Name: "iter-base", Usage: "fixed cost of an iteration (default: the preset's)"},
			&cli.DurationFlag{Name: "prefill-per-token", Usage: "cost per prefilled prompt token (default: the preset's)"},
			&cli.DurationFlag{Name: "decode-per-seq", Usage: "cost per decoding sequence (default: the preset's)"},
			&cli.DurationFlag{Name: "kv-per-token", Usage: "cost per KV token read by decodes (default: the preset's)"},
			&cli.IntFlag{Name: "max-num-batched-tokens", Usage: "token budget of an iteration (default: the preset's)"},
			&cli.IntFlag{Name: "max-num-seqs", Usage: "most sequences running at once (default: the preset's)"},
			&cli.IntFlag{Name: "kv-blocks", Usage: "KV-cache blocks (default: the preset's)"},
			&cli.IntFlag{Name: "block-size", Usage: "tokens per KV block (default: the preset's)"},
			&cli.IntFlag{Name: "max-waiting", Usage: "waiting-queue bound; past it 429 (default: the preset's)"},
			&cli.BoolFlag{Name: "no-prefix-caching", Usage: "disable prefix caching"},
			&cli.IntFlag{Name: "max-model-len", Usage: "longest prompt+output accepted, longer gets 400 (default: the preset's)"},
			&cli.IntFlag{Name: "tokens-per-chunk", Value: 1, Usage: "tokens per streamed event (more emulates speculative decoding)"},
			&cli.Float64Flag{Name: "reasoning-ratio", Usage: "share of chat output sent as reasoning_content first"},
			&cli.Float64Flag{Name: "stop-rate", Usage: "share of requests that stop early (finish_reason stop) unless forced"},
			&cli.Float64Flag{Name: "fail-rate", Usage: "share of requests answered with HTTP 500 before the first byte"},
			&cli.Float64Flag{Name: "stream-error-rate", Usage: "share of streams that break off with an error event"},
			&cli.Float64Flag{Name: "reset-rate", Usage: "share of streams whose connection is reset half way"},
			&cli.Float64Flag{Name: "stall-rate", Usage: "share of streams that stall half way for --stall-for"},
			&cli.DurationFlag{Name: "stall-for", Value: def.StallFor, Usage: "length of an injected stall"},
			&cli.Float64Flag{Name: "malformed-rate", Usage: "share of streams that send a malformed SSE line half way"},
			&cli.Float64Flag{Name: "slow-first-byte-rate", Usage: "share of requests whose response headers are delayed by --slow-first-byte-for"},
			&cli.DurationFlag{Name: "slow-first-byte-for", Value: def.SlowFirstByteFor, Usage: "delay of a slow first byte"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed for fault injection, early stops and generated text"},
			&cli.Int64Flag{Name: "gc-memory-limit", Value: 1 << 30, Usage: "collect garbage only when the heap reaches this many bytes, so GC does not stall engine iterations (0: Go's default)"},
		},
		Action: func(c *cli.Context) error {
			sim.LatencyGC(c.Int64("gc-memory-limit"))
			opts, err := simOptions(c)
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			s, err := sim.New(opts)
			if err != nil {
				return err
			}
			rs, err := s.Start(c.String("addr"), c.Bool("allow-remote"))
			if err != nil {
				s.Close()
				return err
			}
			fmt.Fprintf(c.App.Writer, "servetrace sim serving %s at %s, preset %s (Ctrl-C to stop)\n", c.String("models"), rs.URL, opts.Preset)
			go func() { <-c.Context.Done(); rs.Close() }()
			return rs.Wait()
		},
		Subcommands: []*cli.Command{simCalibrateCmd()},
	}
}

func simCalibrateCmd() *cli.Command {
	return &cli.Command{
		Name:      "calibrate",
		Usage:     "fit the simulator's cost model to a replay against a real endpoint",
		ArgsUsage: "RUN_DIR",
		Description: `Fits the engine cost model to a run: TTFT of requests that had the server to
themselves against their prompt tokens (prefill cost per token), and token gaps
with a steady batch against the batch size and the KV tokens it reads
(iteration base, cost per decoding sequence, per KV token). The run should hold
some requests spaced apart, of several prompt sizes, and bursts of concurrent
streams of several sizes, streamed with one token per event (--ignore-eos helps).
Prints the constants and the sim command line that reproduces them.

Example:
   servetrace replay probes --target http://gpu-box:8000 --ignore-eos --out runs/probe
   servetrace sim calibrate runs/probe --out my-server.json`,
		Flags: []cli.Flag{outFlag("write the calibration as JSON to this file", false)},
		Action: func(c *cli.Context) error {
			if err := needArgs(c, 1, "RUN_DIR"); err != nil {
				return err
			}
			if _, err := trace.ReadRunInfo(c.Args().First()); err != nil {
				return err
			}
			rows, err := trace.ReadResults(c.Args().First())
			if err != nil {
				return err
			}
			cal, err := sim.Calibrate(rows)
			if err != nil {
				return err
			}
			k := cal.Cost
			fmt.Fprintf(c.App.Writer, "iteration base %v, prefill %v/token (R² %.3f, %d requests), decode %v/sequence, KV read %v/token (R² %.3f, %d token gaps)\n",
				k.IterBase, k.PerPrefillToken, cal.PrefillR2, cal.PrefillSamples, k.PerDecodeSeq, k.PerKVToken, cal.DecodeR2, cal.DecodeSamples)
			for _, n := range cal.Notes {
				fmt.Fprintln(c.App.Writer, "note: "+n)
			}
			fmt.Fprintf(c.App.Writer, "simulate it: servetrace sim --iter-base %v --prefill-per-token %v --decode-per-seq %v --kv-per-token %v\n",
				k.IterBase.Round(time.Microsecond), k.PerPrefillToken.Round(100*time.Nanosecond), k.PerDecodeSeq.Round(100*time.Nanosecond), k.PerKVToken)
			if out := c.String("out"); out != "" {
				return trace.WriteJSONAtomic(out, cal)
			}
			return nil
		},
	}
}

// simOptions starts from the preset and applies every flag that was set.
func simOptions(c *cli.Context) (sim.Options, error) {
	o := sim.DefaultOptions()
	p, err := sim.LookupPreset(c.String("preset"))
	if err != nil {
		return o, err
	}
	o.Preset, o.Engine, o.MaxModelLen = p.Name, p.Engine, p.MaxModelLen
	o.Models, o.Tokenizer = strings.Split(c.String("models"), ","), c.String("tokenizer")
	e := &o.Engine
	setDur := func(name string, dst *time.Duration) {
		if c.IsSet(name) {
			*dst = c.Duration(name)
		}
	}
	setInt := func(name string, dst *int) {
		if c.IsSet(name) {
			*dst = c.Int(name)
		}
	}
	setDur("iter-base", &e.Cost.IterBase)
	setDur("prefill-per-token", &e.Cost.PerPrefillToken)
	setDur("decode-per-seq", &e.Cost.PerDecodeSeq)
	setDur("kv-per-token", &e.Cost.PerKVToken)
	setInt("max-num-batched-tokens", &e.MaxNumBatchedTokens)
	setInt("max-num-seqs", &e.MaxNumSeqs)
	setInt("kv-blocks", &e.KVBlocks)
	setInt("block-size", &e.BlockSize)
	setInt("max-waiting", &e.MaxWaiting)
	setInt("max-model-len", &o.MaxModelLen)
	if c.Bool("no-prefix-caching") {
		e.PrefixCaching = false
	}
	o.TokensPerChunk, o.ReasoningRatio, o.StopRate = c.Int("tokens-per-chunk"), c.Float64("reasoning-ratio"), c.Float64("stop-rate")
	o.FailRate, o.StreamErrorRate, o.ResetRate = c.Float64("fail-rate"), c.Float64("stream-error-rate"), c.Float64("reset-rate")
	o.StallRate, o.StallFor, o.MalformedRate = c.Float64("stall-rate"), c.Duration("stall-for"), c.Float64("malformed-rate")
	o.SlowFirstByteRate, o.SlowFirstByteFor, o.Seed = c.Float64("slow-first-byte-rate"), c.Duration("slow-first-byte-for"), c.Uint64("seed")
	return o, nil
}

func analyzeCmd() *cli.Command {
	return &cli.Command{
		Name:      "analyze",
		Usage:     "report latency, throughput and outcomes of one or more runs",
		ArgsUsage: "RUN_DIR|VLLM_RESULT.json...",
		Description: `Every percentile comes with its sample count, a 95% distribution-free
interval from order statistics (a bound the sample cannot give is shown as —)
and, for per-request metrics, a 95% bootstrap interval: moving blocks of
requests when latencies are correlated in time, seeded and reproducible. The
notes say how many samples a tail percentile would need for --precision.
Several run directories are pooled. A vllm bench serve result saved with
--save-result --save-detailed can be given instead of a run directory, so a
vLLM run gets the same intervals.

Example:
   servetrace analyze runs/a
   servetrace analyze runs/a --json --percentiles 50,99,99.9 --ttft-mode first-chunk
   servetrace analyze runs/a --slo ttft=800ms,tpot=50ms`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON (same as --format json)"},
			&cli.BoolFlag{Name: "markdown", Usage: "print the report as Markdown (same as --format markdown)"},
			&cli.StringFlag{Name: "format", Value: "table", Usage: "table|json|markdown|vllm (vllm: the JSON field names of vllm bench serve results)"},
			&cli.StringFlag{Name: "ttft-mode", Value: analyze.TTFTFirstContent, Usage: "first-content|first-chunk (first-chunk counts a role-only chunk, as vllm bench does)"},
			&cli.StringFlag{Name: "percentiles", Value: "50,90,95,99,99.9", Usage: "comma-separated percentiles"},
			&cli.IntFlag{Name: "resamples", Value: 2000, Usage: "bootstrap replicates per metric"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "bootstrap seed (same seed, same intervals)"},
			&cli.StringFlag{Name: "block", Value: "auto", Usage: "bootstrap block length in requests: auto (from the autocorrelation) or N (1 = independent)"},
			&cli.Float64Flag{Name: "precision", Value: 0.05, Usage: "target relative half-width for the 'samples needed' figures"},
			&cli.StringFlag{Name: "slo", Usage: "objectives for goodput, e.g. ttft=800ms,tpot=50ms,e2e=10s"},
			&cli.StringFlag{Name: "by", Usage: "breakdowns, comma-separated: " + strings.Join(analyze.Dimensions, ", ")},
			&cli.DurationFlag{Name: "stall", Value: analyze.DefaultStall, Usage: "a gap between token events above this is a stall"},
			&cli.DurationFlag{Name: "window", Usage: "add a time series in windows of this length (e.g. 10s), with regions and recovery"},
			&cli.StringFlag{Name: "html", Usage: "also write a self-contained HTML report with plots to this file"},
			&cli.StringFlag{Name: "vs-logged", Usage: "compare replayed TTFT/E2E with those the source trace logged for the same requests: auto (run.json's workload) or a trace bucket path"},
		},
		Action: func(c *cli.Context) error {
			if err := needArgs(c, 1, "RUN_DIR"); err != nil {
				return err
			}
			pcts, err := parsePercentiles(c.String("percentiles"))
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			block := analyze.BlockAuto
			if b := c.String("block"); b != "auto" {
				n, err := strconv.Atoi(b)
				if err != nil || n < 1 {
					return cli.Exit(fmt.Sprintf("--block %q: use auto or a positive number of requests", b), 2)
				}
				block = n
			}
			if f := c.String("format"); !slices.Contains([]string{"table", "json", "markdown", "vllm"}, f) {
				return cli.Exit(fmt.Sprintf("--format %q: use table, json, markdown or vllm", f), 2)
			}
			if c.Duration("stall") <= 0 || c.Duration("window") < 0 {
				return cli.Exit("--stall must be positive and --window not negative, e.g. --stall 500ms --window 10s", 2)
			}
			if c.Int("resamples") < 100 || c.Float64("precision") <= 0 || c.Float64("precision") >= 1 {
				return cli.Exit("--resamples must be at least 100 and --precision within (0, 1), e.g. --precision 0.05", 2)
			}
			slo, err := analyze.ParseSLO(c.String("slo"))
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			rep, err := analyze.Analyze(c.Args().Slice(), analyze.Options{TTFTMode: c.String("ttft-mode"), Percentiles: pcts,
				Bootstrap: analyze.BootstrapOptions{Resamples: c.Int("resamples"), Seed: c.Uint64("seed"), Block: block}, Precision: c.Float64("precision"),
				SLO: slo, Stall: c.Duration("stall"), By: splitList(c.String("by")), Window: c.Duration("window"), Curves: c.String("html") != "", VsLogged: c.String("vs-logged")})
			if err != nil {
				return err
			}
			if path := c.String("html"); path != "" {
				if err := writeHTMLReport(path, rep); err != nil {
					return err
				}
				fmt.Fprintf(c.App.ErrWriter, "wrote %s\n", path)
			}
			format := c.String("format")
			if c.Bool("json") {
				format = "json"
			}
			if c.Bool("markdown") {
				format = "markdown"
			}
			enc := json.NewEncoder(c.App.Writer)
			enc.SetIndent("", "  ")
			switch format {
			case "json":
				return enc.Encode(rep)
			case "vllm":
				return enc.Encode(analyze.VLLMFormat(rep))
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

func datasetsCmd() *cli.Command {
	return &cli.Command{
		Name:  "datasets",
		Usage: "list the bundled sample traces",
		Subcommands: []*cli.Command{{
			Name:  "list",
			Usage: "show name, rows, licence and citation of each bundled trace",
			Action: func(c *cli.Context) error {
				for _, d := range datasets.Bundled() {
					fmt.Fprintf(c.App.Writer, "%s\n  %s\n  rows: %d   format: %s   licence: %s\n  cite: %s\n\n", d.Name, d.Description, d.Rows(), d.Format, d.Licence, d.Citation)
				}
				fmt.Fprintln(c.App.Writer, "convert one with: servetrace convert NAME --out DIR")
				return nil
			},
		}},
	}
}

// isTerminal reports whether f is a character device (a TTY).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

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

Example:
   servetrace analyze compare runs/base runs/new --testing config`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the comparison as JSON"},
			&cli.Float64Flag{Name: "confidence", Value: 0.95, Usage: "confidence of intervals and verdicts (family-wise)"},
			&cli.StringFlag{Name: "testing", Usage: "the run.json label under test (set with replay --label KEY=VALUE); it may differ between the sides"},
			&cli.StringFlag{Name: "ttft-mode", Value: analyze.TTFTFirstContent, Usage: "first-content|first-chunk"},
			&cli.IntFlag{Name: "resamples", Value: 2000, Usage: "bootstrap replicates per metric"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "bootstrap seed"},
			&cli.Float64Flag{Name: "max-ks", Value: 0.05, Usage: "largest token-distribution KS distance still comparable"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return cli.Exit(fmt.Sprintf("compare: want two sides A and B, got %d argument(s) (see 'servetrace analyze compare --help')", c.NArg()), 2)
			}
			if c.Int("resamples") < 100 {
				return cli.Exit("--resamples must be at least 100", 2)
			}
			a, err := runDirList(c.Args().Get(0))
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			b, err := runDirList(c.Args().Get(1))
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			res, err := analyze.Compare(a, b, analyze.CompareOptions{TTFTMode: c.String("ttft-mode"), Confidence: c.Float64("confidence"),
				Bootstrap: analyze.BootstrapOptions{Resamples: c.Int("resamples"), Seed: c.Uint64("seed")}, Testing: c.String("testing"), MaxKS: c.Float64("max-ks")})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			return analyze.WriteComparisonTable(c.App.Writer, res)
		},
	}
}

// runDirList expands one side of a comparison: a run directory, a
// comma-separated list of them, or a directory of run directories.
func runDirList(arg string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(arg, ",") {
		if p == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(p, "run.json")); err == nil {
			out = append(out, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("%s: not a run directory (no run.json) and not readable as a directory of runs: %w", p, err)
		}
		found := 0
		for _, e := range entries {
			if _, err := os.Stat(filepath.Join(p, e.Name(), "run.json")); e.IsDir() && err == nil {
				out = append(out, filepath.Join(p, e.Name()))
				found++
			}
		}
		if found == 0 {
			return nil, fmt.Errorf("%s: no run.json in it or in its subdirectories: give a run directory written by servetrace replay", p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q names no run directory", arg)
	}
	return out, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// writeHTMLReport renders the report's plots and writes the page to path
// through a temporary file, so a failure never leaves half a page.
func writeHTMLReport(path string, rep *analyze.Report) error {
	figs, err := analyze.Figures(rep)
	if err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	if err := trace.WriteFileAtomic(path, func(w io.Writer) error { return analyze.WriteHTML(w, rep, figs) }); err != nil {
		return fmt.Errorf("--html %s: %w", path, err)
	}
	return nil
}

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
			&cli.StringFlag{Name: "ttft-mode", Value: analyze.TTFTFirstContent, Usage: "first-content|first-chunk"},
			&cli.StringFlag{Name: "html", Usage: "also write a self-contained HTML page with the envelope plot"},
		},
		Action: func(c *cli.Context) error {
			if err := needArgs(c, 1, "RUN_DIR"); err != nil {
				return err
			}
			slo, err := analyze.ParseSLO(c.String("slo"))
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			var dirs []string
			for _, a := range c.Args().Slice() {
				d, err := runDirList(a)
				if err != nil {
					return cli.Exit(err.Error(), 2)
				}
				dirs = append(dirs, d...)
			}
			env, err := analyze.AnalyzeEnvelope(dirs, analyze.EnvelopeOptions{Options: analyze.Options{SLO: slo, TTFTMode: c.String("ttft-mode")},
				Attainment: c.Float64("attainment")})
			if err != nil {
				return err
			}
			if path := c.String("html"); path != "" {
				figs, err := analyze.EnvelopeFigures(env)
				if err != nil {
					return fmt.Errorf("--html: %w", err)
				}
				var text strings.Builder
				analyze.WriteEnvelopeTable(&text, env)
				if err := trace.WriteFileAtomic(path, func(w io.Writer) error {
					return analyze.WriteFigurePage(w, "servetrace service envelope", text.String(), figs)
				}); err != nil {
					return fmt.Errorf("--html %s: %w", path, err)
				}
				fmt.Fprintf(c.App.ErrWriter, "wrote %s\n", path)
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(env)
			}
			return analyze.WriteEnvelopeTable(c.App.Writer, env)
		},
	}
}

// logOptions reads the request-log flags of convert.
func logOptions(c *cli.Context) (datasets.LogOptions, error) {
	mapping, err := datasets.LoadMapping(c.String("map"))
	if err != nil {
		return datasets.LogOptions{}, err
	}
	salt, err := anon.LoadSalt(c.String("salt-file"))
	if err != nil {
		return datasets.LogOptions{}, err
	}
	tok, err := tokenize.Open(c.String("tokenizer"), "")
	if err != nil {
		return datasets.LogOptions{}, fmt.Errorf("--tokenizer: %w", err)
	}
	if c.Int("block-size") < 1 {
		return datasets.LogOptions{}, fmt.Errorf("--block-size %d: use a positive number of tokens, e.g. 512", c.Int("block-size"))
	}
	return datasets.LogOptions{Mapping: mapping, Salt: salt, Tokenizer: tok, BlockSize: c.Int("block-size"), SessionIdle: c.Duration("session-idle"),
		HashNames: c.Bool("hash-names"), MaxDisorder: c.Duration("max-disorder")}, nil
}

func exportCmd() *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "write a trace bucket in a public trace format (Azure CSV, Mooncake JSONL, vLLM bench custom)",
		ArgsUsage: "BUCKET",
		Description: `Writes the bucket's rows, in arrival order, as an Azure LLM trace CSV
(TIMESTAMP,ContextTokens,GeneratedTokens) or Mooncake JSONL (timestamp in ms
from the bucket's anchor, lengths, hash_ids). --dense-ids renumbers prefix
block ids 0, 1, 2... by first appearance, as Mooncake's traces are, so a
bucket converted from logs (salted 64-bit ids) can feed tools that expect
Mooncake's ids. vllm-custom writes the JSONL dataset of 'vllm bench serve
--dataset-name custom' ({"prompt": ..., "output_tokens": N}): synthetic
prompts of each row's input length in --tokenizer's tokens, rows that share
prefix blocks sharing their leading text.

Example:
   servetrace export traces/mine --format mooncake --dense-ids --out mine.jsonl`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Required: true, Usage: strings.Join(datasets.ExportFormats, "|")},
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "file to write (default: standard output)"},
			&cli.BoolFlag{Name: "dense-ids", Usage: "renumber prefix block ids by first appearance (Mooncake style)"},
			&cli.IntFlag{Name: "max-dense-ids", Value: datasets.DefaultMaxDenseIDs, Usage: "bound on the dense-id map; older ids seen again get new numbers"},
			&cli.StringFlag{Name: "tokenizer", Value: "cl100k_base", Usage: "vllm-custom: tokenizer the prompts are sized for (match the server's)"},
		},
		Action: func(c *cli.Context) error {
			if err := needArgs(c, 1, "BUCKET"); err != nil {
				return err
			}
			if f := c.String("format"); !slices.Contains(datasets.ExportFormats, f) {
				return cli.Exit(fmt.Sprintf("--format %q: use %s", f, strings.Join(datasets.ExportFormats, " or ")), 2)
			}
			o := datasets.ExportOptions{DenseIDs: c.Bool("dense-ids"), MaxDenseIDs: c.Int("max-dense-ids"), Tokenizer: c.String("tokenizer")}
			if path := c.String("out"); path != "" {
				var n int64
				err := trace.WriteFileAtomic(path, func(w io.Writer) error {
					var err error
					n, err = datasets.Export(c.Context, c.Args().First(), w, c.String("format"), o)
					return err
				})
				if err != nil {
					return fmt.Errorf("export to %s: %w", path, err)
				}
				fmt.Fprintf(c.App.ErrWriter, "wrote %d rows to %s\n", n, path)
				return nil
			}
			_, err := datasets.Export(c.Context, c.Args().First(), c.App.Writer, c.String("format"), o)
			return err
		},
	}
}
