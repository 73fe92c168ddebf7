package trace

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ServerPhasesName is the run directory's file of server-side phases,
// written by replay --collect-spans and by servetrace spans.
const ServerPhasesName = "server_phases.parquet"

// MaxServerS bounds a server-reported duration: a week, as MaxClientMs
// bounds the client's.
const MaxServerS = MaxClientMs / 1000

// ServerPhases is one request's time inside the server as the server's
// own span of it says (vLLM's llm_request). Every duration is measured on
// the server's clock alone and is never subtracted from a client time
// (the hosts' clocks differ); only durations are compared. A phase the
// span did not give is null.
type ServerPhases struct {
	// TraceID is the request's W3C trace id (32 hex digits): analyze finds
	// a result's phases by recomputing it (internal/traceid).
	TraceID string `parquet:"trace_id" json:"trace_id"`
	// Source names the span's shape: "vllm" for vLLM's llm_request.
	Source string `parquet:"source,dict" json:"source"`
	// ServerRequestID is the server's own id of the request
	// (gen_ai.request.id), when given.
	ServerRequestID string `parquet:"server_request_id" json:"server_request_id,omitempty"`
	// QueueS: entering the scheduler's queue to first being scheduled.
	QueueS *float64 `parquet:"queue_s,optional" json:"queue_s,omitempty"`
	// PrefillS: first scheduled to the first token.
	PrefillS *float64 `parquet:"prefill_s,optional" json:"prefill_s,omitempty"`
	// DecodeS: the first token to the last.
	DecodeS *float64 `parquet:"decode_s,optional" json:"decode_s,omitempty"`
	// InferenceS: first scheduled to the last token (prefill + decode).
	InferenceS *float64 `parquet:"inference_s,optional" json:"inference_s,omitempty"`
	// TTFTS: the request's arrival at the server to its first token.
	TTFTS *float64 `parquet:"ttft_s,optional" json:"ttft_s,omitempty"`
	// E2ES: the request's arrival at the server to its end there.
	E2ES *float64 `parquet:"e2e_s,optional" json:"e2e_s,omitempty"`
	// PromptTokens and CompletionTokens are the server's counts.
	PromptTokens     *int64 `parquet:"prompt_tokens,optional" json:"prompt_tokens,omitempty"`
	CompletionTokens *int64 `parquet:"completion_tokens,optional" json:"completion_tokens,omitempty"`
}

// Validate checks a row: a trace id of 32 lowercase hex digits, and each
// duration finite, not negative and at most MaxServerS.
func (p *ServerPhases) Validate() error {
	if len(p.TraceID) != 32 || !isLowerHex(p.TraceID) {
		return &FieldError{"trace_id", clip(p.TraceID), "must be 32 lowercase hex digits"}
	}
	if err := checkString("source", p.Source); err != nil {
		return err
	}
	if err := checkString("server_request_id", p.ServerRequestID); err != nil {
		return err
	}
	if err := checkOptional(optFloat{"queue_s", p.QueueS, MaxServerS}, optFloat{"prefill_s", p.PrefillS, MaxServerS},
		optFloat{"decode_s", p.DecodeS, MaxServerS}, optFloat{"inference_s", p.InferenceS, MaxServerS},
		optFloat{"ttft_s", p.TTFTS, MaxServerS}, optFloat{"e2e_s", p.E2ES, MaxServerS}); err != nil {
		return err
	}
	return checkOptionalCounts(optCount{"prompt_tokens", p.PromptTokens}, optCount{"completion_tokens", p.CompletionTokens})
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// clip shortens a value quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// WriteServerPhases writes rows to runDir's ServerPhasesName, replacing
// an earlier file only once the new one is whole. Every row is checked
// first: nothing is written if one is invalid.
func WriteServerPhases(runDir string, rows []ServerPhases) error {
	for i := range rows {
		if err := rows[i].Validate(); err != nil {
			return fmt.Errorf("server phases row %d: %w", i+1, err)
		}
	}
	return writePartFile(filepath.Join(runDir, ServerPhasesName), rows, DefaultRowGroupRows)
}

// ReadServerPhases reads runDir's server phases; ok is false when the run
// has none. Every row is checked, and the file may hold no more rows than
// the run scheduled requests (maxPhasesRows where run.json does not say).
// maxPhasesRows bounds a server phases file whose run does not say how
// many requests it scheduled.
const maxPhasesRows = 1 << 26

func ReadServerPhases(runDir string) (rows []ServerPhases, ok bool, err error) {
	path := filepath.Join(runDir, ServerPhasesName)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	p, err := openPartFile[ServerPhases](path)
	if err != nil {
		return nil, false, err
	}
	defer p.close()
	// A run has at most one row per request it scheduled: a file claiming
	// more is not the run's (and would be held whole).
	most := int64(maxPhasesRows)
	if info, err := ReadRunInfo(runDir); err == nil && info.Scheduled > 0 {
		most = min(most, info.Scheduled)
	}
	if p.numRows > most {
		return nil, false, fmt.Errorf("%s holds %d rows, more than the run's %d requests: not this run's phases; move it away", path, p.numRows, most)
	}
	rows = make([]ServerPhases, 0, presize(p.numRows))
	for {
		r, err := p.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, false, err
		}
		rows = append(rows, *r)
	}
	for i := range rows {
		if err := rows[i].Validate(); err != nil {
			return nil, false, fmt.Errorf("%s row %d: %w", path, i+1, err)
		}
	}
	return rows, true, nil
}

// FieldCounts counts something by the field at fault. It prints as
// "N (field), ..." in the fields' order, so a note reads as words.
type FieldCounts map[string]int64

func (c FieldCounts) String() string {
	parts := make([]string, 0, len(c))
	for _, k := range slices.Sorted(maps.Keys(c)) {
		parts = append(parts, fmt.Sprintf("%d (%s)", c[k], k))
	}
	return strings.Join(parts, ", ")
}

// SpanCounts says what became of the spans a run's collector received
// (run.json's "spans"): only the run's request spans are kept, one per
// request; the rest are counted by why they were dropped.
type SpanCounts struct {
	// Spans is every span received.
	Spans int64 `json:"spans"`
	// Kept is the request spans of the run, one per request.
	Kept int64 `json:"kept"`
	// OtherRuns is request spans whose trace id is not the run's (other
	// traffic, another run).
	OtherRuns int64 `json:"other_runs"`
	// UnknownRequests is request spans under the run's half of the trace
	// id whose other half names no request the run sent (made up).
	UnknownRequests int64 `json:"unknown_requests"`
	// NotRequests is spans of another kind (not vLLM's llm_request).
	NotRequests int64 `json:"not_requests"`
	// Invalid is request spans with a phase that is not a number within
	// bounds, by the attribute at fault.
	Invalid FieldCounts `json:"invalid,omitempty"`
	// Duplicates is second spans for a request already kept.
	Duplicates int64 `json:"duplicates"`
	// OverLimit is request spans dropped because the collector held as
	// many as the run sent requests.
	OverLimit int64 `json:"over_limit"`
}
