// Package trace owns servetrace's on-disk records: the request record (one row
// per request of a trace or workload), the result record (one row per
// replayed request), and the Parquet bucket layout that stores them.
//
// The column names, units and nullability are documented in
// docs/architecture.md; a change to any of them bumps SchemaVersion.
package trace

import "time"

// SchemaVersion is written to every manifest and run.json. Bump it when a
// column is added, removed, renamed or changes meaning.
const SchemaVersion = 4

// DefaultBlockSize is the prefix-block size in tokens used when a source does
// not say otherwise (Mooncake's block size).
const DefaultBlockSize = 512

// API values for Request.API.
const (
	APICompletions = "completions"
	APIChat        = "chat"
)

// Identity names a request and who sent it.
type Identity struct {
	RequestID string `parquet:"request_id" json:"request_id"`
	SessionID string `parquet:"session_id,dict" json:"session_id,omitempty"`
	Turn      int32  `parquet:"turn" json:"turn"`
	// Tenant is an HMAC of the source's tenant or user id, never the raw id.
	Tenant  string `parquet:"tenant,dict" json:"tenant,omitempty"`
	Model   string `parquet:"model,dict" json:"model,omitempty"`
	Adapter string `parquet:"adapter,dict" json:"adapter,omitempty"`
}

// Shape is what a request asks of the server: its size and API.
//
// Shape and Identity are embedded in Request and Result and must hold no
// nullable (pointer) columns: parquet-go v0.32 reads a null optional field of
// an embedded struct back as a pointer to zero. Nullable columns such as
// temperature and top_p therefore sit at the top level of both records.
type Shape struct {
	InputTokens  int64    `parquet:"input_tokens" json:"input_tokens"`
	OutputTokens int64    `parquet:"output_tokens" json:"output_tokens"`
	MaxTokens    int64    `parquet:"max_tokens" json:"max_tokens"`
	API          string   `parquet:"api,dict" json:"api"`
	Stream       bool     `parquet:"stream" json:"stream"`
	N            int32    `parquet:"n" json:"n"`
	Features     []string `parquet:"features,list" json:"features,omitempty"`
	// PrefixBlocks holds one id per block of BlockSize tokens, the last
	// partial block included: len = ceil(InputTokens / BlockSize). Equal ids
	// mean an identical prefix through that block. Empty means the source
	// carried no prefix information.
	PrefixBlocks []int64 `parquet:"prefix_blocks,list" json:"prefix_blocks,omitempty"`
}

// Request is one row of a trace or workload. Nullable columns are pointers.
type Request struct {
	Identity
	// TS is the arrival time, UTC, in microseconds since the Unix epoch.
	TS int64 `parquet:"ts,timestamp(microsecond),delta" json:"ts"`
	Shape
	Temperature *float64 `parquet:"temperature,optional" json:"temperature,omitempty"`
	TopP        *float64 `parquet:"top_p,optional" json:"top_p,omitempty"`
	Media
	Calls
	// Sampling beyond temperature and top_p; nil where the request did
	// not set it.
	TopLogprobs      *int32   `parquet:"top_logprobs,optional" json:"top_logprobs,omitempty"`
	Seed             *int64   `parquet:"seed,optional" json:"seed,omitempty"`
	TopK             *int32   `parquet:"top_k,optional" json:"top_k,omitempty"`
	PresencePenalty  *float64 `parquet:"presence_penalty,optional" json:"presence_penalty,omitempty"`
	FrequencyPenalty *float64 `parquet:"frequency_penalty,optional" json:"frequency_penalty,omitempty"`
	// ImageTokens and AudioTokens are the prompt tokens the server's usage
	// gave to images and audio, where the log separates them.
	ImageTokens *int64 `parquet:"image_tokens,optional" json:"image_tokens,omitempty"`
	AudioTokens *int64 `parquet:"audio_tokens,optional" json:"audio_tokens,omitempty"`

	// Outcome as logged by the source; nil where it was not logged.
	FinishReason *string  `parquet:"finish_reason,optional,dict" json:"finish_reason,omitempty"`
	Status       *int32   `parquet:"status,optional" json:"status,omitempty"`
	Cancelled    *bool    `parquet:"cancelled,optional" json:"cancelled,omitempty"`
	CachedTokens *int64   `parquet:"cached_tokens,optional" json:"cached_tokens,omitempty"`
	TTFTMs       *float64 `parquet:"ttft_ms,optional" json:"ttft_ms,omitempty"`
	E2EMs        *float64 `parquet:"e2e_ms,optional" json:"e2e_ms,omitempty"`

	// Client behaviour for replay; nil where the client behaves plainly.
	CancelAfterMs     *float64 `parquet:"cancel_after_ms,optional" json:"cancel_after_ms,omitempty"`
	CancelAfterTokens *int64   `parquet:"cancel_after_tokens,optional" json:"cancel_after_tokens,omitempty"`
	ReadDelayMs       *float64 `parquet:"read_delay_ms,optional" json:"read_delay_ms,omitempty"`
	ThinkTimeMs       *float64 `parquet:"think_time_ms,optional" json:"think_time_ms,omitempty"`

	// The agent graph (schema 3): ParentIDs are the requests whose
	// answers this one waits for (one: a chain; several: a join). It is
	// sent once all have finished, after ToolMs (a tool's run) and
	// ThinkTimeMs, not at TS; where neither is logged (a trace of
	// arrivals only), at TS unless the parents end later. Role is the
	// call's part where known
	// (RolePlanner, RoleSubAgent, RoleToolFollowUp, RoleChat).
	ParentIDs []string `parquet:"parent_ids,list" json:"parent_ids,omitempty"`
	ToolMs    *float64 `parquet:"tool_ms,optional" json:"tool_ms,omitempty"`
	Role      string   `parquet:"role,dict" json:"role,omitempty"`

	// Phase is a free label set by scenarios and replay ("warmup", "step-3").
	Phase string `parquet:"phase,dict" json:"phase,omitempty"`
}

// Time returns the arrival time as a UTC time.Time.
func (r *Request) Time() time.Time { return time.UnixMicro(r.TS).UTC() }

// Roles of a call in an agent graph (Request.Role).
const (
	RolePlanner      = "planner"
	RoleSubAgent     = "sub-agent"
	RoleToolFollowUp = "tool-follow-up"
	RoleChat         = "chat"
)

// MaxParents bounds a request's parent_ids: a join of more answers than
// this is no agent's, and a row must not hold the client to an unbounded
// wait list.
const MaxParents = 256

// Outcome values for Result.Outcome. Every scheduled request ends with exactly
// one of them.
const (
	OutcomeOK            = "ok"             // 2xx and a complete response
	OutcomeHTTPError     = "http_error"     // non-2xx status
	OutcomeStreamError   = "stream_error"   // an error object inside a 200 stream
	OutcomeTimeout       = "timeout"        // the request ran past its timeout
	OutcomeCancelled     = "cancelled"      // cancelled by the workload's client behaviour
	OutcomeConnError     = "conn_error"     // dial failure or reset; tokens before it are kept
	OutcomeProtocolError = "protocol_error" // malformed SSE or JSON
	OutcomeNotSent       = "not_sent"       // the run ended before it was sent
)

// Outcomes lists every outcome class in report order.
var Outcomes = []string{OutcomeOK, OutcomeHTTPError, OutcomeStreamError, OutcomeTimeout,
	OutcomeCancelled, OutcomeConnError, OutcomeProtocolError, OutcomeNotSent}

// Result is one row of a replay's results: the request's identity, shape and
// phase, and what was observed. Times are monotonic nanoseconds since the
// run's start (run.json holds the start's wall-clock time); a time that never
// happened is nil.
type Result struct {
	Identity
	Shape
	Temperature *float64 `parquet:"temperature,optional" json:"temperature,omitempty"`
	TopP        *float64 `parquet:"top_p,optional" json:"top_p,omitempty"`
	// Seed is the sampling seed sent; with temperature 0 it marks a
	// request whose answer should repeat exactly.
	Seed  *int64 `parquet:"seed,optional" json:"seed,omitempty"`
	Phase string `parquet:"phase,dict" json:"phase,omitempty"`
	// Role is the request's part in an agent graph (Request.Role).
	Role string `parquet:"role,dict" json:"role,omitempty"`

	ScheduledNs int64  `parquet:"scheduled_ns" json:"scheduled_ns"`
	AdmittedNs  int64  `parquet:"admitted_ns" json:"admitted_ns"`
	SentNs      *int64 `parquet:"sent_ns,optional" json:"sent_ns,omitempty"`
	// WroteNs is when the transport had written the request's headers to
	// the connection (after any dial and handshake), the body behind them:
	// what the server can see first, measured on the transport's own
	// goroutine.
	WroteNs      *int64 `parquet:"wrote_ns,optional" json:"wrote_ns,omitempty"`
	ConnReused   bool   `parquet:"conn_reused" json:"conn_reused"`
	FirstChunkNs *int64 `parquet:"first_chunk_ns,optional" json:"first_chunk_ns,omitempty"`
	FirstTokenNs *int64 `parquet:"first_token_ns,optional" json:"first_token_ns,omitempty"`
	// FirstAnswerNs is the first event carrying content or a tool call,
	// not reasoning: a reasoning model's answer begins there.
	FirstAnswerNs *int64 `parquet:"first_answer_ns,optional" json:"first_answer_ns,omitempty"`
	DoneNs        *int64 `parquet:"done_ns,optional" json:"done_ns,omitempty"`
	// TokenTimesNs has one entry per event that carried content, relative to
	// SentNs.
	TokenTimesNs []int64 `parquet:"token_times_ns,list" json:"token_times_ns,omitempty"`
	// ChoiceIndex, for a request of n > 1, names the choice of each
	// TokenTimesNs entry; empty for n = 1.
	ChoiceIndex []int32 `parquet:"choice_index,list" json:"choice_index,omitempty"`
	// OutputHashes fingerprints each choice's output text (content and
	// text, not reasoning or tool calls), in choice order, for ok
	// requests: HMAC-SHA256 keyed by the run's output salt, 32 hex digits.
	// The text itself is never kept; equal hashes under one salt mean
	// equal answers.
	OutputHashes []string `parquet:"output_hashes,list" json:"output_hashes,omitempty"`
	// OutputEventHashes, for an ok greedy request (temperature 0 or a
	// seed) of one choice streamed, chains the text of each streamed
	// event into a salted 64-bit hash and keeps its top 32 bits after
	// every event: two runs' lists first differ at the event where their
	// answers first part (a token, where the server streams one a event).
	OutputEventHashes []int32 `parquet:"output_event_hashes,list" json:"output_event_hashes,omitempty"`
	// Probe names the kind of a probe request (replay --probes: an answer
	// servetrace can check), "" for the workload's own; ProbeCorrect is
	// its grade, for ok probes. Neither the probe's prompt nor its
	// answer is kept.
	Probe        string `parquet:"probe,dict" json:"probe,omitempty"`
	ProbeCorrect *bool  `parquet:"probe_correct,optional" json:"probe_correct,omitempty"`

	// What replay did with the request's features (Shape.Features labels):
	// sent with the request, dropped on purpose (--strip), or refused by
	// the target (a 4xx whose message names the feature). A feature the
	// request carried is in exactly one of sent and stripped.
	FeaturesSent     []string `parquet:"features_sent,list" json:"features_sent,omitempty"`
	FeaturesStripped []string `parquet:"features_stripped,list" json:"features_stripped,omitempty"`
	FeaturesRefused  []string `parquet:"features_refused,list" json:"features_refused,omitempty"`

	ObservedOutputTokens    int64  `parquet:"observed_output_tokens" json:"observed_output_tokens"`
	ObservedReasoningTokens int64  `parquet:"observed_reasoning_tokens" json:"observed_reasoning_tokens"`
	UsagePromptTokens       *int64 `parquet:"usage_prompt_tokens,optional" json:"usage_prompt_tokens,omitempty"`
	// UsageCachedTokens is the server's usage.prompt_tokens_details.
	// cached_tokens: the prompt tokens its prefix cache served, where it
	// says (vLLM with --enable-prompt-tokens-details, OpenAI, the simulator).
	UsageCachedTokens     *int64 `parquet:"usage_cached_tokens,optional" json:"usage_cached_tokens,omitempty"`
	UsageCompletionTokens *int64 `parquet:"usage_completion_tokens,optional" json:"usage_completion_tokens,omitempty"`
	ObservedFinishReason  string `parquet:"observed_finish_reason,dict" json:"observed_finish_reason,omitempty"`
	PromptTokensSent      int64  `parquet:"prompt_tokens_sent" json:"prompt_tokens_sent"`

	HTTPStatus int32  `parquet:"http_status" json:"http_status"`
	Outcome    string `parquet:"outcome,dict" json:"outcome"`
	// Error is a short description of what went wrong, never request content.
	Error string `parquet:"error" json:"error,omitempty"`

	Warmup bool   `parquet:"warmup" json:"warmup"`
	Shard  int32  `parquet:"shard" json:"shard"`
	RunID  string `parquet:"run_id,dict" json:"run_id"`
}

// Ptr returns a pointer to v, for filling nullable columns.
func Ptr[T any](v T) *T { return &v }

// DefaultStart anchors relative times (Mooncake traces, synthetic
// workloads) when no --start is given.
var DefaultStart = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
