package peer

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/servetrace/servetrace/trace"
)

// vllmResult is the part of a `vllm bench serve --save-result` file (and
// of benchmarks/benchmark_serving.py's before it) analysis reads whole;
// the per-request lists (vllmLists) are read element by element. The
// lists are present only with --save-detailed, start_times only since
// early 2026. Times are in seconds. Shape: vllm benchmarks/serve.py,
// save_to_pytorch_benchmark_format and the result dict of benchmark().
type vllmResult struct {
	Backend        string          `json:"backend"`
	ModelID        string          `json:"model_id"`
	Date           string          `json:"date"`
	Duration       float64         `json:"duration"`
	Rate           json.RawMessage `json:"request_rate"`
	Completed      *anyInt         `json:"completed"`
	MaxConcurrency *anyInt         `json:"max_concurrency"`
}

// vllmLists are the per-request lists of a detailed result, in the order
// a request's values are read.
var vllmLists = []string{"input_lens", "output_lens", "ttfts", "itls", "start_times", "latencies", "errors"}

// vllmFigure matches the aggregate fields vLLM writes beside the lists.
var vllmFigure = regexp.MustCompile(`^((mean|median|std|p[0-9.]+)_(ttft|tpot|itl|e2el|latency)_ms|request_throughput|request_inthroughput|input_throughput|request_goodput:?|output_throughput|total_token_throughput|max_output_tokens_per_s|max_concurrent_requests|duration|completed|failed|total_input_tokens|total_output_tokens)$`)

func init() {
	register(format{tool: "vLLM bench serve", match: isVLLM, read: readVLLM})
}

// isVLLM tells a vLLM result by its per-request lists, or by its
// summary: duration and completed beside a request throughput (spelt
// request_inthroughput before mid-2024) and latency figures, without
// the fields only SGLang writes.
func isVLLM(o object) bool {
	if isSGLang(o) {
		return false
	}
	if o.has("ttfts") && o.hasAny("itls", "input_lens", "output_lens") {
		return true
	}
	_, tput := number(o.raw("request_throughput"))
	_, old := number(o.raw("request_inthroughput"))
	if (tput || old) && o.hasAny("mean_ttft_ms", "median_ttft_ms", "mean_e2el_ms", "mean_tpot_ms") {
		return true
	}
	// A summary of latency statistics alone, without the throughput: two
	// or more of vLLM's own names, and no key of another shape.
	stats := 0
	for _, k := range o.keys {
		switch {
		case vllmLatencyStat.MatchString(k):
			stats++
		case !vllmFigure.MatchString(k) && !vllmSetting[k]:
			return false
		}
	}
	return stats >= 2
}

// vllmLatencyStat matches vLLM's per-metric latency statistics.
var vllmLatencyStat = regexp.MustCompile(`^(mean|median|std|p[0-9.]+)_(ttft|tpot|itl|e2el)_ms$`)

// vllmSetting are the settings a vLLM result writes beside its figures.
var vllmSetting = map[string]bool{"date": true, "backend": true, "model_id": true, "tokenizer_id": true, "num_prompts": true, "request_rate": true,
	"burstiness": true, "max_concurrency": true, "endpoint_type": true, "label": true}

// EveryAtOnce reports whether a request_rate says every request was sent
// at once: "inf", as Python writes float("inf") (the token Infinity, or
// the string "inf").
func EveryAtOnce(rate string) bool {
	r, err := strconv.ParseFloat(strings.TrimPrefix(strings.ToLower(rate), "+"), 64)
	return err == nil && math.IsInf(r, 1)
}

// decodeVLLM decodes the settings readVLLM reads whole.
func decodeVLLM(o object) (vllmResult, error) {
	var v vllmResult
	for _, f := range []struct {
		key  string
		into any
	}{{"backend", &v.Backend}, {"model_id", &v.ModelID}, {"date", &v.Date}, {"duration", &v.Duration}, {"request_rate", &v.Rate},
		{"completed", &v.Completed}, {"max_concurrency", &v.MaxConcurrency}} {
		if err := o.decode(f.key, f.into); err != nil {
			return v, fmt.Errorf("fields of the wrong type: %w", err)
		}
	}
	return v, nil
}

// readVLLM reads a vLLM result. Sends come from start_times (relative to
// the first); without them all at 0 when the rate was inf, else in file
// order spread evenly over the duration, and a note says so.
func readVLLM(o object) ([]Run, error) {
	src := o.src
	v, err := decodeVLLM(o)
	if err != nil {
		return nil, err
	}
	rate := strings.Trim(string(v.Rate), `"`)
	run := Run{Tool: "vLLM bench serve", Source: src, ID: runID("vllm", src), Model: v.ModelID, Backend: v.Backend,
		DurationS: v.Duration, Completed: -1, AllAtOnce: EveryAtOnce(rate), Figures: figures(o, vllmFigure), completedFromRecords: true}
	if r, err := strconv.ParseFloat(rate, 64); err == nil && !math.IsInf(r, 0) && !math.IsNaN(r) {
		run.OfferedRate = r
	}
	if v.Completed != nil {
		run.Completed = int64(*v.Completed)
	}
	if v.MaxConcurrency != nil {
		run.MaxConcurrency = int(*v.MaxConcurrency)
	}
	n := o.elems("ttfts")
	inputs, latencies := o.elems("input_lens"), o.elems("latencies")
	if n == 0 && inputs > 0 && latencies == inputs {
		return readVLLMPooling(run, o)
	}
	if n == 0 && inputs == 0 {
		run.Remedy = "rerun vllm bench serve with --save-result --save-detailed"
		run.Notes = append(run.Notes, fmt.Sprintf("%s is a summary (vllm bench serve without --save-detailed): its figures are reported as given, and no interval can be computed", src))
		if missing := missingKeys(o, "request_throughput", "duration", "completed"); missing != "" {
			run.Notes = append(run.Notes, fmt.Sprintf("%s has no %s (a vllm bench serve summary writes each): no rate follows from it, and its latency figures are reported as given", src, missing))
		}
		return []Run{run}, nil
	}
	if o.elems("itls") != n || inputs != n || o.elems("output_lens") != n {
		return nil, fmt.Errorf("per-request lists of different lengths (ttfts %d, itls %d, input_lens %d, output_lens %d): the file is cut or edited", n, o.elems("itls"), inputs, o.elems("output_lens"))
	}
	for _, l := range []string{"latencies", "errors", "start_times"} {
		if k := o.elems(l); k != 0 && k != n {
			return nil, fmt.Errorf("%d %s for %d requests: the file is cut or edited", k, l, n)
		}
	}
	send, err := vllmSends(&run, o, n)
	if err != nil {
		return nil, err
	}
	run.records = func(fn func(q *Request) error) error { return eachVLLM(o, n, send, fn) }
	return []Run{run}, nil
}

// vllmSend places request i, with its latency in seconds, in time: its
// send in ns from the run's first.
type vllmSend func(i int64, latencyS, startS float64) int64

// vllmSends says how the run's sends are placed, noting it where the
// file has no start_times.
func vllmSends(run *Run, o object, n int64) (func() vllmSend, error) {
	src := run.Source
	switch {
	case o.elems("start_times") == n:
		t0, err := minOfList(o, "start_times")
		if err != nil {
			return nil, err
		}
		return func() vllmSend {
			return func(_ int64, _, s float64) int64 { return secondsToNs(s - t0) }
		}, nil
	case run.AllAtOnce && run.MaxConcurrency > 0 && run.MaxConcurrency <= maxRate:
		run.SendTimes = SentByConcurrency
		slots := run.MaxConcurrency
		run.Notes = append(run.Notes, fmt.Sprintf("%s has no start_times, a request rate of inf and at most %d requests at once: each request is taken as sent when one of the %d slots freed, in file order", src, slots, slots))
		// In file order, each request starts when the earliest of the
		// slots frees, and holds it for its latency.
		return func() vllmSend {
			free := make([]float64, slots)
			return func(_ int64, lat, _ float64) int64 {
				k := 0
				for j := range free {
					if free[j] < free[k] {
						k = j
					}
				}
				start := free[k]
				if lat >= 0 && lat*1e3 <= trace.MaxClientMs {
					free[k] += lat
				}
				return secondsToNs(start)
			}
		}, nil
	case run.AllAtOnce:
		run.SendTimes = SentAllAtOnce
		run.Notes = append(run.Notes, fmt.Sprintf("%s has no start_times and a request rate of inf: every request is taken as sent at t = 0", src))
		return func() vllmSend { return func(int64, float64, float64) int64 { return 0 } }, nil
	case !(run.DurationS > 0 && run.DurationS*1e3 <= trace.MaxClientMs):
		run.SendTimes = SentAllAtOnce
		run.Notes = append(run.Notes, fmt.Sprintf("%s has no start_times and no valid duration (%g s) to spread its sends over: every request is taken as sent at t = 0", src, run.DurationS))
		return func() vllmSend { return func(int64, float64, float64) int64 { return 0 } }, nil
	}
	run.SendTimes = SentSpread
	d := run.DurationS
	run.Notes = append(run.Notes, fmt.Sprintf("%s has no start_times: send order is kept and sends are spread evenly over its %.1f s, so its time series are approximate", src, d))
	return func() vllmSend {
		return func(i int64, _, _ float64) int64 { return int64(float64(i) / float64(n) * d * 1e9) }
	}, nil
}

// missingKeys names the keys o lacks ("a, b or c"), "" when it has them
// all. request_throughput also counts as had under its 2024 name.
func missingKeys(o object, keys ...string) string {
	var out []string
	for _, k := range keys {
		if !o.has(k) && !(k == "request_throughput" && o.has("request_inthroughput")) {
			out = append(out, k)
		}
	}
	if len(out) < 2 {
		return strings.Join(out, "")
	}
	return strings.Join(out[:len(out)-1], ", ") + " or " + out[len(out)-1]
}

// minOfList is the least number of a list read element by element.
func minOfList(o object, key string) (float64, error) {
	c, err := o.array(key)
	if err != nil {
		return 0, err
	}
	defer c.close()
	t0 := math.Inf(1)
	for {
		raw, err := c.next()
		if err == io.EOF {
			return t0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("%s: %w", key, err)
		}
		x, present, err := parseNumber(raw)
		if err != nil {
			return 0, fmt.Errorf("%s element %d: %w", key, c.n-1, err)
		}
		if present && x > -1e15 && x < 1e15 {
			t0 = math.Min(t0, x)
		}
	}
}

// eachVLLM reads a detailed result's lists side by side, a request at a
// time. A request failed when it has an error text, or the zeros vLLM
// records for a failure whose error it left empty (its error is the
// response's reason, which can be "").
func eachVLLM(o object, n int64, sends func() vllmSend, fn func(q *Request) error) error {
	cursors := map[string]*cursor{}
	defer func() {
		for _, c := range cursors {
			c.close()
		}
	}()
	for _, l := range vllmLists {
		c, err := o.array(l)
		if err != nil {
			return err
		}
		cursors[l] = c
	}
	next := func(l string) ([]byte, error) {
		raw, err := cursors[l].next()
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", l, err)
		}
		return raw, nil
	}
	num := func(l string, raw []byte) (float64, bool, error) {
		if raw == nil {
			return 0, false, nil
		}
		x, present, err := parseNumber(raw)
		if err != nil {
			return 0, false, fmt.Errorf("%s: %w", l, err)
		}
		return x, present, nil
	}
	send := sends()
	var gaps []float64
	var q Request
	for i := range n {
		var raws [7][]byte
		for k, l := range vllmLists {
			raw, err := next(l)
			if err != nil {
				return err
			}
			raws[k] = raw
		}
		in, inOK, err := num("input_lens", raws[0])
		if err != nil {
			return err
		}
		out, outOK, err := num("output_lens", raws[1])
		if err != nil {
			return err
		}
		ttft, ttftOK, err := num("ttfts", raws[2])
		if err != nil {
			return err
		}
		if gaps, err = parseNumbers(raws[3], gaps[:0]); err != nil {
			return fmt.Errorf("itls: %w", err)
		}
		start, _, err := num("start_times", raws[4])
		if err != nil {
			return err
		}
		lat, latOK, err := num("latencies", raws[5])
		if err != nil {
			return err
		}
		errText := ""
		if raws[6] != nil {
			if errText, err = parseString(raws[6]); err != nil {
				return fmt.Errorf("errors: %w", err)
			}
		}
		q = Request{OK: errText == "" && !(ttft == 0 && out == 0 && len(gaps) == 0), TTFTNs: -1, E2ENs: -1, InputTokens: -1, OutputTokens: -1,
			Streamed: true, GapsNs: q.GapsNs[:0]}
		if inOK {
			q.InputTokens = tokens(in)
		}
		if outOK {
			q.OutputTokens = tokens(out)
		}
		latency := ttft
		for _, g := range gaps {
			latency += g
		}
		if latOK && lat > 0 {
			latency = lat
		}
		if !q.OK {
			latency = 0
		}
		q.SentNs = send(i, latency, start)
		if !q.OK {
			q.Error, q.OutputTokens = errText, 0
		} else {
			if ttftOK {
				q.TTFTNs = secondsToNs(ttft)
			} else {
				q.TTFTNs = invalid // a null or NaN TTFT of a success
			}
			for _, g := range gaps {
				q.GapsNs = append(q.GapsNs, secondsToNs(g))
			}
			if latOK && lat != 0 {
				q.E2ENs = secondsToNs(lat)
			}
		}
		if err := fn(&q); err != nil {
			return err
		}
	}
	return nil
}

// readVLLMPooling reads a pooling (embedding) benchmark: per request an
// input length and a latency, with no tokens streamed.
func readVLLMPooling(run Run, o object) ([]Run, error) {
	src := run.Source
	n := o.elems("input_lens")
	if k := o.elems("errors"); k != 0 && k != n {
		return nil, fmt.Errorf("%d errors for %d requests: the file is cut or edited", k, n)
	}
	run.SendTimes = SentSpread
	if run.AllAtOnce || !(run.DurationS > 0 && run.DurationS*1e3 <= trace.MaxClientMs) {
		run.SendTimes = SentAllAtOnce
	}
	d := run.DurationS
	run.records = func(fn func(q *Request) error) error {
		ins, err := o.array("input_lens")
		if err != nil {
			return err
		}
		defer ins.close()
		lats, err := o.array("latencies")
		if err != nil {
			return err
		}
		defer lats.close()
		errs, err := o.array("errors")
		if err != nil {
			return err
		}
		defer errs.close()
		for i := range n {
			in, err := ins.next()
			if err != nil {
				return fmt.Errorf("input_lens: %w", err)
			}
			lat, err := lats.next()
			if err != nil {
				return fmt.Errorf("latencies: %w", err)
			}
			errText := ""
			if raw, err := errs.next(); err == nil {
				if errText, err = parseString(raw); err != nil {
					return fmt.Errorf("errors: %w", err)
				}
			} else if err != io.EOF {
				return fmt.Errorf("errors: %w", err)
			}
			q := Request{OK: errText == "", TTFTNs: -1, E2ENs: -1, InputTokens: -1, OutputTokens: 0, Error: errText}
			if x, present, err := parseNumber(in); err != nil {
				return fmt.Errorf("input_lens: %w", err)
			} else if present {
				q.InputTokens = tokens(x)
			}
			if run.SendTimes == SentSpread {
				q.SentNs = int64(float64(i) / float64(n) * d * 1e9)
			}
			if q.OK {
				x, present, err := parseNumber(lat)
				if err != nil {
					return fmt.Errorf("latencies: %w", err)
				}
				q.E2ENs = invalid
				if present {
					q.E2ENs = secondsToNs(x)
				}
			}
			if err := fn(&q); err != nil {
				return err
			}
		}
		return nil
	}
	run.Notes = append(run.Notes, fmt.Sprintf("%s is a pooling benchmark: latencies only, and its sends are placed as a file without start_times would be", src))
	return []Run{run}, nil
}

// figures collects an object's numeric fields whose names match re, in
// name order; a unit is read off a _ms suffix.
func figures(o object, re *regexp.Regexp) []Figure {
	var out []Figure
	for _, k := range o.keys {
		if !re.MatchString(k) {
			continue
		}
		x, ok := number(o.raw(k))
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
	if raw == nil || json.Unmarshal(raw, &x) != nil || x == nil {
		return 0, false
	}
	return *x, true
}
