package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/analyze"
	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/internal/regfile"
	"github.com/servetrace/servetrace/replay"
	"github.com/servetrace/servetrace/replay/pacing"
	"github.com/servetrace/servetrace/replay/probe"
	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/sweep"
	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
)

func replayCmd() *cli.Command {
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
		Flags: append([]cli.Flag{outFlag("run directory to write", true)}, replayFlags()...),
		Action: func(c *cli.Context) error {
			if err := needArgs(c, 1, "WORKLOAD"); err != nil {
				return err
			}
			opts, err := replayOptions(c)
			if err != nil {
				return usageError(inFlags(c.App, err).Error())
			}
			defer pacing.TuneProcess()() // this process only replays
			info, err := replay.Run(c.Context, c.Args().First(), c.String("out"), opts)
			if err != nil {
				return inFlags(c.App, err)
			}
			if err := printRunSummary(c.App.Writer, c.String("out"), info); err != nil {
				return err
			}
			if !info.Complete {
				// The partial results are valid and analyzable, but a script
				// must not mistake an interrupted run for a complete one.
				return cli.Exit(fmt.Sprintf("replay incomplete (%s); partial results in %s", info.Reason, c.String("out")), exitInterrupted)
			}
			return nil
		},
	}
}

// replayFlags are replay's flags but --out; sweep shares those a step
// does not set itself.
func replayFlags() []cli.Flag {
	def := replay.DefaultOptions()
	return []cli.Flag{
		&cli.StringFlag{Name: "target", Value: "http://127.0.0.1:8000", Usage: "endpoint base URL"},
		&cli.StringFlag{Name: "model", Usage: "model name for every request (default: the workload's, else the endpoint's first)"},
		&cli.StringFlag{Name: "model-map", Usage: "rename the workload's models: a=b,c=d"},
		&cli.StringFlag{Name: "api", Usage: "force chat|completions (default: each request's api)"},
		&cli.StringFlag{Name: "stream", Value: "auto", Usage: "auto|true|false: force streaming on or off"},
		&cli.Float64Flag{Name: "speed", Value: def.Speed, Usage: "time scale of the workload's timing: 2 replays twice as fast"},
		&cli.Float64Flag{Name: "rate", Usage: "replace the workload's timing with RATE requests/s"},
		&cli.StringFlag{Name: "arrival", Value: string(def.Arrival), Usage: "with --rate: poisson|gamma|constant"},
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
		&cli.StringFlag{Name: "strip", Usage: "never send these features, on purpose (counted as stripped): " + strings.Join(replay.Features, ",")},
		&cli.StringFlag{Name: "image-transport", Value: replay.ImageTransportData, Usage: "send images as base64 data URIs (data) or as URLs of a loopback image server replay starts (url; the target must run on this host)"},
		&cli.StringFlag{Name: "image-format", Value: "png", Usage: "synthetic image format: png|jpeg"},
		&cli.BoolFlag{Name: "guided-decoding", Usage: "send JSON schemas, regexes, grammars and choices as vLLM's older guided_json/guided_regex/... (before vLLM 0.12) instead of response_format and structured_outputs"},
		&cli.StringFlag{Name: "adapter-map", Usage: "rename the workload's LoRA adapters to the server's: a=b,c=d"},
		&cli.StringFlag{Name: "adapters", Usage: "the server's LoRA adapters a,b,c: assigned to the workload's adapters by popularity rank (the most requested gets a)"},
		&cli.BoolFlag{Name: "ignore-eos", Usage: "send ignore_eos (vLLM, SGLang, the simulator; OpenAI rejects it)"},
		&cli.BoolFlag{Name: "force-output-len", Usage: "send ignore_eos and min_tokens = max_tokens, so outputs have the workload's length"},
		&cli.StringFlag{Name: "http", Value: "1.1", Usage: "HTTP version: 1.1|2 (2 over http:// is h2 by prior knowledge)"},
		&cli.BoolFlag{Name: "follow-redirects", Usage: "follow a redirect within the target's origin (same scheme, host and port), without the API key and --header values; by default, and to another origin, a redirect is recorded http_error"},
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
		&cli.StringSliceFlag{Name: "metrics-url", Usage: "a Prometheus endpoint scraped before, during and after the run: URL (the engine's), or ROLE=URL with role engine, gpu (a DCGM exporter) or node; repeatable"},
		&cli.DurationFlag{Name: "metrics-interval", Value: def.MetricsInterval, Usage: "scrape interval for --metrics-url"},
		&cli.DurationFlag{Name: "wait-idle", Usage: "with an engine --metrics-url: wait up to this long for no running or waiting requests before starting"},
		&cli.StringSliceFlag{Name: "label", Usage: "key=value recorded in run.json (repeatable)"},
		&cli.StringFlag{Name: "serve-metrics", Usage: "serve the replayer's own Prometheus metrics at ADDR/metrics during the run (e.g. 127.0.0.1:9464)"},
		&cli.StringFlag{Name: "collect-spans", Usage: "receive the server's request spans over OTLP (gRPC and HTTP /v1/traces) at HOST:PORT (no host: 127.0.0.1) and write their phases (queue, prefill, decode) to the run dir; point the engine there (vLLM: --otlp-traces-endpoint http://HOST:PORT)"},
		&cli.Float64Flag{Name: "probes", Usage: "share of requests beside which a probe is sent at the same time: a request whose answer is graded exactly (copying words, arithmetic, sorting, a JSON field), so the run says whether answers stayed right under load; probes add that share of load"},
		&cli.StringFlag{Name: "probes-file", Usage: "your own probes, JSONL: {\"prompt\", \"expected\", \"grader\": exact|regex|json-field, \"field\", \"max_tokens\"} a line, sent instead of generated ones (with --probes)"},
		&cli.StringFlag{Name: "salt-file", Usage: "file holding the salt (hex or base64, at least 128 bits) that keys each answer's fingerprint; default $" + anon.SaltEnv + ", else random (then no other run's answers compare with this one's)"},
		&cli.BoolFlag{Name: "allow-remote-spans", Usage: "let --collect-spans listen on an address other than loopback (its receiver takes spans from any host that reaches it)"},
		&cli.DurationFlag{Name: "spans-wait", Value: 10 * time.Second, Usage: "how long the run's end waits for the server's last spans (engines export in batches)"},
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
	modelMap, err := replay.ParseKeyValues(c.String("model-map"))
	if err != nil {
		return replay.Options{}, fmt.Errorf("--model-map: %w", err)
	}
	adapterMap, err := replay.ParseKeyValues(c.String("adapter-map"))
	if err != nil {
		return replay.Options{}, fmt.Errorf("--adapter-map: %w", err)
	}
	labels := map[string]string{}
	for _, l := range c.StringSlice("label") {
		kv, err := replay.ParseKeyValues(l)
		if err != nil {
			return replay.Options{}, fmt.Errorf("--label: %w", err)
		}
		maps.Copy(labels, kv)
	}
	headers := map[string]string{}
	for _, h := range c.StringSlice("header") {
		kv, err := replay.ParseKeyValues(h)
		if err != nil {
			// The entry may hold the secret: it is not shown.
			return replay.Options{}, errors.New("--header: an entry is not Name=value (it is not shown: it may hold a secret)")
		}
		maps.Copy(headers, kv)
	}
	var userProbes []probe.Probe
	if f := c.String("probes-file"); f != "" {
		if c.Float64("probes") == 0 {
			return replay.Options{}, errors.New("--probes-file: give --probes SHARE too, the share of requests a probe goes beside")
		}
		if userProbes, err = probe.ReadFile(f); err != nil {
			return replay.Options{}, fmt.Errorf("--probes-file: %w", err)
		}
	}
	salt, err := loadSalt(c.String("salt-file"))
	if err != nil {
		return replay.Options{}, fmt.Errorf("--salt-file: %w", err)
	}
	o := replay.Options{
		Endpoint: replay.Endpoint{Target: c.String("target"), APIKey: key, Headers: headers,
			HTTP: replay.HTTPVersion(c.String("http")), CACert: c.String("ca-cert"), Insecure: c.Bool("insecure"), FollowRedirects: c.Bool("follow-redirects")},
		Requests: replay.Requests{Model: c.String("model"), ModelMap: modelMap, API: c.String("api"), Stream: replay.StreamMode(c.String("stream")),
			Strip: splitList(c.String("strip")), ImageTransport: c.String("image-transport"), ImageFormat: c.String("image-format"),
			GuidedDecoding: c.Bool("guided-decoding"), AdapterMap: adapterMap, Adapters: splitList(c.String("adapters")),
			IgnoreEOS: c.Bool("ignore-eos"), ForceOutputLen: c.Bool("force-output-len"), Tokenizer: c.String("tokenizer"), TokenizerPattern: c.String("tokenizer-pattern"),
			Probes: c.Float64("probes"), UserProbes: userProbes},
		Schedule: replay.Schedule{Speed: c.Float64("speed"), Rate: c.Float64("rate"), Arrival: replay.Arrival(c.String("arrival")), Burstiness: c.Float64("burstiness"), Seed: c.Uint64("seed"),
			Concurrency: c.Int("concurrency"), MaxConcurrency: c.Int("max-concurrency"),
			From: c.String("from"), To: c.String("to"), LeadIn: c.Duration("lead-in"),
			Duration: c.Duration("duration"), MaxRequests: c.Int("max-requests"), WarmupDuration: warmDur, WarmupRequests: warmN},
		Limits: replay.Limits{ConnectTimeout: c.Duration("connect-timeout"), FirstTokenTimeout: c.Duration("first-token-timeout"), Timeout: c.Duration("timeout"),
			Grace: c.Duration("grace"), MaxLateness: c.Duration("max-lateness")},
		Watch: replay.Watch{WaitReady: c.Duration("wait-ready"), MetricsInterval: c.Duration("metrics-interval"),
			WaitIdle: c.Duration("wait-idle"), ServeMetrics: c.String("serve-metrics"),
			CollectSpans: c.String("collect-spans"), SpansWait: c.Duration("spans-wait"), AllowRemoteSpans: c.Bool("allow-remote-spans")},
		Output: replay.Output{RunID: c.String("run-id"), RotateEvery: c.Duration("rotate-every"), Labels: labels, OutputSalt: salt},
	}
	for _, v := range c.StringSlice("metrics-url") {
		ep, err := replay.ParseMetricsEndpoint(v)
		if err != nil {
			return replay.Options{}, fmt.Errorf("--metrics-url: %w", err)
		}
		o.Metrics = append(o.Metrics, ep)
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
		b, err := regfile.ReadFile(file, maxAPIKeyFileBytes)
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
	fmt.Fprintf(w, "; client lateness p99 %.2f ms", info.Lateness.P99Ms)
	if lw := info.LatenessToWire; lw != nil {
		fmt.Fprintf(w, " (%.2f ms to the wire)", lw.P99Ms)
	}
	if f := info.ClientFloor; f != nil {
		fmt.Fprintf(w, "; the client adds %.2f ms to a TTFT (p50 when idle; p90 %.2f)", f.P50Ms, f.P90Ms)
	}
	fmt.Fprintln(w)
	if info.ClientSaturated {
		fmt.Fprintf(w, "warning: the client was saturated (lateness p99 %.2f ms > %.2f ms): latencies may reflect the load generator\n", info.Lateness.P99Ms, info.MaxLatenessMs)
	}
	if pt := info.PromptTruncation; pt != nil {
		fmt.Fprintf(w, "warning: the server cut %d of %d prompts it counted (usage.prompt_tokens below the tokens sent by up to %d, median %d; more than max(%d tokens, %g%%) short): its context is shorter than the workload's prompts, and latencies are those of the cut prompts\n",
			pt.Requests, pt.Checked, pt.MaxDeficitTokens, pt.P50DeficitTokens, pt.ToleranceTokens, pt.TolerancePct)
	}
	if line := featuresLine(info.Features); line != "" {
		fmt.Fprintln(w, line)
	}
	for _, n := range info.Notes {
		fmt.Fprintln(w, "note: "+n)
	}
	return nil
}

// featuresLine says what the replay did with each feature the workload
// carried, in analyze's words, from run.json's counts.
func featuresLine(fs map[string]trace.FeatureCount) string {
	var us []analyze.FeatureUse
	for _, f := range replay.Features {
		if fc, ok := fs[f]; ok {
			us = append(us, analyze.FeatureUse{Feature: f, Carried: int(fc.Carried), Sent: int(fc.Sent), Stripped: int(fc.Stripped), Refused: int(fc.Refused)})
		}
	}
	return analyze.FeaturesText(us)
}

// optionFlags names the flag of each replay.Options and sim.Options field
// whose flag is not the field in kebab case (flagFor finds those).
var optionFlags = map[string]string{
	"Metrics":        "--metrics-url",
	"WarmupDuration": "--warmup", "WarmupRequests": "--warmup", "Warmup": "--warmup",
	"Headers": "--header", "Labels": "--label", "ShardCount": "--shard", "APIKey": "--api-key-env or --api-key-file",
	"PerPrefillToken": "--prefill-per-token", "PerDecodeSeq": "--decode-per-seq", "PerKVToken": "--kv-per-token",
}

// proseFields are option names also found in plain text ("HTTP 404"): a
// reason's mention of them is left as it is.
var proseFields = map[string]bool{"HTTP": true, "API": true}

// optionFields lists the fields of replay.Options, sim.Options and
// sweep.Options (nested structs too), the names a library error's reason
// may mention.
var optionFields = func() []string {
	var out []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			if !f.IsExported() {
				continue
			}
			out = append(out, f.Name)
			if f.Type.Kind() == reflect.Struct && f.Type.PkgPath() != "time" {
				walk(f.Type)
			}
		}
	}
	walk(reflect.TypeFor[replay.Options]())
	walk(reflect.TypeFor[sim.Options]())
	walk(reflect.TypeFor[sweep.Options]())
	return out
}()

// inFlags puts a replay or sim option error in the CLI's terms: its field,
// and every option its reason names, become flags ("Concurrency 4: runs
// closed loop; it does not combine with Rate" becomes "--concurrency 4:
// ... with --rate"). Any other error is returned as it is.
func inFlags(app *cli.App, err error) error {
	oe, ok := opterr.As(err)
	if !ok {
		return err
	}
	flag := func(field string) (string, bool) {
		if f, ok := optionFlags[field]; ok {
			return f, true
		}
		f := flagFor(app, field)
		return f, strings.HasPrefix(f, "--")
	}
	name, _ := flag(oe.Field)
	reason := oe.Reason
	for _, f := range optionFields {
		if fl, ok := flag(f); ok && !proseFields[f] && strings.Contains(reason, f) {
			reason = regexp.MustCompile(`\b`+f+`\b`).ReplaceAllLiteralString(reason, fl)
		}
	}
	if oe.Value == "" {
		return errors.New(name + ": " + reason)
	}
	return errors.New(name + " " + oe.Value + ": " + reason)
}
