package peer

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// vllmResult is the part of a `vllm bench serve --save-result` file (and
// of benchmarks/benchmark_serving.py's before it) analysis reads; the
// per-request lists are present only with --save-detailed, start_times
// only since early 2026. Times are in seconds. Shape: vllm
// benchmarks/serve.py, save_to_pytorch_benchmark_format and the result
// dict of benchmark().
type vllmResult struct {
	Backend        string          `json:"backend"`
	ModelID        string          `json:"model_id"`
	Date           string          `json:"date"`
	Duration       float64         `json:"duration"`
	InputLens      []anyInt        `json:"input_lens"`
	OutputLens     []anyInt        `json:"output_lens"`
	TTFTs          []float64       `json:"ttfts"`
	ITLs           [][]float64     `json:"itls"`
	StartTimes     []float64       `json:"start_times"`
	Latencies      []float64       `json:"latencies"`
	Errors         []string        `json:"errors"`
	Rate           json.RawMessage `json:"request_rate"`
	Completed      *anyInt         `json:"completed"`
	MaxConcurrency *anyInt         `json:"max_concurrency"`
}

// vllmFigure matches the aggregate fields vLLM writes beside the lists.
var vllmFigure = regexp.MustCompile(`^((mean|median|std|p[0-9.]+)_(ttft|tpot|itl|e2el)_ms|request_throughput|request_inthroughput|input_throughput|request_goodput:?|output_throughput|total_token_throughput|max_output_tokens_per_s|max_concurrent_requests|duration|completed|failed|total_input_tokens|total_output_tokens)$`)

func init() {
	register(format{tool: "vLLM bench serve", match: isVLLM, read: readVLLM})
}

// isVLLM tells a vLLM result by its per-request lists, or by its
// summary: duration and completed beside a request throughput (spelt
// request_inthroughput before mid-2024) and latency figures, without
// the fields only SGLang writes.
func isVLLM(obj map[string]json.RawMessage) bool {
	if isSGLang(obj) {
		return false
	}
	if has(obj, "ttfts", "itls", "input_lens") {
		return true
	}
	return has(obj, "duration", "completed") && hasAny(obj, "request_throughput", "request_inthroughput") &&
		hasAny(obj, "mean_ttft_ms", "median_ttft_ms", "mean_e2el_ms", "mean_tpot_ms")
}

// EveryAtOnce reports whether a request_rate says every request was sent
// at once: "inf", as Python writes float("inf") (the token Infinity, or
// the string "inf").
func EveryAtOnce(rate string) bool {
	r, err := strconv.ParseFloat(strings.TrimPrefix(strings.ToLower(rate), "+"), 64)
	return err == nil && math.IsInf(r, 1)
}

// readVLLM reads a vLLM result. Sends come from start_times (relative to
// the first); without them all at 0 when the rate was inf, else in file
// order spread evenly over the duration, and a note says so.
func readVLLM(obj map[string]json.RawMessage, src string) ([]Run, error) {
	v, err := decodeVLLM(obj)
	if err != nil {
		return nil, err
	}
	rate := strings.Trim(string(v.Rate), `"`)
	run := Run{Tool: "vLLM bench serve", Source: src, ID: runID("vllm", src), Model: v.ModelID, Backend: v.Backend,
		DurationS: v.Duration, Completed: -1, AllAtOnce: EveryAtOnce(rate), Figures: figures(obj, vllmFigure)}
	if r, err := strconv.ParseFloat(rate, 64); err == nil && !math.IsInf(r, 0) && !math.IsNaN(r) {
		run.OfferedRate = r
	}
	if v.Completed != nil {
		run.Completed = int64(*v.Completed)
	}
	if v.MaxConcurrency != nil {
		run.MaxConcurrency = int(*v.MaxConcurrency)
	}
	n := len(v.TTFTs)
	if n == 0 && len(v.InputLens) > 0 && len(v.Latencies) == len(v.InputLens) {
		return readVLLMPooling(run, v, src)
	}
	if n == 0 && len(v.InputLens) == 0 {
		run.Remedy = "rerun vllm bench serve with --save-result --save-detailed"
		run.Notes = append(run.Notes, fmt.Sprintf("%s is a summary (vllm bench serve without --save-detailed): its figures are reported as given, and no interval can be computed", src))
		return []Run{run}, nil
	}
	if len(v.ITLs) != n || len(v.InputLens) != n || len(v.OutputLens) != n {
		return nil, fmt.Errorf("per-request lists of different lengths (ttfts %d, itls %d, input_lens %d, output_lens %d): the file is cut or edited", n, len(v.ITLs), len(v.InputLens), len(v.OutputLens))
	}
	if len(v.Latencies) != 0 && len(v.Latencies) != n {
		return nil, fmt.Errorf("%d latencies for %d requests: the file is cut or edited", len(v.Latencies), n)
	}
	if len(v.Errors) != 0 && len(v.Errors) != n {
		return nil, fmt.Errorf("%d errors for %d requests: the file is cut or edited", len(v.Errors), n)
	}
	if len(v.StartTimes) != 0 && len(v.StartTimes) != n {
		return nil, fmt.Errorf("%d start_times for %d requests: the file is cut or edited", len(v.StartTimes), n)
	}
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
	case run.AllAtOnce && run.MaxConcurrency > 0:
		run.SendTimes = SentByConcurrency
		starts = slotStarts(v, run.MaxConcurrency)
		run.Notes = append(run.Notes, fmt.Sprintf("%s has no start_times, a request rate of inf and at most %d requests at once: each request is taken as sent when one of the %d slots freed, in file order", src, run.MaxConcurrency, run.MaxConcurrency))
	case run.AllAtOnce:
		run.SendTimes = SentAllAtOnce
		run.Notes = append(run.Notes, fmt.Sprintf("%s has no start_times and a request rate of inf: every request is taken as sent at t = 0", src))
	default:
		run.SendTimes = SentSpread
		for i := range starts {
			starts[i] = int64(float64(i) / float64(n) * v.Duration * 1e9)
		}
		run.Notes = append(run.Notes, fmt.Sprintf("%s has no start_times: send order is kept and sends are spread evenly over its %.1f s, so its time series are approximate", src, v.Duration))
	}
	run.Requests = make([]Request, n)
	for i := range n {
		ok := vllmOK(v, i)
		r := Request{SentNs: starts[i], OK: ok, TTFTNs: -1, E2ENs: -1, InputTokens: int64(v.InputLens[i]), OutputTokens: int64(v.OutputLens[i]), Streamed: true}
		if !ok {
			r.Error = v.Errors[i]
			r.OutputTokens = 0
		} else {
			r.TTFTNs = secondsToNs(v.TTFTs[i])
			r.GapsNs = make([]int64, len(v.ITLs[i]))
			for j, g := range v.ITLs[i] {
				r.GapsNs[j] = secondsToNs(g)
			}
			if len(v.Latencies) == n && v.Latencies[i] > 0 {
				r.E2ENs = secondsToNs(v.Latencies[i])
			}
		}
		run.Requests[i] = r
	}
	if run.Completed < 0 {
		run.Completed = int64(n - run.Failed())
	}
	return []Run{run}, nil
}

// vllmOK reports whether request i succeeded: no error text, and not
// the zeros vLLM records for a failure whose error it left empty (its
// error is the response's reason, which can be "").
func vllmOK(v vllmResult, i int) bool {
	if len(v.Errors) > 0 && v.Errors[i] != "" {
		return false
	}
	return !(v.TTFTs[i] == 0 && v.OutputLens[i] == 0 && len(v.ITLs[i]) == 0)
}

// slotStarts rebuilds the sends of a run at rate inf under a concurrency
// cap: in file order, each request starts when the earliest of the slots
// frees, and holds it for its latency (its latencies entry, else TTFT
// plus its gaps; a failed one, 0).
func slotStarts(v vllmResult, slots int) []int64 {
	n := len(v.TTFTs)
	free := make([]float64, slots)
	starts := make([]int64, n)
	for i := range n {
		k := 0
		for j := range free {
			if free[j] < free[k] {
				k = j
			}
		}
		lat := v.TTFTs[i]
		for _, g := range v.ITLs[i] {
			lat += g
		}
		if len(v.Latencies) == n && v.Latencies[i] > 0 {
			lat = v.Latencies[i]
		}
		starts[i] = secondsToNs(free[k])
		free[k] += lat
	}
	return starts
}

// readVLLMPooling reads a pooling (embedding) benchmark: per request an
// input length and a latency, with no tokens streamed.
func readVLLMPooling(run Run, v vllmResult, src string) ([]Run, error) {
	n := len(v.InputLens)
	if len(v.Errors) != 0 && len(v.Errors) != n {
		return nil, fmt.Errorf("%d errors for %d requests: the file is cut or edited", len(v.Errors), n)
	}
	run.SendTimes = SentSpread
	if run.AllAtOnce {
		run.SendTimes = SentAllAtOnce
	}
	run.Requests = make([]Request, n)
	for i := range n {
		ok := len(v.Errors) == 0 || v.Errors[i] == ""
		r := Request{OK: ok, TTFTNs: -1, E2ENs: -1, InputTokens: int64(v.InputLens[i]), OutputTokens: 0}
		if run.SendTimes == SentSpread {
			r.SentNs = int64(float64(i) / float64(n) * v.Duration * 1e9)
		}
		if ok {
			r.E2ENs = secondsToNs(v.Latencies[i])
		} else {
			r.Error = v.Errors[i]
		}
		run.Requests[i] = r
	}
	run.Notes = append(run.Notes, fmt.Sprintf("%s is a pooling benchmark: latencies only, and its sends are placed as a file without start_times would be", src))
	if run.Completed < 0 {
		run.Completed = int64(n - run.Failed())
	}
	return []Run{run}, nil
}

// decodeVLLM decodes the fields readVLLM uses from a parsed object.
func decodeVLLM(obj map[string]json.RawMessage) (vllmResult, error) {
	var v vllmResult
	b, err := json.Marshal(obj)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("fields of the wrong type: %w", err)
	}
	return v, nil
}

// figures collects an object's numeric fields whose names match re, in
// name order; a unit is read off a _ms suffix.
func figures(obj map[string]json.RawMessage, re *regexp.Regexp) []Figure {
	var out []Figure
	for k, raw := range obj {
		if !re.MatchString(k) {
			continue
		}
		x, ok := number(raw)
		if !ok {
			continue
		}
		f := Figure{Name: k, Value: x}
		if strings.HasSuffix(k, "_ms") {
			f.Unit = "ms"
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// number decodes a JSON number; null, which json.Unmarshal would leave
// as 0, is no number: a tool that wrote null gave no figure.
func number(raw json.RawMessage) (float64, bool) {
	var x *float64
	if json.Unmarshal(raw, &x) != nil || x == nil {
		return 0, false
	}
	return *x, true
}

func secondsToNs(s float64) int64 { return int64(math.Round(s * 1e9)) }
