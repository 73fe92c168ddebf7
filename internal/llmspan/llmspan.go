// Package llmspan names vLLM's per-request span and its attributes, as
// vllm/tracing.py's SpanAttributes names them and
// vllm/v1/engine/output_processor.py (do_tracing) sets them when a request
// finishes: latencies in seconds as doubles, counts as ints. One table, so
// that the simulator writing the span and the collector reading it cannot
// drift apart.
package llmspan

// Name is the span's name.
const Name = "llm_request"

// The attributes.
const (
	Queue            = "gen_ai.latency.time_in_queue"
	TTFT             = "gen_ai.latency.time_to_first_token"
	E2E              = "gen_ai.latency.e2e"
	Prefill          = "gen_ai.latency.time_in_model_prefill"
	Decode           = "gen_ai.latency.time_in_model_decode"
	Inference        = "gen_ai.latency.time_in_model_inference"
	PromptTokens     = "gen_ai.usage.prompt_tokens"
	CompletionTokens = "gen_ai.usage.completion_tokens"
	RequestID        = "gen_ai.request.id"
	MaxTokens        = "gen_ai.request.max_tokens"
	Temperature      = "gen_ai.request.temperature"
	TopP             = "gen_ai.request.top_p"
	N                = "gen_ai.request.n"
)
