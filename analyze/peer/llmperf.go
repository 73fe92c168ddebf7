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

func isLLMPerfRecord(first map[string]json.RawMessage) bool {
	return has(first, "ttft_s", "end_to_end_latency_s", "number_input_tokens")
}

func isLLMPerfSummary(obj map[string]json.RawMessage) bool {
	return hasAny(obj, "results_num_completed_requests", "results_ttft_s_mean")
}

type llmperfRecord struct {
	ErrorCode    *int     `json:"error_code"`
	ErrorMsg     string   `json:"error_msg"`
	TTFT         *float64 `json:"ttft_s"`
	E2E          *float64 `json:"end_to_end_latency_s"`
	InputTokens  anyInt   `json:"number_input_tokens"`
	OutputTokens anyInt   `json:"number_output_tokens"`
}

// readLLMPerfRecords reads LLMPerf's individual responses. The file keeps
// no send times and no token times: every request is taken as sent at 0
// (latencies are exact; throughput and time series are not), and a
// request's tokens are its first at TTFT and its end at its latency.
func readLLMPerfRecords(docs []json.RawMessage, src string) (Run, error) {
	r := Run{Tool: "LLMPerf", Source: src, ID: runID("llmperf", src), Completed: -1, SendTimes: SentAllAtOnce, NoTiming: true}
	for i, d := range docs {
		var rec llmperfRecord
		if err := json.Unmarshal(d, &rec); err != nil {
			return r, fmt.Errorf("element %d: %w", i, err)
		}
		q := Request{OK: rec.ErrorCode == nil, Error: rec.ErrorMsg, TTFTNs: -1, E2ENs: -1, InputTokens: int64(rec.InputTokens), OutputTokens: int64(rec.OutputTokens), Streamed: true}
		if rec.ErrorCode != nil {
			q.Status = max(*rec.ErrorCode, 0)
			q.OutputTokens = 0
		} else {
			if rec.TTFT != nil {
				q.TTFTNs = secondsToNs(*rec.TTFT)
			}
			if rec.E2E != nil {
				q.E2ENs = secondsToNs(*rec.E2E)
			}
		}
		r.Requests = append(r.Requests, q)
	}
	r.Notes = append(r.Notes, fmt.Sprintf("%s is LLMPerf's per-request file, which keeps no send or token times: latency percentiles are exact, but no throughput or time series follows from it, and ITL is the per-request mean only (see its _summary.json)", src))
	return r, nil
}

// readLLMPerfSummary reads LLMPerf's summary: its figures as given. Its
// duration follows from completed requests and their rate per minute.
func readLLMPerfSummary(obj map[string]json.RawMessage, src string) ([]Run, error) {
	r := Run{Tool: "LLMPerf", Source: src, ID: runID("llmperf", src), Completed: -1}
	_ = json.Unmarshal(obj["model"], &r.Model)
	for k, raw := range obj {
		if !strings.HasPrefix(k, "results_") {
			continue
		}
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
