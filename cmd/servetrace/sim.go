package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/tokenize"
	"github.com/servetrace/servetrace/trace"
)

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
requests the server answers 429, as it does, with a Retry-After, past 128 MiB
of request bodies being read and tokenized at once, 32 /tokenize requests at
once, or as many requests in progress as it serves connections (16384, fewer
under a low descriptor limit). A body must arrive within 60 s and a client
must take each write within 60 s, or its request is cut. --preset picks
constants for a public model/GPU pair (derived from spec sheets: see the docs); each flag overrides.
Fault flags inject errors so every client failure path can be tested.

Chat requests may carry images (data URIs, or URLs on loopback hosts),
WAV audio, tools, structured output, logprobs and n > 1; prompt tokens
count the text, each image and clip by its size, and the tools' JSON. Each
feature has a cost: images through the vision encoder (cached by content),
LoRA adapters (--lora-modules, served on the first model) loaded into
--max-loras slots, grammars compiled once and masks per token, logprobs
per token, and --spec-tokens draft tokens per decode step of which
--spec-acceptance are accepted. --refuse answers 400 to the features named,
in vLLM's words, to test a client against a server without them.

--otlp-traces-endpoint exports an OpenTelemetry span per finished request
there, as vLLM does: named llm_request, kind server, in the trace of the
request's W3C traceparent header (a new trace without one), with vLLM's
attributes (gen_ai.latency.time_in_queue, .time_to_first_token, .e2e,
.time_in_model_prefill, .time_in_model_decode, .time_in_model_inference in
seconds; gen_ai.usage.prompt_tokens, .completion_tokens; gen_ai.request.id,
the response id; .max_tokens, .n, .temperature, .top_p). The times come from
the engine's clock: queue is arrival to first scheduled, prefill to the first
token, decode to the last, and queue + prefill + decode is e2e exactly. The
endpoint is host:port or an http:// URL (http/protobuf: /v1/traces when it
has no path), without TLS; --otlp-traces-protocol, else
OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, picks grpc (default) or http/protobuf.
Spans are batched and flushed when the server stops.

Examples:
   servetrace sim --addr 127.0.0.1:8000 --preset qwen2.5-7b-a100
   servetrace sim --preset zero --tokens-per-chunk 4          # client benchmarks, speculative-style chunks
   servetrace sim --fail-rate 0.01 --reset-rate 0.01 --stall-rate 0.01 --stall-for 3s --seed 7
   servetrace sim --lora-modules sql-lora,chat-lora --max-loras 1 --spec-tokens 4 --spec-acceptance 0.7
   servetrace sim --refuse image,tools,json_schema
   servetrace sim --otlp-traces-endpoint 127.0.0.1:4317     # with replay --collect-spans 127.0.0.1:4317
   servetrace sim --corrupt-under-load 0.2 --corrupt-in-flight 8   # wrong answers once 8 requests are in the server`,
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
			&cli.DurationFlag{Name: "encoder-per-image-token", Usage: "vision encoder cost per image token, uncached images only (default: the preset's)"},
			&cli.DurationFlag{Name: "lora-load-cost", Usage: "cost of loading a LoRA adapter into a slot, stalling that iteration (default: the preset's)"},
			&cli.DurationFlag{Name: "lora-per-adapter", Usage: "cost per distinct LoRA adapter in an iteration (default: the preset's)"},
			&cli.DurationFlag{Name: "grammar-compile-cost", Usage: "structured-output compile time on a constraint's first use; the request waits (default: the preset's)"},
			&cli.DurationFlag{Name: "grammar-mask-per-token", Usage: "cost per token of a constrained sequence (default: the preset's)"},
			&cli.DurationFlag{Name: "logprobs-per-token", Usage: "cost per token of a sequence asking logprobs (default: the preset's)"},
			&cli.DurationFlag{Name: "draft-per-token", Usage: "cost per speculative draft token verified (default: the preset's)"},
			&cli.IntFlag{Name: "max-num-batched-tokens", Usage: "token budget of an iteration (default: the preset's)"},
			&cli.IntFlag{Name: "max-num-seqs", Usage: "most sequences running at once (default: the preset's)"},
			&cli.IntFlag{Name: "kv-blocks", Usage: "KV-cache blocks (default: the preset's)"},
			&cli.IntFlag{Name: "block-size", Usage: "tokens per KV block (default: the preset's)"},
			&cli.IntFlag{Name: "max-waiting", Usage: "waiting-queue bound; past it 429 (default: the preset's)"},
			&cli.BoolFlag{Name: "no-prefix-caching", Usage: "disable prefix caching"},
			&cli.IntFlag{Name: "max-model-len", Usage: "longest prompt+output accepted, longer gets 400 (default: the preset's)"},
			&cli.IntFlag{Name: "tokens-per-chunk", Value: 1, Usage: "tokens per streamed event (more emulates speculative decoding; --spec-tokens supersedes it)"},
			&cli.StringFlag{Name: "lora-modules", Usage: "comma-separated LoRA adapter names served on the first model (vLLM's name=path also read: the name is kept)"},
			&cli.IntFlag{Name: "max-loras", Usage: "LoRA adapter slots on the GPU, the most distinct adapters in a batch (default 1)"},
			&cli.IntFlag{Name: "spec-tokens", Usage: "speculative decoding: draft tokens proposed per decode step (0: off)"},
			&cli.Float64Flag{Name: "spec-acceptance", Value: def.SpecAcceptance, Usage: "speculative decoding: share of draft tokens accepted, as vLLM's counters report it"},
			&cli.StringFlag{Name: "refuse", Usage: "comma-separated features answered with 400 as vLLM words it: " + strings.Join(sim.RefusableFeatures, "|")},
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
			&cli.StringFlag{Name: "otlp-traces-endpoint", Usage: "export an llm_request span per finished request to this OTLP collector (host:port or http:// URL; empty: off)"},
			&cli.StringFlag{Name: "otlp-traces-protocol", Value: sim.OTLPGRPC, EnvVars: []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"}, Usage: "span export protocol: " + sim.OTLPGRPC + "|" + sim.OTLPHTTPProtobuf},
			&cli.Float64Flag{Name: "corrupt-under-load", Usage: "share of requests answered wrong on purpose (another answer of the same length) once --corrupt-in-flight requests are in the server: tests accuracy checks under load"},
			&cli.IntFlag{Name: "corrupt-in-flight", Usage: "requests in the server (running or waiting) from which --corrupt-under-load applies (0: always)"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed for fault injection, early stops and generated text (a greedy request's answer depends on it and its prompt alone)"},
			&cli.Int64Flag{Name: "gc-memory-limit", Value: 1 << 30, Usage: "collect garbage only when the heap reaches this many bytes, so GC does not stall engine iterations (0: Go's default)"},
		},
		Action: func(c *cli.Context) error {
			sim.LatencyGC(c.Int64("gc-memory-limit"))
			opts, err := simOptions(c)
			if err != nil {
				return usageError(simInFlags(c.App, err).Error())
			}
			s, err := sim.New(opts)
			if err != nil {
				return simInFlags(c.App, err)
			}
			rs, err := s.Start(c.String("addr"), c.Bool("allow-remote"))
			if err != nil {
				s.Close()
				if errors.Is(err, sim.ErrNotLoopback) {
					return fmt.Errorf("--addr %s is not a loopback address; pass --allow-remote to serve on another interface", c.String("addr"))
				}
				return fmt.Errorf("--addr %s: %w", c.String("addr"), err)
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
				if err := trace.CheckOutputPath(out, c.Args().Slice()); err != nil {
					return usageError("--out: " + err.Error())
				}
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
	o.Preset, o.Engine, o.MaxModelLen, o.GPU = p.Name, p.Engine, p.MaxModelLen, p.GPU
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
	setDur("encoder-per-image-token", &e.Cost.EncoderPerImageToken)
	setDur("lora-load-cost", &e.Cost.LoRALoadCost)
	setDur("lora-per-adapter", &e.Cost.LoRAPerAdapter)
	setDur("grammar-compile-cost", &e.Cost.GrammarCompileCost)
	setDur("grammar-mask-per-token", &e.Cost.GrammarMaskPerToken)
	setDur("logprobs-per-token", &e.Cost.LogprobsPerToken)
	setDur("draft-per-token", &e.Cost.PerDraftToken)
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
	for _, m := range splitList(c.String("lora-modules")) {
		name, _, _ := strings.Cut(m, "=") // vLLM's name=path
		o.LoRAModules = append(o.LoRAModules, name)
	}
	setInt("max-loras", &o.MaxLoRAs)
	o.SpecTokens, o.SpecAcceptance = c.Int("spec-tokens"), c.Float64("spec-acceptance")
	o.Refuse = splitList(c.String("refuse"))
	o.OTLPTracesEndpoint, o.OTLPProtocol = c.String("otlp-traces-endpoint"), c.String("otlp-traces-protocol")
	if p := o.OTLPProtocol; p != "" && p != sim.OTLPGRPC && p != sim.OTLPHTTPProtobuf { // "" (an empty variable): the default
		// Checked here to name the environment variable too: the value may come from either.
		return o, fmt.Errorf("--otlp-traces-protocol %q (or OTEL_EXPORTER_OTLP_TRACES_PROTOCOL): use %s or %s", p, sim.OTLPGRPC, sim.OTLPHTTPProtobuf)
	}
	o.CorruptShare, o.CorruptInFlight = c.Float64("corrupt-under-load"), c.Int("corrupt-in-flight")
	return o, nil
}

// simFlags names the flags of the sim.Options fields whose flag is not the
// field in kebab case.
var simFlags = map[string]string{"LoRAModules": "--lora-modules", "MaxLoRAs": "--max-loras", "LoRALoadCost": "--lora-load-cost",
	"LoRAPerAdapter": "--lora-per-adapter", "PerDraftToken": "--draft-per-token", "CorruptShare": "--corrupt-under-load",
	"OTLPTracesEndpoint": "--otlp-traces-endpoint", "OTLPProtocol": "--otlp-traces-protocol"}

// simInFlags is inFlags knowing the sim's own field-to-flag names.
func simInFlags(app *cli.App, err error) error {
	if oe, ok := opterr.As(err); ok {
		if f, ok := simFlags[oe.Field]; ok {
			if oe.Value == "" {
				return errors.New(f + ": " + oe.Reason)
			}
			return errors.New(f + " " + oe.Value + ": " + oe.Reason)
		}
	}
	return inFlags(app, err)
}
