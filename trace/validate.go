package trace

import (
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Ceilings on a record's values. A value past one is not a workload but a
// fault (a corrupt log, a hostile file): replaying a 10^18-token prompt
// would exhaust memory, a NaN think time would wait for ever.
const (
	// MaxTokens bounds every token count of one request: input, output,
	// max_tokens, cached and usage counts, cancel_after_tokens.
	MaxTokens = 10_000_000
	// MaxClientMs bounds the client-behaviour and logged-latency columns
	// (cancel_after_ms, read_delay_ms, think_time_ms, ttft_ms, e2e_ms): a
	// week, in milliseconds.
	MaxClientMs = 7 * 24 * 3600 * 1000
	// MaxN bounds n, the completions asked for per request (OpenAI's limit).
	MaxN = 128
	// MaxTemperature bounds the sampling temperature.
	MaxTemperature = 100
	// MaxStringBytes bounds every string column (ids, model, phase).
	MaxStringBytes = 1024
	// MaxFeatures bounds the features list of one request.
	MaxFeatures = 64
	// MaxResultList bounds a result row's per-event lists (token_times_ns,
	// choice_index, output_event_hashes) and its prefix_blocks, as replay
	// writes them and every reader reads them: Parquet stores a repeated
	// value in a few bytes, so without it a part of kilobytes could hold
	// rows of millions of entries, and no answer streams 262,144 events.
	MaxResultList = 1 << 18
)

// Timestamps outside [MinTS, MaxTS] (1900 to 2200, in microseconds) are
// faults: no log or workload is dated there, and times far past them
// overflow the nanosecond arithmetic of a replay.
var (
	MinTS = int64(-2208988800) * 1e6 // 1900-01-01T00:00:00Z
	MaxTS = int64(7258118400) * 1e6  // 2200-01-01T00:00:00Z
)

// FieldError says which column of a record holds a value outside its
// documented range, and why.
type FieldError struct {
	Field  string // the column name, e.g. "think_time_ms"
	Value  string // the value as read, formatted
	Reason string // what the column allows
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s %s: %s", e.Field, e.Value, e.Reason)
}

// Validate checks every column of a request against its documented range:
// numbers finite and within the ceilings above, strings valid UTF-8 without
// control characters, the api one of chat or completions. It returns the
// first fault as a *FieldError.
func (r *Request) Validate() error {
	if err := r.Identity.validate(); err != nil {
		return err
	}
	if r.TS < MinTS || r.TS > MaxTS {
		return &FieldError{"ts", strconv.FormatInt(r.TS, 10), "must lie between 1900 and 2200 (microseconds since 1970)"}
	}
	if err := r.Shape.validate(); err != nil {
		return err
	}
	if err := checkOptional(
		optFloat{"temperature", r.Temperature, MaxTemperature}, optFloat{"top_p", r.TopP, 1},
		optFloat{"ttft_ms", r.TTFTMs, MaxClientMs}, optFloat{"e2e_ms", r.E2EMs, MaxClientMs},
		optFloat{"cancel_after_ms", r.CancelAfterMs, MaxClientMs}, optFloat{"read_delay_ms", r.ReadDelayMs, MaxClientMs},
		optFloat{"think_time_ms", r.ThinkTimeMs, MaxClientMs}, optFloat{"tool_ms", r.ToolMs, MaxClientMs}); err != nil {
		return err
	}
	if err := r.validateGraph(); err != nil {
		return err
	}
	if err := checkOptionalCounts(optCount{"cached_tokens", r.CachedTokens}, optCount{"cancel_after_tokens", r.CancelAfterTokens},
		optCount{"image_tokens", r.ImageTokens}, optCount{"audio_tokens", r.AudioTokens}); err != nil {
		return err
	}
	if err := r.Media.validate(); err != nil {
		return err
	}
	if err := r.Calls.validate(); err != nil {
		return err
	}
	if err := r.validateSampling(); err != nil {
		return err
	}
	if r.Status != nil && (*r.Status < 0 || *r.Status > 999) {
		return &FieldError{"status", strconv.Itoa(int(*r.Status)), "must be an HTTP status, 0 to 999"}
	}
	if r.FinishReason != nil {
		if err := checkString("finish_reason", *r.FinishReason); err != nil {
			return err
		}
	}
	return checkString("phase", r.Phase)
}

// Validate checks a result row: the request's columns as Request.Validate
// does, times in order (sent, first chunk and first token, done), token
// times from zero and non-decreasing, counts within MaxTokens and a known
// outcome.
func (r *Result) Validate() error {
	if err := r.Identity.validate(); err != nil {
		return err
	}
	if err := r.Shape.validate(); err != nil {
		return err
	}
	if err := checkOptional(optFloat{"temperature", r.Temperature, MaxTemperature}, optFloat{"top_p", r.TopP, 1}); err != nil {
		return err
	}
	if err := checkString("phase", r.Phase); err != nil {
		return err
	}
	if err := checkString("role", r.Role); err != nil {
		return err
	}
	if r.SentNs != nil {
		for _, c := range []struct {
			name string
			v    *int64
		}{{"wrote_ns", r.WroteNs}, {"first_chunk_ns", r.FirstChunkNs}, {"first_token_ns", r.FirstTokenNs}, {"first_answer_ns", r.FirstAnswerNs}, {"done_ns", r.DoneNs}} {
			if c.v != nil && *c.v < *r.SentNs {
				return &FieldError{c.name, strconv.FormatInt(*c.v, 10), "is before sent_ns " + strconv.FormatInt(*r.SentNs, 10)}
			}
		}
		if r.DoneNs != nil && r.FirstTokenNs != nil && *r.FirstTokenNs > *r.DoneNs {
			return &FieldError{"first_token_ns", strconv.FormatInt(*r.FirstTokenNs, 10), "is after done_ns " + strconv.FormatInt(*r.DoneNs, 10)}
		}
	}
	for _, l := range []struct {
		name string
		n    int
	}{{"token_times_ns", len(r.TokenTimesNs)}, {"choice_index", len(r.ChoiceIndex)}, {"output_event_hashes", len(r.OutputEventHashes)}, {"prefix_blocks", len(r.PrefixBlocks)}} {
		if l.n > MaxResultList {
			return &FieldError{l.name, strconv.Itoa(l.n) + " entries", fmt.Sprintf("at most %d", MaxResultList)}
		}
	}
	prev := int64(0)
	for i, t := range r.TokenTimesNs {
		if t < prev {
			return &FieldError{"token_times_ns", fmt.Sprintf("[%d] = %d", i, t), "must start at 0 or later and never decrease"}
		}
		prev = t
	}
	for _, c := range []struct {
		name string
		v    int64
	}{{"observed_output_tokens", r.ObservedOutputTokens}, {"observed_reasoning_tokens", r.ObservedReasoningTokens}, {"prompt_tokens_sent", r.PromptTokensSent}} {
		if err := checkCount(c.name, c.v, MaxTokens); err != nil {
			return err
		}
	}
	if err := checkOptionalCounts(optCount{"usage_prompt_tokens", r.UsagePromptTokens}, optCount{"usage_completion_tokens", r.UsageCompletionTokens},
		optCount{"usage_cached_tokens", r.UsageCachedTokens}); err != nil {
		return err
	}
	if r.HTTPStatus < 0 || r.HTTPStatus > 999 {
		return &FieldError{"http_status", strconv.Itoa(int(r.HTTPStatus)), "must be an HTTP status, 0 to 999"}
	}
	if !knownOutcome(r.Outcome) {
		return &FieldError{"outcome", strconv.Quote(r.Outcome), "is not one of the outcome classes (ok, http_error, ...)"}
	}
	for _, l := range []struct {
		name string
		v    []string
	}{{"features_sent", r.FeaturesSent}, {"features_stripped", r.FeaturesStripped}, {"features_refused", r.FeaturesRefused}} {
		if len(l.v) > MaxFeatures {
			return &FieldError{l.name, strconv.Itoa(len(l.v)) + " entries", fmt.Sprintf("at most %d", MaxFeatures)}
		}
		for _, f := range l.v {
			if err := checkString(l.name, f); err != nil {
				return err
			}
		}
	}
	if len(r.ChoiceIndex) != 0 && len(r.ChoiceIndex) != len(r.TokenTimesNs) {
		return &FieldError{"choice_index", strconv.Itoa(len(r.ChoiceIndex)) + " entries", fmt.Sprintf("must be empty or one per token_times_ns entry (%d)", len(r.TokenTimesNs))}
	}
	if len(r.OutputHashes) > MaxOutputHashes {
		return &FieldError{"output_hashes", strconv.Itoa(len(r.OutputHashes)) + " entries", fmt.Sprintf("at most %d", MaxOutputHashes)}
	}
	for i, h := range r.OutputHashes {
		if len(h) != 32 || !isLowerHex(h) {
			return &FieldError{"output_hashes", fmt.Sprintf("[%d] = %q", i, clip(h)), "must be 32 lowercase hex digits"}
		}
	}
	if err := checkString("probe", r.Probe); err != nil {
		return err
	}
	if r.ProbeCorrect != nil && r.Probe == "" {
		return &FieldError{"probe_correct", strconv.FormatBool(*r.ProbeCorrect), "is set on a request that is not a probe"}
	}
	if err := checkString("observed_finish_reason", r.ObservedFinishReason); err != nil {
		return err
	}
	return checkString("run_id", r.RunID)
}

// MaxOutputHashes bounds a result's answer fingerprints: one per choice,
// and replay fingerprints at most this many choices.
const MaxOutputHashes = 128

func knownOutcome(o string) bool {
	for _, k := range Outcomes {
		if o == k {
			return true
		}
	}
	return false
}

func (id *Identity) validate() error {
	for _, c := range []struct{ name, v string }{{"request_id", id.RequestID}, {"session_id", id.SessionID},
		{"tenant", id.Tenant}, {"model", id.Model}, {"adapter", id.Adapter}} {
		if err := checkString(c.name, c.v); err != nil {
			return err
		}
	}
	if id.Turn < 0 {
		return &FieldError{"turn", strconv.Itoa(int(id.Turn)), "must not be negative"}
	}
	return nil
}

func (s *Shape) validate() error {
	for _, c := range []struct {
		name string
		v    int64
	}{{"input_tokens", s.InputTokens}, {"output_tokens", s.OutputTokens}, {"max_tokens", s.MaxTokens}} {
		if err := checkCount(c.name, c.v, MaxTokens); err != nil {
			return err
		}
	}
	switch s.API {
	case "", APIChat, APICompletions:
	default:
		return &FieldError{"api", strconv.Quote(s.API), "must be chat or completions"}
	}
	if s.N < 0 || s.N > MaxN {
		return &FieldError{"n", strconv.Itoa(int(s.N)), fmt.Sprintf("must be 0 to %d", MaxN)}
	}
	if len(s.Features) > MaxFeatures {
		return &FieldError{"features", strconv.Itoa(len(s.Features)) + " entries", fmt.Sprintf("at most %d", MaxFeatures)}
	}
	for _, f := range s.Features {
		if err := checkString("features", f); err != nil {
			return err
		}
	}
	if int64(len(s.PrefixBlocks)) > max(s.InputTokens, 0) {
		return &FieldError{"prefix_blocks", strconv.Itoa(len(s.PrefixBlocks)) + " blocks", fmt.Sprintf("more blocks than the request's %d input tokens", s.InputTokens)}
	}
	return nil
}

// optFloat is a nullable float column and its ceiling.
type optFloat struct {
	name string
	v    *float64
	max  float64
}

// checkOptional checks each present value with checkFloat.
func checkOptional(cols ...optFloat) error {
	for _, c := range cols {
		if c.v != nil {
			if err := checkFloat(c.name, *c.v, c.max); err != nil {
				return err
			}
		}
	}
	return nil
}

// optCount is a nullable token count.
type optCount struct {
	name string
	v    *int64
}

// checkOptionalCounts checks each present count against MaxTokens.
func checkOptionalCounts(cols ...optCount) error {
	for _, c := range cols {
		if c.v != nil {
			if err := checkCount(c.name, *c.v, MaxTokens); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkCount(name string, v, ceiling int64) error {
	if v < 0 || v > ceiling {
		return &FieldError{name, strconv.FormatInt(v, 10), fmt.Sprintf("must be 0 to %d", ceiling)}
	}
	return nil
}

func checkFloat(name string, v, ceiling float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > ceiling {
		return &FieldError{name, strconv.FormatFloat(v, 'g', -1, 64), fmt.Sprintf("must be a finite number from 0 to %g", ceiling)}
	}
	return nil
}

// checkString refuses invalid UTF-8, control characters (a NUL or an
// escape sequence would break a header or a terminal) and strings longer
// than MaxStringBytes.
func checkString(name, s string) error {
	if len(s) > MaxStringBytes {
		return &FieldError{name, strconv.Itoa(len(s)) + " bytes", fmt.Sprintf("longer than %d bytes", MaxStringBytes)}
	}
	printable := true // the common case, printable ASCII, in one pass of bytes
	for i := 0; i < len(s) && printable; i++ {
		printable = s[i] >= 0x20 && s[i] < 0x7f
	}
	if printable {
		return nil
	}
	if !utf8.ValidString(s) {
		return &FieldError{name, strconv.QuoteToASCII(s), "is not valid UTF-8"}
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) {
			return &FieldError{name, strconv.QuoteToASCII(s), "holds a control character"}
		}
	}
	return nil
}

// validateGraph checks a request's place in an agent graph: at most
// MaxParents parents, none of them itself, each a valid id, and a known
// role.
func (r *Request) validateGraph() error {
	if len(r.ParentIDs) > MaxParents {
		return &FieldError{"parent_ids", strconv.Itoa(len(r.ParentIDs)) + " entries", fmt.Sprintf("at most %d", MaxParents)}
	}
	for _, id := range r.ParentIDs {
		if id == "" || id == r.RequestID {
			return &FieldError{"parent_ids", strconv.Quote(clip(id)), "must name other requests"}
		}
		if err := checkString("parent_ids", id); err != nil {
			return err
		}
	}
	switch r.Role {
	case "", RolePlanner, RoleSubAgent, RoleToolFollowUp, RoleChat:
		return nil
	}
	return &FieldError{"role", strconv.Quote(clip(r.Role)), fmt.Sprintf("is not one of %s, %s, %s, %s", RolePlanner, RoleSubAgent, RoleToolFollowUp, RoleChat)}
}
