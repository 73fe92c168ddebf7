package analyze

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/servetrace/servetrace/trace"
)

// vllmResult is the part of a `vllm bench serve --save-result
// --save-detailed` JSON file analysis reads. Times are in seconds.
type vllmResult struct {
	Backend    string          `json:"backend"`
	ModelID    string          `json:"model_id"`
	Date       string          `json:"date"`
	Duration   float64         `json:"duration"`
	InputLens  []int64         `json:"input_lens"`
	OutputLens []int64         `json:"output_lens"`
	TTFTs      []float64       `json:"ttfts"`
	ITLs       [][]float64     `json:"itls"`
	StartTimes []float64       `json:"start_times"`
	Errors     []string        `json:"errors"`
	Rate       json.RawMessage `json:"request_rate"`
	Completed  *int64          `json:"completed"`
}

// everyAtOnce reports whether a vLLM request_rate says every request was
// sent at once: "inf", as vLLM writes float("inf") (the JSON token
// Infinity or the string "inf").
func everyAtOnce(rate string) bool {
	r, err := strconv.ParseFloat(strings.TrimPrefix(strings.ToLower(rate), "+"), 64)
	return err == nil && math.IsInf(r, 1)
}

// isVLLMResult reports whether a path names a vLLM result file rather
// than a run directory.
func isVLLMResult(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && strings.HasSuffix(path, ".json")
}

// readVLLMResult converts a vLLM detailed result into result columns, so
// a vLLM run gets the same intervals. Per request: sent from start_times
// (relative to the first); without them, at 0 when the request rate was
// inf (every request sent at once), else in send order spread evenly over
// the duration, and a note says so; first token at TTFT, one token event
// per ITL entry, done at the last event. The summary carries the file's
// own duration, over which a report of the file alone counts throughput:
// vLLM's request_throughput is completed / duration.
func readVLLMResult(path string) (*resultColumns, RunSummary, []string, error) {
	var notes []string
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, RunSummary{}, nil, fmt.Errorf("read vLLM result: %w", err)
	}
	var v vllmResult
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, RunSummary{}, nil, fmt.Errorf("%s: not a vLLM bench serve result JSON: %w", path, err)
	}
	n := len(v.TTFTs)
	if n == 0 || len(v.ITLs) != n || len(v.InputLens) != n || len(v.OutputLens) != n {
		return nil, RunSummary{}, nil, fmt.Errorf("%s: no per-request data (ttfts %d, itls %d, input_lens %d, output_lens %d): rerun vllm bench serve with --save-result --save-detailed",
			path, len(v.TTFTs), len(v.ITLs), len(v.InputLens), len(v.OutputLens))
	}
	if len(v.Errors) != 0 && len(v.Errors) != n {
		return nil, RunSummary{}, nil, fmt.Errorf("%s: %d errors for %d requests", path, len(v.Errors), n)
	}
	rate := strings.Trim(string(v.Rate), `"`)
	starts := make([]int64, n)
	switch {
	case len(v.StartTimes) == n:
		t0 := v.StartTimes[0]
		for _, s := range v.StartTimes {
			t0 = math.Min(t0, s)
		}
		for i, s := range v.StartTimes {
			starts[i] = int64((s - t0) * 1e9)
		}
	case everyAtOnce(rate):
		notes = append(notes, fmt.Sprintf("%s has no start_times and a request rate of inf: every request is taken as sent at t = 0", filepath.Base(path)))
	default:
		for i := range starts {
			starts[i] = int64(float64(i) / float64(n) * v.Duration * 1e9)
		}
		notes = append(notes, fmt.Sprintf("%s has no start_times: send order is kept and sends are spread evenly over its %.1f s, so its time series are approximate", filepath.Base(path), v.Duration))
	}
	c := &resultColumns{n: n, tokenOffsets: []int64{0}, featureOffsets: []int64{0}, prefixOffsets: []int64{0}}
	for i := range n {
		sent := starts[i]
		ok := len(v.Errors) == 0 || v.Errors[i] == ""
		c.warmup = append(c.warmup, false)
		c.stream = append(c.stream, true)
		c.scheduled, c.admitted, c.sent = append(c.scheduled, sent), append(c.admitted, sent), append(c.sent, sent)
		c.usagePrompt = append(c.usagePrompt, null)
		c.promptSent, c.inputTokens = append(c.promptSent, v.InputLens[i]), append(c.inputTokens, v.InputLens[i])
		c.requestedOutput, c.maxTokens = append(c.requestedOutput, v.OutputLens[i]), append(c.maxTokens, 0)
		c.tenant, c.model, c.adapter, c.phase = append(c.tenant, ""), append(c.model, v.ModelID), append(c.adapter, ""), append(c.phase, "")
		c.finishReason, c.turn = append(c.finishReason, ""), append(c.turn, 0)
		status := int64(200)
		if !ok {
			status = 0 // vLLM records the error text, not the status
		}
		c.status = append(c.status, status)
		c.requestID = append(c.requestID, strconv.Itoa(i))
		c.featureOffsets, c.prefixOffsets = append(c.featureOffsets, 0), append(c.prefixOffsets, 0)
		if !ok {
			c.outcome = append(c.outcome, trace.OutcomeHTTPError)
			c.firstChunk, c.firstToken, c.done = append(c.firstChunk, null), append(c.firstToken, null), append(c.done, null)
			c.observedOut = append(c.observedOut, 0)
			c.tokenOffsets = append(c.tokenOffsets, int64(len(c.tokenTimes)))
			continue
		}
		c.outcome = append(c.outcome, trace.OutcomeOK)
		t := int64(v.TTFTs[i] * 1e9)
		c.firstChunk, c.firstToken = append(c.firstChunk, sent+t), append(c.firstToken, sent+t)
		c.tokenTimes = append(c.tokenTimes, t)
		for _, gap := range v.ITLs[i] {
			t += int64(gap * 1e9)
			c.tokenTimes = append(c.tokenTimes, t)
		}
		c.tokenOffsets = append(c.tokenOffsets, int64(len(c.tokenTimes)))
		c.done = append(c.done, sent+t)
		c.observedOut = append(c.observedOut, v.OutputLens[i])
	}
	// An offered rate of inf is no number JSON can hold: 0, with
	// AllAtOnce.
	offered, _ := strconv.ParseFloat(rate, 64)
	sum := RunSummary{Dir: path, RunID: "vllm:" + strings.TrimSuffix(filepath.Base(path), ".json"), Complete: true,
		Target: strings.TrimSpace(v.Backend + " " + v.ModelID), AllAtOnce: everyAtOnce(rate)}
	if !math.IsInf(offered, 0) && !math.IsNaN(offered) {
		sum.OfferedRate = offered
	}
	if v.Duration > 0 {
		completed := int64(n - failures(v.Errors))
		if v.Completed != nil {
			completed = *v.Completed
		}
		sum.AchievedRate = float64(completed) / v.Duration
		sum.fileDurationS = v.Duration
	}
	return c, sum, notes, nil
}

// failures counts the non-empty error strings of a vLLM result.
func failures(errs []string) int {
	k := 0
	for _, e := range errs {
		if e != "" {
			k++
		}
	}
	return k
}

// appendColumns appends o's rows to c.
func (c *resultColumns) appendColumns(o *resultColumns) {
	if len(c.tokenOffsets) == 0 {
		c.tokenOffsets, c.featureOffsets, c.prefixOffsets = []int64{0}, []int64{0}, []int64{0}
	}
	shift := func(dst *[]int64, offs []int64, base int64) {
		for _, o := range offs[1:] {
			*dst = append(*dst, base+o)
		}
	}
	shift(&c.tokenOffsets, o.tokenOffsets, int64(len(c.tokenTimes)))
	shift(&c.featureOffsets, o.featureOffsets, int64(len(c.features)))
	shift(&c.prefixOffsets, o.prefixOffsets, int64(len(c.prefixBlocks)))
	c.tokenTimes = append(c.tokenTimes, o.tokenTimes...)
	c.features = append(c.features, o.features...)
	c.prefixBlocks = append(c.prefixBlocks, o.prefixBlocks...)
	c.warmup, c.stream, c.outcome = append(c.warmup, o.warmup...), append(c.stream, o.stream...), append(c.outcome, o.outcome...)
	c.scheduled, c.admitted, c.sent = append(c.scheduled, o.scheduled...), append(c.admitted, o.admitted...), append(c.sent, o.sent...)
	c.firstChunk, c.firstToken, c.done = append(c.firstChunk, o.firstChunk...), append(c.firstToken, o.firstToken...), append(c.done, o.done...)
	c.usagePrompt, c.observedOut, c.promptSent = append(c.usagePrompt, o.usagePrompt...), append(c.observedOut, o.observedOut...), append(c.promptSent, o.promptSent...)
	c.tenant, c.model, c.adapter, c.phase = append(c.tenant, o.tenant...), append(c.model, o.model...), append(c.adapter, o.adapter...), append(c.phase, o.phase...)
	c.finishReason, c.turn, c.status = append(c.finishReason, o.finishReason...), append(c.turn, o.turn...), append(c.status, o.status...)
	if c.wantIDs {
		c.requestID = append(c.requestID, o.requestID...)
	}
	c.inputTokens, c.requestedOutput, c.maxTokens = append(c.inputTokens, o.inputTokens...), append(c.requestedOutput, o.requestedOutput...), append(c.maxTokens, o.maxTokens...)
	c.n += o.n
}

// VLLMFormat returns the report under the JSON field names of `vllm bench
// serve` results, so dashboards built on them keep working. Latencies are
// in ms; percentiles are named p50, p99, p99.9 as vLLM names them.
func VLLMFormat(rep *Report) map[string]any {
	out := map[string]any{
		"duration":               rep.Throughput.DurationS,
		"completed":              rep.Requests.Outcomes[trace.OutcomeOK],
		"failed":                 rep.Requests.Counted - rep.Requests.Outcomes[trace.OutcomeOK],
		"total_input_tokens":     int64(math.Round(rep.Throughput.InputTokens)),
		"total_output_tokens":    int64(math.Round(rep.Throughput.OutputTokens)),
		"request_throughput":     rep.Throughput.RequestsPerS,
		"output_throughput":      rep.Throughput.OutputTokensPerS,
		"total_token_throughput": rep.Throughput.TotalTokensPerS,
		"request_goodput":        nil,
	}
	if rep.Goodput != nil {
		out["request_goodput"] = rep.Goodput.RequestsPerS
	}
	for name, key := range map[string]string{"ttft_ms": "ttft", "tpot_ms": "tpot", "itl_ms": "itl", "e2e_ms": "e2el"} {
		d, ok := rep.Metrics[name]
		if !ok || d.N == 0 {
			continue
		}
		out["mean_"+key+"_ms"] = d.Mean
		out["std_"+key+"_ms"] = d.Std
		out["median_"+key+"_ms"] = d.Median
		for _, q := range d.Quantiles {
			out["p"+strconv.FormatFloat(q.P, 'f', -1, 64)+"_"+key+"_ms"] = q.Value
		}
	}
	return out
}
