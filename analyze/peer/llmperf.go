package peer

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// LLMPerf (ray-project/llmperf, token_benchmark_ray.py,
// run_token_benchmark) writes {name}_individual_responses.json, a JSON
// array of flat per-request dicts in seconds (ttft_s,
// end_to_end_latency_s, inter_token_latency_s as the request's mean gap,
// number_input_tokens, number_output_tokens, error_code null on
// success), and {name}_summary.json, a flat object of results_* figures
// (json.dump with default=str, so numpy integers are strings).

func init() {
	registerRecords(recordFormat{tool: "LLMPerf", match: isLLMPerfRecord, read: readLLMPerfRecords})
	register(format{tool: "LLMPerf", match: isLLMPerfSummary, read: readLLMPerfSummary})
}

func isLLMPerfRecord(first object) bool {
	return first.has("ttft_s", "end_to_end_latency_s", "number_input_tokens")
}

func isLLMPerfSummary(o object) bool {
	return o.hasAny("results_num_completed_requests", "results_ttft_s_mean")
}

type llmperfRecord struct {
	ErrorCode    *anyInt          `json:"error_code"`
	ErrorMsg     string           `json:"error_msg"`
	TTFT         *json.RawMessage `json:"ttft_s"`
	E2E          *json.RawMessage `json:"end_to_end_latency_s"`
	InputTokens  *anyInt          `json:"number_input_tokens"`
	OutputTokens *anyInt          `json:"number_output_tokens"`
}

// readLLMPerfRecords reads LLMPerf's individual responses. The file keeps
// no send times and no token times: every request is taken as sent at 0
// (latencies are exact; throughput and time series are not), and a
// request's tokens are its first at TTFT and its end at its latency.
func readLLMPerfRecords(docs recordDocs, src string) (Run, error) {
	r := Run{Tool: "LLMPerf", Source: src, ID: runID("llmperf", src), Completed: -1, SendTimes: SentAllAtOnce, NoTiming: true}
	r.records = func(fn func(q *Request) error) error {
		return docs.each(func(raw []byte, where string) error {
			var rec llmperfRecord
			if err := json.Unmarshal(raw, &rec); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			q := Request{OK: rec.ErrorCode == nil, Error: rec.ErrorMsg, TTFTNs: -1, E2ENs: -1, InputTokens: -1, OutputTokens: -1, Streamed: true}
			if n := rec.InputTokens; n != nil {
				q.InputTokens = countOf(*n)
			}
			if n := rec.OutputTokens; n != nil {
				q.OutputTokens = countOf(*n)
			}
			if rec.ErrorCode != nil {
				// An HTTP status where LLMPerf kept one; its -1 (an
				// exception) is no status.
				if c := int64(*rec.ErrorCode); c >= 100 && c <= 599 {
					q.Status = int(c)
				}
				q.OutputTokens = 0
			} else {
				q.TTFTNs = secondsField(rec.TTFT)
				q.E2ENs = secondsField(rec.E2E)
			}
			return fn(&q)
		})
	}
	r.Notes = append(r.Notes, fmt.Sprintf("%s is LLMPerf's per-request file, which keeps no send or token times: latency percentiles are exact, but no throughput, time series or ITL follows from it (it keeps each request's mean token gap only; see its _summary.json)", src))
	return r, nil
}

// countOf is a token count read as anyInt, invalid when out of range.
func countOf(n anyInt) int64 {
	if n == invalid {
		return invalid
	}
	return tokens(float64(n))
}

// secondsField converts a time in seconds a record may hold: -1 when
// absent or null, invalid when not a valid time.
func secondsField(raw *json.RawMessage) int64 {
	if raw == nil {
		return -1
	}
	x, present, err := parseNumber(*raw)
	if err != nil {
		return invalid
	}
	if !present {
		return -1
	}
	return secondsToNs(x)
}

// readLLMPerfSummary reads LLMPerf's summary: its figures as given. Its
// duration follows from completed requests and their rate per minute.
func readLLMPerfSummary(o object) ([]Run, error) {
	src := o.src
	r := Run{Tool: "LLMPerf", Source: src, ID: runID("llmperf", src), Completed: -1}
	r.Model = o.str("model")
	for _, k := range o.keys {
		if !strings.HasPrefix(k, "results_") {
			continue
		}
		raw := o.raw(k)
		x, ok := number(raw)
		if !ok {
			var s string
			if json.Unmarshal(raw, &s) != nil {
				continue
			}
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				continue // results_error_code_frequency is a Python dict's repr
			}
			x = f
		}
		f := Figure{Name: k, Value: x}
		if strings.Contains(k, "latency_s") || strings.Contains(k, "ttft_s") {
			f.Unit = "s"
		}
		r.Figures = append(r.Figures, f)
	}
	sort.Slice(r.Figures, func(i, j int) bool { return r.Figures[i].Name < r.Figures[j].Name })
	if c, ok := r.Figure("results_num_completed_requests"); ok {
		r.Completed = int64(c)
		if perMin, ok := r.Figure("results_num_completed_requests_per_min"); ok && perMin > 0 {
			r.DurationS = c / perMin * 60
		}
	}
	r.Remedy = "give the _individual_responses.json beside it (LLMPerf's per-request file)"
	r.Notes = append(r.Notes, fmt.Sprintf("%s is an LLMPerf summary: its figures are reported as given, and no interval can be computed; %s", src, r.Remedy))
	return []Run{r}, nil
}
