package peer

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// AIPerf (github.com/ai-dynamo/aiperf) writes two files read here, their
// shapes from its source: the summary profile_export_aiperf.json
// (aiperf/exporters/json_exporter.py, JsonExportData: one object whose
// metrics are {unit, avg, p1 … p99, min, max, std} in display units, and
// input_config, error_summary, was_cancelled, aiperf_version) and the
// per-record profile_export.jsonl
// (aiperf/post_processors/record_export_results_processor.py,
// MetricRecordInfo: {metadata, metrics: {tag: {value, unit}}, error}).

func init() {
	register(format{tool: "AIPerf", match: isAIPerfSummary, read: readAIPerfSummary})
	registerRecords(recordFormat{tool: "AIPerf", match: isAIPerfRecord, read: readAIPerfRecords})
}

// isAIPerfSummary tells AIPerf's summary by its metric objects beside the
// fields only AIPerf writes (GenAI-Perf has neither error_summary nor
// benchmark_duration).
func isAIPerfSummary(obj map[string]json.RawMessage) bool {
	return hasAny(obj, "error_summary", "was_cancelled", "aiperf_version", "benchmark_duration") && isMetricSummary(obj, "request_throughput")
}

// readAIPerfSummary reads AIPerf's summary: its figures as given, since
// the per-request data are in profile_export.jsonl beside it.
func readAIPerfSummary(obj map[string]json.RawMessage, src string) ([]Run, error) {
	ms := metricObjects(obj)
	tool := "AIPerf"
	var version string
	if json.Unmarshal(obj["aiperf_version"], &version) == nil && version != "" {
		tool += " " + version
	}
	r := Run{Tool: tool, Source: src, ID: runID("aiperf", src), Completed: -1, Figures: metricFigures(ms), Model: aiperfModel(obj)}
	if d, ok := stat(ms, "benchmark_duration", "avg"); ok {
		r.DurationS = d
	}
	if c, ok := stat(ms, "request_count", "avg"); ok {
		r.Completed = int64(math.Round(c))
	}
	r.Remedy = "give the profile_export.jsonl beside it (AIPerf's per-request records)"
	r.Notes = append(r.Notes, fmt.Sprintf("%s is an AIPerf summary: its figures are reported as given, and no interval can be computed; %s", src, r.Remedy))
	return []Run{r}, nil
}

// aiperfModel is the first model an AIPerf summary's input_config names.
func aiperfModel(obj map[string]json.RawMessage) string {
	var cfg struct {
		Endpoint struct {
			ModelNames []string `json:"model_names"`
		} `json:"endpoint"`
	}
	if json.Unmarshal(obj["input_config"], &cfg) == nil && len(cfg.Endpoint.ModelNames) > 0 {
		return cfg.Endpoint.ModelNames[0]
	}
	return ""
}

// isAIPerfRecord tells an AIPerf per-record line by its three parts and
// the request start time in its metadata.
func isAIPerfRecord(first map[string]json.RawMessage) bool {
	if !has(first, "metadata", "metrics") {
		return false
	}
	var md map[string]json.RawMessage
	return json.Unmarshal(first["metadata"], &md) == nil && has(md, "request_start_ns")
}

// aiperfRecord is one line of profile_export.jsonl.
type aiperfRecord struct {
	Metadata struct {
		RequestStartNs int64  `json:"request_start_ns"`
		RequestEndNs   int64  `json:"request_end_ns"`
		Phase          string `json:"benchmark_phase"`
		WasCancelled   bool   `json:"was_cancelled"`
	} `json:"metadata"`
	Metrics map[string]struct {
		Value json.RawMessage `json:"value"`
		Unit  string          `json:"unit"`
	} `json:"metrics"`
	Error *struct {
		Code    *int   `json:"code"`
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// readAIPerfRecords reads AIPerf's per-record export. Records come in
// completion order; sends are request_start_ns relative to the first.
// TTFT is time_to_first_token, the gaps inter_chunk_latency, the latency
// request_latency; warmup-phase records are marked warmup.
func readAIPerfRecords(docs []json.RawMessage, src string) (Run, error) {
	r := Run{Tool: "AIPerf", Source: src, ID: runID("aiperf", src), Completed: -1}
	recs := make([]aiperfRecord, len(docs))
	t0 := int64(math.MaxInt64)
	for i, d := range docs {
		if err := json.Unmarshal(d, &recs[i]); err != nil {
			return r, fmt.Errorf("line %d: %w", i+1, err)
		}
		if recs[i].Metadata.RequestStartNs <= 0 {
			return r, fmt.Errorf("line %d: no metadata.request_start_ns", i+1)
		}
		t0 = min(t0, recs[i].Metadata.RequestStartNs)
	}
	for i, rec := range recs {
		q := Request{SentNs: rec.Metadata.RequestStartNs - t0, OK: rec.Error == nil, TTFTNs: -1, E2ENs: -1, InputTokens: -1, OutputTokens: -1,
			Warmup: rec.Metadata.Phase == "warmup", Cancelled: rec.Metadata.WasCancelled}
		num := func(tag string) (float64, bool, error) {
			m, ok := rec.Metrics[tag]
			if !ok {
				return 0, false, nil
			}
			var x float64
			if err := json.Unmarshal(m.Value, &x); err != nil {
				return 0, false, fmt.Errorf("line %d: %s is not a number", i+1, tag)
			}
			x, err := toMs(x, m.Unit, tag)
			return x, true, err
		}
		if v, ok, err := num("time_to_first_token"); err != nil {
			return r, err
		} else if ok {
			q.TTFTNs, q.Streamed = msToNs(v), true
		}
		if v, ok, err := num("request_latency"); err != nil {
			return r, err
		} else if ok {
			q.E2ENs = msToNs(v)
		}
		for _, tag := range []string{"input_sequence_length", "error_isl"} {
			if m, ok := rec.Metrics[tag]; ok {
				var x float64
				if json.Unmarshal(m.Value, &x) == nil {
					q.InputTokens = int64(x)
					break
				}
			}
		}
		if m, ok := rec.Metrics["output_sequence_length"]; ok {
			var x float64
			if json.Unmarshal(m.Value, &x) == nil {
				q.OutputTokens = int64(x)
			}
		}
		if m, ok := rec.Metrics["inter_chunk_latency"]; ok {
			var gaps []float64
			if err := json.Unmarshal(m.Value, &gaps); err != nil {
				return r, fmt.Errorf("line %d: inter_chunk_latency is not a list of numbers", i+1)
			}
			for _, g := range gaps {
				g, err := toMs(g, m.Unit, "inter_chunk_latency")
				if err != nil {
					return r, fmt.Errorf("line %d: %w", i+1, err)
				}
				q.GapsNs = append(q.GapsNs, msToNs(g))
			}
		}
		if e := rec.Error; e != nil {
			q.Error = e.Message
			if e.Code != nil {
				q.Status = *e.Code
			}
		}
		r.Requests = append(r.Requests, q)
	}
	sort.SliceStable(r.Requests, func(i, j int) bool { return r.Requests[i].SentNs < r.Requests[j].SentNs })
	return r, nil
}

// toMs converts a value in a display unit of AIPerf's to milliseconds.
func toMs(x float64, unit, tag string) (float64, error) {
	switch unit {
	case "ms":
		return x, nil
	case "ns":
		return x / 1e6, nil
	case "us":
		return x / 1e3, nil
	case "s", "sec":
		return x * 1e3, nil
	}
	return 0, fmt.Errorf("%s in unit %q, not a time unit", tag, unit)
}

func msToNs(ms float64) int64 { return int64(math.Round(ms * 1e6)) }
