package peer

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
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
func isAIPerfSummary(o object) bool {
	return o.hasAny("error_summary", "was_cancelled", "aiperf_version", "benchmark_duration") && isMetricSummary(o, "request_throughput")
}

// readAIPerfSummary reads AIPerf's summary: its figures as given, since
// the per-request data are in profile_export.jsonl beside it.
func readAIPerfSummary(o object) ([]Run, error) {
	src := o.src
	ms := metricObjects(o)
	tool := "AIPerf"
	if version := o.str("aiperf_version"); version != "" {
		tool += " " + version
	}
	r := Run{Tool: tool, Source: src, ID: runID("aiperf", src), Completed: -1, Figures: metricFigures(ms), Model: aiperfModel(o)}
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

// aiperfModel is the first model an AIPerf summary's input_config names:
// its own model_names (a list, or one name) in AIPerf's UserConfig, else
// its endpoint's (aiperf/common/config/user_config.py and
// endpoint_config.py, over its versions).
func aiperfModel(o object) string {
	var cfg struct {
		ModelNames json.RawMessage `json:"model_names"`
		Endpoint   struct {
			ModelNames json.RawMessage `json:"model_names"`
		} `json:"endpoint"`
	}
	if json.Unmarshal(o.raw("input_config"), &cfg) != nil {
		return ""
	}
	for _, raw := range []json.RawMessage{cfg.ModelNames, cfg.Endpoint.ModelNames} {
		var list []string
		if json.Unmarshal(raw, &list) == nil && len(list) > 0 {
			return list[0]
		}
		var one string
		if json.Unmarshal(raw, &one) == nil && one != "" {
			return strings.TrimSpace(strings.Split(one, ",")[0])
		}
	}
	return ""
}

// isAIPerfRecord tells an AIPerf per-record line by its three parts and
// the request start time in its metadata.
func isAIPerfRecord(first object) bool {
	if !first.has("metadata", "metrics") {
		return false
	}
	var md map[string]json.RawMessage
	if json.Unmarshal(first.raw("metadata"), &md) != nil {
		return false
	}
	_, ok := md["request_start_ns"]
	return ok
}

// aiperfRecord is one line of profile_export.jsonl.
type aiperfRecord struct {
	Metadata struct {
		RequestStartNs json.Number `json:"request_start_ns"`
		Phase          string      `json:"benchmark_phase"`
		WasCancelled   bool        `json:"was_cancelled"`
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

// Epoch nanoseconds a request may start at: 2000 to 2200.
const (
	minStartNs = 946_684_800 * 1e9
	maxStartNs = 7_258_118_400 * 1e9
)

// startNs is a record's request_start_ns, and why it is not a time when
// it is not one.
func (rec *aiperfRecord) startNs() (int64, string) {
	s := rec.Metadata.RequestStartNs
	if s == "" {
		return 0, "no metadata.request_start_ns"
	}
	ns, err := strconv.ParseInt(string(s), 10, 64)
	if err != nil || ns < minStartNs || ns > maxStartNs {
		return 0, "a metadata.request_start_ns that is not a time (epoch nanoseconds of the years 2000 to 2200)"
	}
	return ns, ""
}

// readAIPerfRecords reads AIPerf's per-record export. Records come in
// completion order; sends are request_start_ns relative to the earliest.
// TTFT is time_to_first_token, the gaps inter_chunk_latency, the latency
// request_latency; warmup-phase records are marked warmup.
func readAIPerfRecords(docs recordDocs, src string) (Run, error) {
	r := Run{Tool: "AIPerf", Source: src, ID: runID("aiperf", src), Completed: -1}
	t0 := int64(math.MaxInt64)
	err := docs.each(func(raw []byte, where string) error {
		var rec aiperfRecord
		if err := json.Unmarshal(raw, &rec); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if ns, why := rec.startNs(); why == "" {
			t0 = min(t0, ns)
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	if t0 == math.MaxInt64 {
		return r, fmt.Errorf("no record has a metadata.request_start_ns in epoch nanoseconds: not AIPerf's profile_export.jsonl, or edited")
	}
	r.records = func(fn func(q *Request) error) error {
		var q Request
		return docs.each(func(raw []byte, where string) error {
			var rec aiperfRecord
			if err := json.Unmarshal(raw, &rec); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			q = Request{OK: rec.Error == nil, TTFTNs: -1, E2ENs: -1, InputTokens: -1, OutputTokens: -1,
				Warmup: rec.Metadata.Phase == "warmup", Cancelled: rec.Metadata.WasCancelled, GapsNs: q.GapsNs[:0]}
			if ns, why := rec.startNs(); why != "" {
				q.SentNs, q.badSend = invalid, why
			} else {
				q.SentNs = ns - t0
			}
			if err := rec.fill(&q); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			return fn(&q)
		})
	}
	return r, nil
}

// fill sets q's values from the record's metrics.
func (rec *aiperfRecord) fill(q *Request) error {
	num := func(tag string) (float64, bool, error) {
		m, ok := rec.Metrics[tag]
		if !ok {
			return 0, false, nil
		}
		x, present, err := parseNumber(m.Value)
		if err != nil {
			return 0, false, fmt.Errorf("%s is not a number", tag)
		}
		if !present {
			return math.NaN(), true, nil
		}
		x, err = toMs(x, m.Unit, tag)
		return x, true, err
	}
	if v, ok, err := num("time_to_first_token"); err != nil {
		return err
	} else if ok {
		q.TTFTNs, q.Streamed = msToNs(v), true
	}
	if v, ok, err := num("request_latency"); err != nil {
		return err
	} else if ok {
		q.E2ENs = msToNs(v)
	}
	for _, tag := range []string{"input_sequence_length", "error_isl"} {
		if m, ok := rec.Metrics[tag]; ok {
			if x, present, err := parseNumber(m.Value); err == nil && present {
				q.InputTokens = tokens(x)
				break
			}
		}
	}
	if m, ok := rec.Metrics["output_sequence_length"]; ok {
		if x, present, err := parseNumber(m.Value); err == nil && present {
			q.OutputTokens = tokens(x)
		}
	}
	if m, ok := rec.Metrics["inter_chunk_latency"]; ok {
		gaps, err := parseNumbers(m.Value, nil)
		if err != nil {
			return fmt.Errorf("inter_chunk_latency is not a list of numbers")
		}
		for _, g := range gaps {
			g, err := toMs(g, m.Unit, "inter_chunk_latency")
			if err != nil {
				return err
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
	return nil
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
