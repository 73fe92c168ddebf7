// Package sim is servetrace's built-in OpenAI-compatible inference server
// simulator: the default target of the demo and the tests. It speaks the
// real protocol over real HTTP (/v1/completions, /v1/chat/completions with
// SSE streaming and stream_options.include_usage, /v1/models, /tokenize in
// vLLM's shape, /health), counts
// prompt tokens with a real tokenizer, and times its responses with a cost
// model. It can inject faults so every failure path of a client is testable.
//
// This first timing model treats each request independently: a prefill delay
// of PrefillBase + PrefillPerToken·prompt_tokens, then one DecodePerToken per
// output token. It has no batching or queueing; the engine loop comes later.
package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/servetrace/servetrace/tokenize"
)

// Options configures a simulator. Zero fields take DefaultOptions' values
// where noted.
type Options struct {
	// Models are the model names served; others get 404.
	Models []string
	// Tokenizer counts prompt tokens (default cl100k_base).
	Tokenizer string
	// PrefillBase and PrefillPerToken make up the time to the first token.
	PrefillBase     time.Duration
	PrefillPerToken time.Duration
	// DecodePerToken is the time between output tokens.
	DecodePerToken time.Duration
	// MaxModelLen is the longest prompt+output accepted; longer gets 400.
	MaxModelLen int
	// DefaultMaxTokens is the output length when a request gives none.
	DefaultMaxTokens int
	// FailRate is the share of requests answered with HTTP 500 (fault injection).
	FailRate float64
	// StreamErrorRate is the share of streamed requests that break off half
	// way with an error object inside the 200 stream.
	StreamErrorRate float64
	// Seed makes the fault injection and generated text reproducible.
	Seed uint64
}

// DefaultModel is the model name served when none is configured.
const DefaultModel = "servetrace-sim"

// DefaultOptions returns a timing model of roughly a 7-8B model on one
// modern datacenter GPU at low load: 20 ms + 0.05 ms per prompt token to the
// first token, then 15 ms per output token.
func DefaultOptions() Options {
	return Options{
		Models:           []string{DefaultModel},
		Tokenizer:        tokenize.DefaultEncoding,
		PrefillBase:      20 * time.Millisecond,
		PrefillPerToken:  50 * time.Microsecond,
		DecodePerToken:   15 * time.Millisecond,
		MaxModelLen:      131072,
		DefaultMaxTokens: 256,
	}
}

// Server is a simulator instance. Use Handler to mount it or Start to serve
// it on a loopback port.
type Server struct {
	opts    Options
	tok     *tokenize.Tokenizer
	words   *tokenize.PromptBuilder
	models  map[string]bool
	created int64

	mu  sync.Mutex
	rng *rand.Rand // fault injection draws
	seq uint64
}

// New builds a simulator. It fails on an unknown tokenizer or bad option.
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
	if opts.FailRate < 0 || opts.FailRate > 1 || opts.StreamErrorRate < 0 || opts.StreamErrorRate > 1 {
		return nil, fmt.Errorf("sim: fault rates must be within [0, 1], got fail %v, stream error %v", opts.FailRate, opts.StreamErrorRate)
	}
	if opts.PrefillBase < 0 || opts.PrefillPerToken < 0 || opts.DecodePerToken < 0 {
		return nil, errors.New("sim: timing constants must not be negative")
	}
	tok, err := tokenize.Get(opts.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	words, err := tokenize.NewPromptBuilder(tok, 512)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	s := &Server{opts: opts, tok: tok, words: words, models: map[string]bool{}, created: time.Now().Unix(),
		rng: rand.New(rand.NewPCG(opts.Seed, 0xfa17))}
	for _, m := range opts.Models {
		s.models[m] = true
	}
	return s, nil
}

// Options returns the simulator's effective options.
func (s *Server) Options() Options { return s.opts }

// Handler returns the simulator's HTTP routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, true) })
	mux.HandleFunc("GET /v1/models", s.serveModels)
	mux.HandleFunc("POST /tokenize", s.serveTokenize)
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
	err chan error
}

// Start serves the simulator on addr (host:port; port 0 picks a free one).
// It refuses a non-loopback host unless allowRemote is set.
func (s *Server) Start(addr string, allowRemote bool) (*Running, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("sim: --addr %q is not host:port: %w", addr, err)
	}
	if !allowRemote && !isLoopback(host) {
		return nil, fmt.Errorf("sim: --addr %s is not a loopback address; pass --allow-remote to serve on another interface", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sim: listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, Protocols: new(http.Protocols)}
	// HTTP/1.1, and HTTP/2 by prior knowledge for clients that ask for it.
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	rs := &Running{URL: "http://" + ln.Addr().String(), srv: srv, err: make(chan error, 1)}
	go func() { rs.err <- rs.srv.Serve(ln) }()
	return rs, nil
}

// Close stops the server, ending open streams.
func (rs *Running) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rs.srv.Shutdown(ctx); err != nil {
		return rs.srv.Close()
	}
	return nil
}

// Wait blocks until the server stops and returns why.
func (rs *Running) Wait() error {
	err := <-rs.err
	if errors.Is(err, http.ErrServerClosed) {
		return nil
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

// draw returns a uniform draw and a request sequence number.
func (s *Server) draw() (float64, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return s.rng.Float64(), s.seq
}
