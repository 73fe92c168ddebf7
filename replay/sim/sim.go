// Package sim is servetrace's built-in OpenAI-compatible inference server
// simulator: the default target of the demo and the tests. It speaks the
// real protocol over real HTTP (/v1/completions, /v1/chat/completions with
// SSE streaming and stream_options.include_usage, /v1/models, /tokenize in
// vLLM's shape, /health, /metrics with vLLM's metric names, /dcgm/metrics
// as NVIDIA's DCGM exporter serves it, from a power model) and runs a
// continuous-batching engine in real time: a waiting queue, iterations that
// batch decodes with chunked prefills under a token budget, a KV cache of
// blocks with prefix caching and LRU eviction, and preemption by recompute.
// Iteration durations come from a cost model (see CostModel and the
// presets). Chat requests may carry images, audio, tools, structured
// output, logprobs, n > 1 and a LoRA adapter as the model; each counts and
// costs as on a real server (see features.go), speculative decoding is
// modelled with vLLM's counters, and Options.Refuse makes the simulator
// refuse features as a server without them does. Faults can be injected
// per request, seeded, so every failure path of a client is testable.
package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/tokenize"
)

// Options configures a simulator. DefaultOptions gives the default preset;
// zero fields of the engine options take the preset's values in New.
type Options struct {
	// Models are the model names served; others get 404.
	Models []string
	// Tokenizer counts and hashes prompt tokens (default cl100k_base).
	Tokenizer string
	// Preset names the engine constants started from (see Presets).
	Preset string
	// Engine holds the batching engine's constants.
	Engine EngineOptions
	// GPU describes the simulated GPUs for /dcgm/metrics (Count 0: none).
	GPU GPUModel
	// MaxModelLen is the longest prompt+output accepted; longer gets 400.
	MaxModelLen int
	// DefaultMaxTokens is the output length when a request gives none.
	DefaultMaxTokens int
	// TokensPerChunk tokens are sent per streamed event (more than 1
	// emulates speculative decoding's bursts; SpecTokens, which models it,
	// supersedes this when set).
	TokensPerChunk int
	// ReasoningRatio is the share of each chat output sent as reasoning
	// deltas (reasoning_content) before the content.
	ReasoningRatio float64
	// TokenizerThreads bounds the prompts tokenized at once (default: the
	// processors, at least 2). A simulator sharing a process with the
	// client under test takes fewer, so that its tokenizing a long prompt
	// never holds every processor the client's sends wait for: Go preempts
	// a busy goroutine only after 10 ms. (The demo runs it in a process of
	// its own.)
	TokenizerThreads int
	// StopRate is the share of requests that stop early (finish_reason
	// "stop") at a uniform length, unless ignore_eos or min_tokens forbid.
	StopRate float64
	// CorruptShare is the share of requests answered wrong on purpose
	// (another answer of the same length) once CorruptInFlight or more
	// requests are in the server (running or waiting), so that a client's
	// accuracy checks under load can be tested (CorruptInFlight 0:
	// always). A greedy request's answer otherwise depends on its prompt
	// and Seed alone.
	CorruptShare    float64
	CorruptInFlight int

	// LoRAModules are LoRA adapter names served on the first of Models:
	// listed at /v1/models with it as "parent" (as vLLM lists them) and
	// accepted as a request's "model".
	LoRAModules []string
	// MaxLoRAs is how many adapters the GPU holds at once, and so the most
	// distinct adapters in one batch (vLLM's max_loras; 0 takes its
	// default, 1). See CostModel.LoRALoadCost for what a load costs.
	MaxLoRAs int
	// SpecTokens is the draft tokens proposed per decode step under
	// speculative decoding (0: off). Each step emits the accepted drafts
	// and one token of the target model's, in one streamed event.
	SpecTokens int
	// SpecAcceptance is the share of draft tokens accepted, as vLLM's
	// counters report it (accepted ÷ draft tokens): the simulator draws
	// each step's accepted drafts up to the first rejection, with the
	// per-draft probability that gives this share (see specAlpha).
	SpecAcceptance float64
	// Refuse names request features answered with HTTP 400 and vLLM's
	// message, to test a client against a server without them: "image",
	// "audio", "tools", "json" (json_object), "json_schema", "grammar"
	// (regex, grammar, choice), "logprobs", "n" (n > 1), "seed", and
	// "lora" (the adapters are not served: their names are unknown models).
	Refuse []string

	// OTLPTracesEndpoint, when set, makes the simulator export an
	// llm_request span per finished request there, as vLLM does with
	// --otlp-traces-endpoint: host:port, or an http:// URL (for
	// http/protobuf its path, /v1/traces when it has none), without TLS.
	// The span is in the trace of the request's traceparent header and
	// carries vLLM's attributes, timed by the engine's clock (see
	// Server.Phases). Close flushes the spans batched.
	OTLPTracesEndpoint string
	// OTLPProtocol is the export's protocol: "grpc" (the default, as
	// vLLM's) or "http/protobuf", the values of vLLM's
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL.
	OTLPProtocol string

	// Fault injection, each the share of requests it hits (seeded).
	FailRate          float64       // HTTP 500 before the first byte
	StreamErrorRate   float64       // an error object half way through a stream
	ResetRate         float64       // the connection reset half way through a stream
	StallRate         float64       // a stall of StallFor half way through a stream
	StallFor          time.Duration //
	MalformedRate     float64       // a malformed SSE line half way through a stream
	SlowFirstByteRate float64       // response headers delayed by SlowFirstByteFor
	SlowFirstByteFor  time.Duration //
	Seed              uint64
}

// RefusableFeatures are the names Options.Refuse takes.
var RefusableFeatures = []string{"image", "audio", "tools", "json", "json_schema", "grammar", "logprobs", "n", "seed", "lora"}

// maxSpecTokens bounds SpecTokens: drafts past a few dozen are all but
// never accepted, and each costs verification.
const maxSpecTokens = 64

// DefaultModel is the model name served when none is configured.
const DefaultModel = "servetrace-sim"

// DefaultOptions returns the default preset (Llama 3.1 8B on an H100).
func DefaultOptions() Options {
	p, _ := LookupPreset(DefaultPreset)
	return Options{Models: []string{DefaultModel}, Tokenizer: tokenize.DefaultEncoding, Preset: p.Name, Engine: p.Engine, GPU: p.GPU,
		MaxModelLen: p.MaxModelLen, DefaultMaxTokens: 256, TokensPerChunk: 1, MaxLoRAs: 1, SpecAcceptance: 0.7, StallFor: 2 * time.Second, SlowFirstByteFor: time.Second}
}

// Server is a simulator instance. Use Handler to mount it or Start to serve
// it on a loopback port; Close stops its engine.
type Server struct {
	opts     Options
	tok      *tokenize.Tokenizer
	words    *tokenize.PromptBuilder
	vocab    []string // distinct words of generated text, for top_logprobs
	models   map[string]bool
	adapters map[string]bool // LoRA adapters served (none when refused)
	refuse   map[string]bool
	// hashSeed keys the hashes of images and constraints (the encoder and
	// grammar caches' keys).
	hashSeed maphash.Seed
	// fetcher fetches image URLs, from loopback hosts only.
	fetcher *http.Client
	created int64
	engine  *engine
	metrics *simMetrics
	// tokenizing bounds concurrent prompt tokenization, as an API server's
	// tokenizer pool does: a burst of arrivals then waits parked instead of
	// crowding the run queue ahead of the engine loop.
	tokenizing chan struct{}
	// bodies bounds the request bodies, and fetched images, held at once
	// (see maxBodyBytesInFlight); tokenizeRequests the /tokenize requests
	// served at once, past which one is answered busy.
	bodies           *byteBudget
	tokenizeRequests chan struct{}
	// writeTimeout is streamWriteTimeout when the server was made.
	writeTimeout time.Duration
	// phases are the latest finished requests' phases (Phases), kept
	// while spans are exported; spans exports their llm_request spans;
	// both nil when off.
	phases *phaseLog
	spans  *spanExport

	closeOnce sync.Once
	closeErr  error // the span export's, from shutdown

	mu sync.Mutex
	// inFlight counts the requests being generated, for CorruptInFlight.
	inFlight   atomic.Int64
	rng        *rand.Rand // fault and early-stop draws
	corruptRNG *rand.Rand // CorruptShare's draws
	seq        uint64
}

// New builds a simulator and starts its engine.
func New(opts Options) (*Server, error) {
	def := DefaultOptions()
	if len(opts.Models) == 0 {
		opts.Models = def.Models
	}
	if opts.MaxModelLen <= 0 {
		opts.MaxModelLen = def.MaxModelLen
	}
	if opts.DefaultMaxTokens <= 0 {
		opts.DefaultMaxTokens = def.DefaultMaxTokens
	}
	if opts.TokensPerChunk <= 0 {
		opts.TokensPerChunk = 1
	}
	e := &opts.Engine
	if e.MaxNumBatchedTokens <= 0 {
		e.MaxNumBatchedTokens = def.Engine.MaxNumBatchedTokens
	}
	if e.MaxNumSeqs <= 0 {
		e.MaxNumSeqs = def.Engine.MaxNumSeqs
	}
	if e.KVBlocks <= 0 {
		e.KVBlocks = def.Engine.KVBlocks
	}
	if e.BlockSize <= 0 {
		e.BlockSize = def.Engine.BlockSize
	}
	if e.MaxWaiting <= 0 {
		e.MaxWaiting = def.Engine.MaxWaiting
	}
	for _, r := range []struct {
		field string
		v     float64
	}{{"FailRate", opts.FailRate}, {"StreamErrorRate", opts.StreamErrorRate}, {"ResetRate", opts.ResetRate}, {"StallRate", opts.StallRate},
		{"MalformedRate", opts.MalformedRate}, {"SlowFirstByteRate", opts.SlowFirstByteRate}, {"StopRate", opts.StopRate}, {"ReasoningRatio", opts.ReasoningRatio}, {"CorruptShare", opts.CorruptShare}} {
		if !(r.v >= 0 && r.v <= 1) { // NaN too
			return nil, opterr.New(r.field, r.v, "must be within [0, 1]")
		}
	}
	if opts.CorruptInFlight < 0 {
		return nil, opterr.New("CorruptInFlight", opts.CorruptInFlight, "must not be negative")
	}
	if opts.SpecTokens < 0 || opts.SpecTokens > maxSpecTokens {
		return nil, opterr.New("SpecTokens", opts.SpecTokens, "must be within [0, %d]", maxSpecTokens)
	}
	if !(opts.SpecAcceptance >= 0 && opts.SpecAcceptance <= 1) {
		return nil, opterr.New("SpecAcceptance", opts.SpecAcceptance, "must be within [0, 1]")
	}
	refuse := map[string]bool{}
	for _, f := range opts.Refuse {
		if !slices.Contains(RefusableFeatures, f) {
			return nil, opterr.New("Refuse", f, "unknown feature; use some of: %s", strings.Join(RefusableFeatures, ", "))
		}
		refuse[f] = true
	}
	if opts.MaxLoRAs < 0 {
		return nil, opterr.New("MaxLoRAs", opts.MaxLoRAs, "must not be negative")
	}
	if opts.TokenizerThreads < 0 {
		return nil, opterr.New("TokenizerThreads", opts.TokenizerThreads, "must not be negative")
	}
	if len(opts.LoRAModules) > 0 && opts.MaxLoRAs == 0 {
		opts.MaxLoRAs = 1
	}
	adapters := map[string]bool{}
	for _, a := range opts.LoRAModules {
		switch {
		case a == "":
			return nil, opterr.New("LoRAModules", a, "an adapter name must not be empty")
		case adapters[a] || slices.Contains(opts.Models, a):
			return nil, opterr.New("LoRAModules", a, "names an adapter twice, or a served model; each name must be unique")
		}
		adapters[a] = true
	}
	if refuse["lora"] {
		adapters = map[string]bool{}
	}
	if sum := opts.FailRate + opts.StreamErrorRate + opts.ResetRate + opts.StallRate + opts.MalformedRate; sum > 1 {
		return nil, opterr.New("FailRate", nil, "FailRate, StreamErrorRate, ResetRate, StallRate and MalformedRate add up to %.3g; a request gets at most one fault, so keep their sum within 1", sum)
	}
	c := e.Cost
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"IterBase", c.IterBase}, {"PerPrefillToken", c.PerPrefillToken}, {"PerDecodeSeq", c.PerDecodeSeq}, {"PerKVToken", c.PerKVToken},
		{"EncoderPerImageToken", c.EncoderPerImageToken}, {"LoRALoadCost", c.LoRALoadCost}, {"LoRAPerAdapter", c.LoRAPerAdapter},
		{"GrammarCompileCost", c.GrammarCompileCost}, {"GrammarMaskPerToken", c.GrammarMaskPerToken}, {"LogprobsPerToken", c.LogprobsPerToken},
		{"PerDraftToken", c.PerDraftToken}} {
		if d.v < 0 {
			return nil, opterr.New(d.field, d.v, "must not be negative")
		}
	}
	if opts.OTLPProtocol == "" {
		opts.OTLPProtocol = OTLPGRPC
	}
	if opts.OTLPProtocol != OTLPGRPC && opts.OTLPProtocol != OTLPHTTPProtobuf {
		return nil, opterr.New("OTLPProtocol", opts.OTLPProtocol, "use %s or %s, the protocols vLLM exports spans with", OTLPGRPC, OTLPHTTPProtobuf)
	}
	if g := opts.GPU; g.Count < 0 || g.IdleW < 0 || g.MaxW < g.IdleW || g.WeightsMiB < 0 || g.KVBlockMiB < 0 || g.MemoryMiB < 0 {
		return nil, opterr.New("GPU", nil, "needs Count ≥ 0, 0 ≤ IdleW ≤ MaxW and non-negative memory sizes")
	}
	tok, err := tokenize.Get(opts.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	words, err := tokenize.NewPromptBuilder(tok, 512)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	var spans *spanExport
	if opts.OTLPTracesEndpoint != "" { // last: nothing after it fails and leaves an exporter running
		if spans, err = newSpanExport(opts.OTLPTracesEndpoint, opts.OTLPProtocol); err != nil {
			return nil, err
		}
	}
	feat := engineFeatures{specTokens: opts.SpecTokens, specAlpha: specAlpha(opts.SpecAcceptance, opts.SpecTokens), seed: opts.Seed}
	if len(adapters) > 0 {
		feat.maxLoRAs = opts.MaxLoRAs
	}
	s := &Server{opts: opts, tok: tok, words: words, vocab: newVocab(words.Words(4096, 0x10b)), models: map[string]bool{},
		adapters: adapters, refuse: refuse, created: time.Now().Unix(), rng: rand.New(rand.NewPCG(opts.Seed, 0xfa17)), corruptRNG: rand.New(rand.NewPCG(opts.Seed, 0xbad)),
		engine: newEngineWith(opts.Engine, feat), metrics: newSimMetrics(), tokenizing: make(chan struct{}, cmp.Or(opts.TokenizerThreads, max(2, runtime.GOMAXPROCS(0)))),
		hashSeed: maphash.MakeSeed(), fetcher: newLoopbackFetcher(), spans: spans,
		bodies: newByteBudget(maxBodyBytesInFlight), tokenizeRequests: make(chan struct{}, maxTokenizeRequests), writeTimeout: streamWriteTimeout}
	if spans != nil {
		s.phases = newPhaseLog(phaseLogSize)
	}
	for _, m := range opts.Models {
		s.models[m] = true
	}
	return s, nil
}

// LatencyGC makes the process collect garbage only when its heap reaches
// limit bytes (GOGC off, a soft memory limit), so collections do not stall
// the engine's iterations; limit 0 leaves Go's default. It sets process-wide
// runtime state: call it from a simulator's main, not from a library user.
func LatencyGC(limit int64) {
	if limit <= 0 {
		return
	}
	debug.SetMemoryLimit(limit)
	debug.SetGCPercent(-1)
}

// Close stops the engine, then exports the spans still batched and stops
// the span export (within spanFlushTimeout). Requests still running get
// no more tokens, and no span. Running.Close reports the export's error.
func (s *Server) Close() { s.shutdown() }

// spanFlushTimeout bounds the wait for the last spans at Close: a
// collector that does not take them in 5 s has gone, and a stopping
// server should not wait out the exporter's retries.
const spanFlushTimeout = 5 * time.Second

// shutdown is Close, once, returning the span export's error.
func (s *Server) shutdown() error {
	s.closeOnce.Do(func() {
		s.engine.stop()
		if s.spans != nil {
			ctx, cancel := context.WithTimeout(context.Background(), spanFlushTimeout)
			defer cancel()
			s.closeErr = s.spans.shutdown(ctx)
		}
	})
	return s.closeErr
}

// Options returns the simulator's effective options.
func (s *Server) Options() Options { return s.opts }

// Handler returns the simulator's HTTP routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, true) })
	mux.HandleFunc("GET /v1/models", s.serveModels)
	mux.HandleFunc("GET /version", s.serveVersion)
	mux.HandleFunc("POST /tokenize", s.serveTokenize)
	mux.HandleFunc("GET /metrics", s.serveMetrics)
	mux.HandleFunc("GET /dcgm/metrics", s.serveDCGM)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found_error", fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// Running is a simulator serving on a listener.
type Running struct {
	// URL is the base URL, e.g. http://127.0.0.1:8000.
	URL string
	srv *http.Server
	sim *Server
	err chan error

	closeOnce sync.Once
	closed    chan struct{} // closed once Close has finished
	closeErr  error
}

// ErrNotLoopback is Start's refusal of an address on another interface
// than loopback, without allowRemote.
var ErrNotLoopback = errors.New("not a loopback address")

// Start serves the simulator on addr (host:port; port 0 picks a free one).
// It refuses a non-loopback host unless allowRemote is set (an error
// wrapping ErrNotLoopback).
func (s *Server) Start(addr string, allowRemote bool) (*Running, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("sim: address %q is not host:port: %w", addr, err)
	}
	if !allowRemote && !isLoopback(host) {
		return nil, fmt.Errorf("sim: %s is %w; serving on another interface must be allowed (allowRemote)", addr, ErrNotLoopback)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sim: listen on %s: %w", addr, err)
	}
	srv, limited := s.newHTTPServer(ln, cmp.Or(testConnCap, connCap(descriptorLimit())))
	rs := &Running{URL: "http://" + ln.Addr().String(), srv: srv, sim: s, err: make(chan error, 1), closed: make(chan struct{})}
	go func() { rs.err <- rs.srv.Serve(limited) }()
	return rs, nil
}

// Close stops the server, ending open streams, then its engine, and then
// flushes the spans of the requests that finished (see Server.Close). The
// order loses no span: the handlers have returned, each having ended its
// request's span, before the export is flushed (a handler cut off after
// 2 s has no more tokens coming, and so no span). A second call returns
// the first's result.
func (rs *Running) Close() error {
	rs.closeOnce.Do(func() {
		defer close(rs.closed)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err := rs.srv.Shutdown(ctx)
		if err != nil {
			err = rs.srv.Close()
		}
		rs.closeErr = errors.Join(err, rs.sim.shutdown())
	})
	return rs.closeErr
}

// Wait blocks until the server stops and returns why. Stopped by Close,
// it returns once Close has flushed the spans, with Close's error, so a
// process that exits when Wait returns loses none.
func (rs *Running) Wait() error {
	err := <-rs.err
	if errors.Is(err, http.ErrServerClosed) {
		<-rs.closed // only Close shuts the server down
		return rs.closeErr
	}
	return err
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// draws returns a request's fault draw, one early-stop draw per choice and
// its request number. A request that gives a seed draws its stops from
// that seed, so it stops at the same lengths every time, as a seeded
// sampler would; the fault draw stays the server's.
func (s *Server) draws(n int, seed *int64) (fault float64, stops []float64, num uint64) {
	stops = make([]float64, n)
	s.mu.Lock()
	s.seq++
	num = s.seq
	fault = s.rng.Float64()
	for i := range stops {
		stops[i] = s.rng.Float64() // drawn even when seeded, so the faults do not depend on seeds
	}
	s.mu.Unlock()
	if seed != nil {
		r := rand.New(rand.NewPCG(uint64(*seed), 0x5eed))
		for i := range stops {
			stops[i] = r.Float64()
		}
	}
	return fault, stops, num
}
