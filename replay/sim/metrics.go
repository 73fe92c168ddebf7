package sim

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/servetrace/servetrace/internal/promtext"
)

// simMetrics holds the per-request figures of /metrics; the engine holds
// the rest (running, waiting, KV usage, prefix cache, preemptions).
//
// Request and token counters count finished requests, so they equal what a
// client recorded for its successful requests exactly.
type simMetrics struct {
	mu            sync.Mutex
	success       map[string]uint64 // by finish reason
	promptTokens  uint64
	genTokens     uint64
	abortedN      uint64
	rejectedN     uint64
	ttft, itl, e2 promtext.Histogram
}

func newSimMetrics() *simMetrics {
	lat := []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	return &simMetrics{success: map[string]uint64{},
		ttft: promtext.NewHistogram(lat...),
		itl:  promtext.NewHistogram(0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5),
		e2:   promtext.NewHistogram(0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480)}
}

func (m *simMetrics) firstToken(d time.Duration) {
	m.mu.Lock()
	m.ttft.Observe(d.Seconds())
	m.mu.Unlock()
}

func (m *simMetrics) interToken(d time.Duration) {
	m.mu.Lock()
	m.itl.Observe(d.Seconds())
	m.mu.Unlock()
}

func (m *simMetrics) finished(reason string, prompt, generated int, e2e time.Duration) {
	m.mu.Lock()
	m.success[reason]++
	m.promptTokens += uint64(prompt)
	m.genTokens += uint64(generated)
	m.e2.Observe(e2e.Seconds())
	m.mu.Unlock()
}

func (m *simMetrics) aborted() {
	m.mu.Lock()
	m.abortedN++
	m.mu.Unlock()
}

func (m *simMetrics) rejected() {
	m.mu.Lock()
	m.rejectedN++
	m.mu.Unlock()
}

// serveMetrics writes Prometheus text with vLLM's metric names where vLLM
// has one; vllm:request_aborted_total, vllm:request_rejected_total and the
// servetrace_sim ones are the simulator's own. The LoRA metrics appear
// when adapters are served, the speculative decoding ones when it is on,
// as vLLM's do.
func (s *Server) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	es := s.engine.snapshot()
	lbl := promtext.Labels("model_name", s.opts.Models[0])
	gauge := func(name, help string, v float64) {
		promtext.WriteHeader(w, name, "gauge", help)
		promtext.WriteSample(w, name, lbl, v)
	}
	counter := func(name, help string, v float64) {
		promtext.WriteHeader(w, name, "counter", help)
		promtext.WriteSample(w, name, lbl, v)
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", float64(es.running))
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", float64(es.waiting))
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", es.kvUsage)
	counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", float64(es.prefixQueries))
	counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", float64(es.prefixHits))
	counter("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine.", float64(es.preemptions))
	counter("vllm:mm_cache_queries_total", "Multi-modal cache queries, in terms of number of queried items (images).", float64(es.mmQueries))
	counter("vllm:mm_cache_hits_total", "Multi-modal cache hits, in terms of number of cached items (images).", float64(es.mmHits))
	counter("servetrace_sim:grammar_compiles_total", "Structured-output constraints compiled: grammar cache misses (simulator).", float64(es.grammarCompiles))
	counter("servetrace_sim:grammar_cache_hits_total", "Structured-output constraints found compiled in the grammar cache (simulator).", float64(es.grammarHits))
	if len(s.adapters) > 0 {
		// vLLM's info gauge: the adapters in its labels, the scrape's
		// unix time as its value.
		promtext.WriteHeader(w, "vllm:lora_requests_info", "gauge", "Running stats on lora requests.")
		promtext.WriteSample(w, "vllm:lora_requests_info", promtext.Labels("max_lora", strconv.Itoa(s.opts.MaxLoRAs),
			"running_lora_adapters", strings.Join(es.loraRunning, ","), "waiting_lora_adapters", strings.Join(es.loraWaiting, ",")),
			float64(time.Now().UnixNano())/1e9)
		counter("servetrace_sim:lora_loads_total", "LoRA adapters loaded into a GPU slot (simulator).", float64(es.loraLoads))
		counter("servetrace_sim:lora_evictions_total", "LoRA adapters evicted from a GPU slot to load another (simulator).", float64(es.loraEvictions))
	}
	if s.opts.SpecTokens > 0 {
		counter("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.", float64(es.specDrafts))
		counter("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.", float64(es.specDraftTokens))
		counter("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", float64(es.specAccepted))
		promtext.WriteHeader(w, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter", "Accepted tokens per draft position.")
		for i, n := range es.specAcceptedPos {
			promtext.WriteSample(w, "vllm:spec_decode_num_accepted_tokens_per_pos_total", lbl+","+promtext.Labels("position", strconv.Itoa(i)), float64(n))
		}
	}
	promtext.WriteHeader(w, "servetrace_sim_iteration_overrun_seconds", "histogram", "How late engine iterations ended past their planned end (the simulator's own health).")
	es.overrun.Write(w, "servetrace_sim_iteration_overrun_seconds", lbl)

	m := s.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	counter("vllm:prompt_tokens_total", "Number of prefill tokens processed (finished requests).", float64(m.promptTokens))
	counter("vllm:generation_tokens_total", "Number of generation tokens processed (finished requests).", float64(m.genTokens))
	promtext.WriteHeader(w, "vllm:request_success_total", "counter", "Count of successfully processed requests.")
	reasons := make([]string, 0, len(m.success))
	for r := range m.success {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		promtext.WriteSample(w, "vllm:request_success_total", lbl+","+promtext.Labels("finished_reason", r), float64(m.success[r]))
	}
	counter("vllm:request_aborted_total", "Requests whose client went away before they finished (simulator).", float64(m.abortedN))
	counter("vllm:request_rejected_total", "Requests refused with 429 because the waiting queue was full (simulator).", float64(m.rejectedN))
	promtext.WriteHeader(w, "vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.")
	m.ttft.Write(w, "vllm:time_to_first_token_seconds", lbl)
	promtext.WriteHeader(w, "vllm:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.")
	m.itl.Write(w, "vllm:inter_token_latency_seconds", lbl)
	promtext.WriteHeader(w, "vllm:e2e_request_latency_seconds", "histogram", "Histogram of end to end request latency in seconds.")
	m.e2.Write(w, "vllm:e2e_request_latency_seconds", lbl)
}
