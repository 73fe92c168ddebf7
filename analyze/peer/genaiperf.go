package peer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
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
func isGenAIPerfRaw(obj map[string]json.RawMessage) bool {
	return has(obj, "experiments", "service_kind")
}

// isGenAIPerfSummary tells GenAI-Perf's summary: metric objects beside
// input_config, without AIPerf's own fields.
func isGenAIPerfSummary(obj map[string]json.RawMessage) bool {
	return has(obj, "input_config") && isMetricSummary(obj, "request_throughput") && !isAIPerfSummary(obj)
}

type genaiPerfRaw struct {
	Experiments []struct {
		Experiment struct {
			Mode  string  `json:"mode"`
			Value float64 `json:"value"`
		} `json:"experiment"`
		Requests []struct {
			Timestamp          int64                        `json:"timestamp"`
			ResponseTimestamps []int64                      `json:"response_timestamps"`
			ResponseOutputs    []map[string]json.RawMessage `json:"response_outputs"`
		} `json:"requests"`
		WindowBoundaries []int64 `json:"window_boundaries"`
	} `json:"experiments"`
	Version     string `json:"version"`
	ServiceKind string `json:"service_kind"`
	Endpoint    string `json:"endpoint"`
}

// readGenAIPerfRaw reads perf_analyzer's raw export, one run per
// experiment. A request's first response is its first token and the
// gaps are between responses; an OpenAI stream's closing "data: [DONE]"
// ends the request but carries no token. The file holds text, not token
// counts: output tokens are counted as content responses (one token per
// chunk, as vLLM and SGLang stream), input tokens are unknown.
func readGenAIPerfRaw(obj map[string]json.RawMessage, src string) ([]Run, error) {
	var g genaiPerfRaw
	b, _ := json.Marshal(obj)
	if err := json.Unmarshal(b, &g); err != nil {
		return nil, fmt.Errorf("fields of the wrong type: %w", err)
	}
	tool := "GenAI-Perf (perf_analyzer " + g.Version + ")"
	var runs []Run
	for ei, e := range g.Experiments {
		label := src
		if len(g.Experiments) > 1 {
			label = fmt.Sprintf("%s[%d]", src, ei)
		}
		r := Run{Tool: tool, Source: label, ID: runID("genai-perf", label) + "-" + e.Experiment.Mode + strconv.FormatFloat(e.Experiment.Value, 'g', -1, 64),
			Backend: g.ServiceKind, Completed: -1}
		switch e.Experiment.Mode {
		case "request_rate":
			r.OfferedRate = e.Experiment.Value
		case "concurrency":
			r.MaxConcurrency = int(e.Experiment.Value)
		}
		t0 := int64(math.MaxInt64)
		for _, q := range e.Requests {
			t0 = min(t0, q.Timestamp)
		}
		for i, q := range e.Requests {
			if len(q.ResponseOutputs) != 0 && len(q.ResponseOutputs) != len(q.ResponseTimestamps) {
				return nil, fmt.Errorf("experiment %d request %d: %d responses for %d response timestamps", ei, i, len(q.ResponseOutputs), len(q.ResponseTimestamps))
			}
			rq := Request{SentNs: q.Timestamp - t0, OK: len(q.ResponseTimestamps) > 0, TTFTNs: -1, E2ENs: -1, InputTokens: -1, OutputTokens: 0, Streamed: true}
			if !rq.OK {
				rq.Error = "no response recorded"
				r.Requests = append(r.Requests, rq)
				continue
			}
			var tokens []int64
			for j, ts := range q.ResponseTimestamps {
				if len(q.ResponseOutputs) == 0 || carriesToken(q.ResponseOutputs[j]) {
					tokens = append(tokens, ts)
				}
			}
			rq.E2ENs = q.ResponseTimestamps[len(q.ResponseTimestamps)-1] - q.Timestamp
			if len(tokens) > 0 {
				rq.TTFTNs = tokens[0] - q.Timestamp
				for j := 1; j < len(tokens); j++ {
					rq.GapsNs = append(rq.GapsNs, tokens[j]-tokens[j-1])
				}
			}
			rq.OutputTokens = int64(len(tokens))
			r.Requests = append(r.Requests, rq)
		}
		if w := e.WindowBoundaries; len(w) >= 2 && w[len(w)-1] > w[0] {
			r.DurationS = float64(w[len(w)-1]-w[0]) / 1e9
			ok := int64(len(r.Requests) - failed(r.Requests))
			r.Completed = ok
		}
		r.Notes = append(r.Notes, fmt.Sprintf("%s is a GenAI-Perf raw export: it holds text, not token counts, so output tokens are counted as streamed responses and prompt tokens are unknown", label))
		runs = append(runs, r)
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("no experiments")
	}
	return runs, nil
}

// carriesToken reports whether a raw response output is a token: not an
// empty one, and not an OpenAI stream's "data: [DONE]" terminator or a
// chunk with no content.
func carriesToken(out map[string]json.RawMessage) bool {
	raw, ok := out["response"]
	if !ok {
		return len(out) > 0
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return true
	}
	body := bytes.TrimSpace(bytes.TrimPrefix(bytes.TrimSpace([]byte(s)), []byte("data:")))
	if len(body) == 0 || string(body) == "[DONE]" {
		return false
	}
	var chunk struct {
		Choices []struct {
			Delta struct {
				Content          *string `json:"content"`
				ReasoningContent *string `json:"reasoning_content"`
			} `json:"delta"`
			Text *string `json:"text"`
		} `json:"choices"`
	}
	if json.Unmarshal(body, &chunk) != nil || len(chunk.Choices) == 0 {
		return false
	}
	c := chunk.Choices[0]
	return nonEmpty(c.Delta.Content) || nonEmpty(c.Delta.ReasoningContent) || nonEmpty(c.Text)
}

func nonEmpty(s *string) bool { return s != nil && *s != "" }

// readGenAIPerfSummary reads GenAI-Perf's summary: its figures as given.
func readGenAIPerfSummary(obj map[string]json.RawMessage, src string) ([]Run, error) {
	ms := metricObjects(obj)
	r := Run{Tool: "GenAI-Perf", Source: src, ID: runID("genai-perf", src), Completed: -1, Figures: metricFigures(ms)}
	var cfg struct {
		Model []string `json:"model"`
	}
	if json.Unmarshal(obj["input_config"], &cfg) == nil && len(cfg.Model) > 0 {
		r.Model = cfg.Model[0]
	}
	r.Notes = append(r.Notes, fmt.Sprintf("%s is a GenAI-Perf summary: its figures are reported as given, and no interval can be computed; give the raw profile_export.json beside it for per-request data", src))
	return []Run{r}, nil
}
