package peer

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// GenAI-Perf (triton-inference-server/perf_analyzer, genai-perf/) writes
// two files read here, their shapes from its source: the raw
// profile_export.json that perf_analyzer writes
// (src/profile_data_exporter.cc, ProfileDataExporter::ConvertToJson:
// experiments of requests with a start timestamp and response_timestamps
// in epoch nanoseconds) and the summary profile_export_genai_perf.json
// (genai_perf/export_data/json_exporter.py: metric objects in ms beside
// input_config).

func init() {
	register(format{tool: "GenAI-Perf", match: isGenAIPerfRaw, read: readGenAIPerfRaw})
	register(format{tool: "GenAI-Perf", match: isGenAIPerfSummary, read: readGenAIPerfSummary})
}

// isGenAIPerfRaw tells perf_analyzer's raw export by its experiments
// beside service_kind.
func isGenAIPerfRaw(o object) bool {
	return o.has("experiments", "service_kind")
}

// isGenAIPerfSummary tells GenAI-Perf's summary: metric objects beside
// input_config, without AIPerf's own fields.
func isGenAIPerfSummary(o object) bool {
	return o.has("input_config") && isMetricSummary(o, "request_throughput") && !isAIPerfSummary(o)
}

// genaiPerfRaw is one raw request of an experiment.
type genaiPerfRaw struct {
	Timestamp          int64                        `json:"timestamp"`
	ResponseTimestamps []int64                      `json:"response_timestamps"`
	ResponseOutputs    []map[string]json.RawMessage `json:"response_outputs"`
}

// readGenAIPerfRaw reads perf_analyzer's raw export, one run per
// experiment (requests read by genaiPerfRequest, element by element). The
// file holds text, not token counts: output tokens are counted as content
// events (one token per event, as vLLM and SGLang stream), input tokens
// are unknown.
func readGenAIPerfRaw(o object) ([]Run, error) {
	src := o.src
	tool := "GenAI-Perf (perf_analyzer " + o.str("version") + ")"
	c, err := o.array("experiments")
	if err != nil {
		return nil, err
	}
	defer c.close()
	total := o.elems("experiments")
	var runs []Run
	for ei := 0; ; ei++ {
		label := src
		if total > 1 {
			label = fmt.Sprintf("%s[%d]", src, ei)
		}
		e, err := c.nextObject(o.file, label)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("experiment %d: %w", ei, err)
		}
		var exp struct {
			Mode  string  `json:"mode"`
			Value float64 `json:"value"`
		}
		var windows []int64
		if err := errors.Join(e.decode("experiment", &exp), e.decode("window_boundaries", &windows)); err != nil {
			return nil, fmt.Errorf("experiment %d: fields of the wrong type: %w", ei, err)
		}
		r := Run{Tool: tool, Source: label, ID: runID("genai-perf", label) + "-" + exp.Mode + strconv.FormatFloat(exp.Value, 'g', -1, 64),
			Backend: o.str("service_kind"), Completed: -1}
		switch exp.Mode {
		case "request_rate":
			r.OfferedRate = exp.Value
		case "concurrency":
			r.MaxConcurrency = int(min(max(exp.Value, -1), maxRate+1))
		}
		t0 := int64(math.MaxInt64)
		if err := eachGenAIPerfRaw(e, ei, func(q genaiPerfRaw) error { t0 = min(t0, q.Timestamp); return nil }); err != nil {
			return nil, err
		}
		r.records = func(fn func(q *Request) error) error {
			return eachGenAIPerfRaw(e, ei, func(q genaiPerfRaw) error {
				req := genaiPerfRequest(q.Timestamp-t0, q.Timestamp, q.ResponseTimestamps, q.ResponseOutputs)
				return fn(&req)
			})
		}
		if w := windows; len(w) >= 2 && w[len(w)-1] > w[0] {
			r.DurationS = float64(w[len(w)-1]-w[0]) / 1e9
			r.completedFromRecords = true
		}
		r.Notes = append(r.Notes, fmt.Sprintf("%s is a GenAI-Perf raw export: it holds text, not token counts, so output tokens are counted as streamed responses and prompt tokens are unknown", label))
		runs = append(runs, r)
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("no experiments")
	}
	return runs, nil
}

// eachGenAIPerfRaw decodes an experiment's requests one at a time.
func eachGenAIPerfRaw(e object, ei int, fn func(q genaiPerfRaw) error) error {
	c, err := e.array("requests")
	if err != nil {
		return fmt.Errorf("experiment %d: %w", ei, err)
	}
	defer c.close()
	for i := 0; ; i++ {
		raw, err := c.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("experiment %d request %d: %w", ei, i, err)
		}
		var q genaiPerfRaw
		if err := json.Unmarshal(raw, &q); err != nil {
			return fmt.Errorf("experiment %d request %d: %w", ei, i, err)
		}
		if len(q.ResponseOutputs) != 0 && len(q.ResponseOutputs) != len(q.ResponseTimestamps) {
			return fmt.Errorf("experiment %d request %d: %d responses for %d response timestamps", ei, i, len(q.ResponseOutputs), len(q.ResponseTimestamps))
		}
		if err := fn(q); err != nil {
			return err
		}
	}
}

// genaiPerfRequest reads one raw request. A response may bundle several
// SSE events (GenAI-Perf's own parser splits them): each content event is
// a token, and a response with any is a token event at its timestamp. An
// OpenAI stream's closing "data: [DONE]" carries no token, and the request
// ends at its last token event. A non-streamed response (a whole
// chat.completion) is one response with no TTFT. A request with no token
// failed, with the error its responses give where they give one.
func genaiPerfRequest(sent, start int64, stamps []int64, outs []map[string]json.RawMessage) Request {
	q := Request{SentNs: sent, TTFTNs: -1, E2ENs: -1, InputTokens: -1, Streamed: true}
	var tokens []int64
	var errText string
	whole := false
	for j, ts := range stamps {
		if len(outs) == 0 {
			tokens, q.OutputTokens = append(tokens, ts), q.OutputTokens+1 // no outputs recorded: each response a token
			continue
		}
		n, isWhole, e := responseTokens(outs[j])
		if e != "" && errText == "" {
			errText = e
		}
		if n > 0 {
			tokens, q.OutputTokens = append(tokens, ts), q.OutputTokens+int64(n)
			whole = whole || isWhole
		}
	}
	if len(tokens) == 0 {
		q.Error = cmp.Or(errText, "no token in any response")
		q.OutputTokens = 0
		return q
	}
	q.OK = true
	q.E2ENs = tokens[len(tokens)-1] - start
	if whole {
		q.Streamed, q.OutputTokens = false, -1 // the text's tokens are not counted here
		return q
	}
	q.TTFTNs = tokens[0] - start
	for j := 1; j < len(tokens); j++ {
		q.GapsNs = append(q.GapsNs, tokens[j]-tokens[j-1])
	}
	return q
}

// responseTokens counts the tokens of one raw response output: its
// content events (several may be bundled, one per "data:" line), or 1 for
// a whole non-streamed completion (whole set), and the error message an
// error body or event carries.
func responseTokens(out map[string]json.RawMessage) (n int, whole bool, errText string) {
	raw, ok := out["response"]
	if !ok {
		return min(len(out), 1), false, "" // a Triton output tensor: one response, one token
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return 1, false, ""
	}
	var bodies []string
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "data:"); ok {
			bodies = append(bodies, strings.TrimSpace(rest))
		}
	}
	if len(bodies) == 0 { // not SSE: a whole response body
		bodies, whole = []string{strings.TrimSpace(s)}, true
	}
	for _, b := range bodies {
		if b == "" || b == "[DONE]" {
			continue
		}
		var chunk struct {
			Object  string `json:"object"`
			Message string `json:"message"`
			Error   *struct {
				Message string `json:"message"`
			} `json:"error"`
			Choices []struct {
				Delta struct {
					Content          *string `json:"content"`
					ReasoningContent *string `json:"reasoning_content"`
				} `json:"delta"`
				Message struct {
					Content *string `json:"content"`
				} `json:"message"`
				Text *string `json:"text"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(b), &chunk) != nil {
			continue
		}
		switch {
		case chunk.Error != nil:
			errText = chunk.Error.Message
		case chunk.Object == "error":
			errText = chunk.Message
		}
		for _, c := range chunk.Choices {
			if nonEmpty(c.Delta.Content) || nonEmpty(c.Delta.ReasoningContent) || nonEmpty(c.Text) || nonEmpty(c.Message.Content) {
				n++
				break
			}
		}
	}
	return n, whole && n > 0, errText
}

func nonEmpty(s *string) bool { return s != nil && *s != "" }

// readGenAIPerfSummary reads GenAI-Perf's summary: its figures as given.
func readGenAIPerfSummary(o object) ([]Run, error) {
	src := o.src
	ms := metricObjects(o)
	r := Run{Tool: "GenAI-Perf", Source: src, ID: runID("genai-perf", src), Completed: -1, Figures: metricFigures(ms)}
	var cfg struct {
		Model []string `json:"model"`
	}
	if json.Unmarshal(o.raw("input_config"), &cfg) == nil && len(cfg.Model) > 0 {
		r.Model = cfg.Model[0]
	}
	r.Remedy = "give the raw profile_export.json beside it (GenAI-Perf's per-request export)"
	r.Notes = append(r.Notes, fmt.Sprintf("%s is a GenAI-Perf summary: its figures are reported as given, and no interval can be computed; %s", src, r.Remedy))
	return []Run{r}, nil
}
