package datasets

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/servetrace/servetrace/trace"
)

// OTLPExportSpansPerDocument and OTLPExportBytesPerDocument bound one
// exported document (one line): receivers cap a request's size (the OTLP
// spec recommends 20 MiB) and this package's reader a line's
// (MaxLineBytes), so a long run is cut into many documents.
const (
	OTLPExportSpansPerDocument = 1000
	OTLPExportBytesPerDocument = 4 << 20
)

// Span attributes the export writes beyond the GenAI conventions'.
const (
	OTLPAttrRequestID = "servetrace.request.id" // the request's id in the workload
	OTLPAttrRunID     = "servetrace.run.id"     // resource attribute: the run
	OTLPAttrOutcome   = "servetrace.outcome"    // ok, http_error, timeout, ...
)

// ExportRunOTLP writes a replay run's results (runDir: run.json and
// results/part-*.parquet, read as analyze reads them) as OTLP/JSON traces,
// one TracesData document per line as the collector's file exporter
// writes them, so a tracing backend can show a run beside the server's own
// spans. Each request is one CLIENT span named "{operation} {model}" from
// sent to done (a request never sent is a zero-length span at its
// scheduled time), with an event per streamed event that carried tokens,
// GenAI attributes (model, usage, finish reason, sampling), the request id
// and outcome, and status ERROR for every outcome but ok. Trace and span
// ids are derived from the run id and request id, so exporting a run twice
// gives the same bytes and links with nothing else. It returns the spans
// written.
func ExportRunOTLP(ctx context.Context, runDir string, w io.Writer) (int64, error) {
	info, err := trace.ReadRunInfo(runDir)
	if err != nil {
		return 0, err
	}
	rows, err := trace.ReadResults(runDir)
	if err != nil {
		return 0, err
	}
	// Schedule order, shards interleaved as they ran.
	slices.SortStableFunc(rows, func(a, b trace.Result) int { return cmp.Compare(a.ScheduledNs, b.ScheduledNs) })
	runID := info.RunID
	if runID == "" && len(rows) > 0 {
		runID = rows[0].RunID
	}
	resource := []otlpOutKV{strKV("service.name", "servetrace")}
	if info.ToolVersion != "" {
		resource = append(resource, strKV("service.version", info.ToolVersion))
	}
	resource = append(resource, strKV(OTLPAttrRunID, runID))
	// A document wraps its spans as {"resourceSpans":[{"resource":...,
	// "scopeSpans":[{"scope":...,"spans":[...]}]}]}.
	resJSON, err := json.Marshal(otlpOutResource{Attributes: resource})
	if err != nil {
		return 0, err
	}
	scopeJSON, err := json.Marshal(otlpOutScope{Name: "servetrace", Version: info.ToolVersion})
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var doc []byte
	spans := 0
	flush := func() error {
		if spans == 0 {
			return nil
		}
		doc = append(doc, "]}]}]}\n"...)
		_, err := bw.Write(doc)
		doc, spans = doc[:0], 0
		return err
	}
	seen := map[string]int{}
	var n int64
	for i := range rows {
		if i&1023 == 0 && ctx.Err() != nil {
			return n, ctx.Err()
		}
		r := &rows[i]
		// A request id met again (a workload that repeats one) gets the
		// occurrence in its key, so every span keeps its own ids.
		key := r.RequestID
		if k := seen[r.RequestID]; k > 0 {
			key += "#" + strconv.Itoa(k)
		}
		seen[r.RequestID]++
		b, err := json.Marshal(otlpResultSpan(info.StartUnixNs, runID, key, r))
		if err != nil {
			return n, err
		}
		if spans > 0 && (spans >= OTLPExportSpansPerDocument || len(doc)+len(b) > OTLPExportBytesPerDocument) {
			if err := flush(); err != nil {
				return n, err
			}
		}
		if spans == 0 {
			doc = append(doc, `{"resourceSpans":[{"resource":`...)
			doc = append(doc, resJSON...)
			doc = append(doc, `,"scopeSpans":[{"scope":`...)
			doc = append(doc, scopeJSON...)
			doc = append(doc, `,"spans":[`...)
		} else {
			doc = append(doc, ',')
		}
		doc = append(doc, b...)
		spans++
		n++
	}
	if err := flush(); err != nil {
		return n, err
	}
	return n, bw.Flush()
}

// OTLPTraceID returns the trace and span ids, as OTLP/JSON's hex, that the
// export gives the request key (its id, or id#k for its k-th repeat) of a
// run: the first 24 bytes of a SHA-256 of both, never all zero (an
// invalid id).
func OTLPTraceID(runID, key string) (traceID, spanID string) {
	h := sha256.Sum256([]byte("servetrace-otlp\x00" + runID + "\x00" + key))
	if [16]byte(h[:16]) == [16]byte{} {
		h[15] = 1
	}
	if [8]byte(h[16:24]) == [8]byte{} {
		h[23] = 1
	}
	return hex.EncodeToString(h[:16]), hex.EncodeToString(h[16:24])
}

// otlpResultSpan is one result as a span.
func otlpResultSpan(startUnixNs int64, runID, key string, r *trace.Result) otlpOutSpan {
	at := func(ns int64) uint64 { return uint64(max(0, satAdd(startUnixNs, ns))) }
	traceID, spanID := OTLPTraceID(runID, key)
	op := "chat"
	if r.API == trace.APICompletions {
		op = "text_completion"
	}
	name := op
	if r.Model != "" {
		name += " " + r.Model
	}
	sp := otlpOutSpan{TraceID: traceID, SpanID: spanID, Name: name, Kind: 3} // SPAN_KIND_CLIENT
	// The span runs from the send to the end of the response, or to the
	// last instant the request reached where it never ended.
	startNs := r.ScheduledNs
	if r.SentNs != nil {
		startNs = *r.SentNs
	}
	endNs := startNs
	for _, t := range []*int64{r.FirstChunkNs, r.FirstTokenNs, r.DoneNs} {
		if t != nil {
			endNs = max(endNs, *t)
		}
	}
	if r.SentNs != nil && len(r.TokenTimesNs) > 0 {
		endNs = max(endNs, satAdd(*r.SentNs, r.TokenTimesNs[len(r.TokenTimesNs)-1]))
	}
	if r.DoneNs != nil {
		endNs = *r.DoneNs
	}
	sp.Start, sp.End = at(startNs), at(endNs)

	a := []otlpOutKV{
		strKV("gen_ai.operation.name", op),
	}
	if r.Model != "" {
		a = append(a, strKV("gen_ai.request.model", r.Model))
	}
	a = append(a, intKV("gen_ai.request.max_tokens", r.MaxTokens), boolKV("gen_ai.request.stream", r.Stream))
	if r.N > 1 {
		a = append(a, intKV("gen_ai.request.choice.count", int64(r.N)))
	}
	if r.Temperature != nil {
		a = append(a, doubleKV("gen_ai.request.temperature", *r.Temperature))
	}
	if r.TopP != nil {
		a = append(a, doubleKV("gen_ai.request.top_p", *r.TopP))
	}
	if r.SessionID != "" {
		a = append(a, strKV("gen_ai.conversation.id", r.SessionID))
	}
	// Usage as the server reported it; the client's own counts where it
	// reported none (the prompt it sent, the events it counted).
	in := r.PromptTokensSent
	if r.UsagePromptTokens != nil {
		in = *r.UsagePromptTokens
	}
	a = append(a, intKV("gen_ai.usage.input_tokens", in), intKV("gen_ai.usage.output_tokens", r.ObservedOutputTokens))
	if r.ObservedReasoningTokens > 0 {
		a = append(a, intKV("gen_ai.usage.reasoning.output_tokens", r.ObservedReasoningTokens))
	}
	if r.UsageCachedTokens != nil {
		a = append(a, intKV("gen_ai.usage.cache_read.input_tokens", *r.UsageCachedTokens))
	}
	if r.ObservedFinishReason != "" {
		a = append(a, otlpOutKV{Key: "gen_ai.response.finish_reasons", Value: otlpOutAny{ArrayValue: &otlpOutArray{Values: []otlpOutAny{{StringValue: &r.ObservedFinishReason}}}}})
	}
	if r.SentNs != nil && r.FirstChunkNs != nil {
		a = append(a, doubleKV("gen_ai.response.time_to_first_chunk", (float64(*r.FirstChunkNs)-float64(*r.SentNs))/1e9))
	}
	if r.HTTPStatus > 0 {
		a = append(a, intKV("http.response.status_code", int64(r.HTTPStatus)))
	}
	a = append(a, strKV(OTLPAttrRequestID, r.RequestID), strKV(OTLPAttrOutcome, r.Outcome))
	if r.Phase != "" {
		a = append(a, strKV("servetrace.phase", r.Phase))
	}
	if r.Warmup {
		a = append(a, boolKV("servetrace.warmup", true))
	}
	if r.Shard != 0 {
		a = append(a, intKV("servetrace.shard", int64(r.Shard)))
	}
	if r.Outcome != trace.OutcomeOK {
		a = append(a, strKV("error.type", r.Outcome))
		msg := r.Outcome
		if r.Error != "" {
			msg += ": " + r.Error
		}
		sp.Status = &otlpOutStatus{Code: 2, Message: msg} // STATUS_CODE_ERROR
	}
	sp.Attributes = a
	if r.SentNs != nil {
		sp.Events = make([]otlpOutEvent, len(r.TokenTimesNs))
		for i, t := range r.TokenTimesNs {
			sp.Events[i] = otlpOutEvent{Time: at(satAdd(*r.SentNs, t)), Name: "servetrace.token_event"}
		}
	}
	return sp
}

// satAdd adds without wrapping, so a hostile run.json cannot turn a time
// negative.
func satAdd(a, b int64) int64 {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

// The OTLP/JSON shapes the export writes: lowerCamelCase keys, 64-bit
// integers as decimal strings, enums as integers, ids as hex.
type (
	otlpOutResource struct {
		Attributes []otlpOutKV `json:"attributes"`
	}
	otlpOutScope struct {
		Name    string `json:"name"`
		Version string `json:"version,omitempty"`
	}
	otlpOutSpan struct {
		TraceID    string         `json:"traceId"`
		SpanID     string         `json:"spanId"`
		Name       string         `json:"name"`
		Kind       int            `json:"kind"`
		Start      uint64         `json:"startTimeUnixNano,string"`
		End        uint64         `json:"endTimeUnixNano,string"`
		Attributes []otlpOutKV    `json:"attributes"`
		Events     []otlpOutEvent `json:"events,omitempty"`
		Status     *otlpOutStatus `json:"status,omitempty"`
	}
	otlpOutEvent struct {
		Time uint64 `json:"timeUnixNano,string"`
		Name string `json:"name"`
	}
	otlpOutStatus struct {
		Message string `json:"message,omitempty"`
		Code    int    `json:"code"`
	}
	otlpOutKV struct {
		Key   string     `json:"key"`
		Value otlpOutAny `json:"value"`
	}
	otlpOutAny struct {
		StringValue *string       `json:"stringValue,omitempty"`
		BoolValue   *bool         `json:"boolValue,omitempty"`
		IntValue    *int64        `json:"intValue,omitempty,string"`
		DoubleValue *float64      `json:"doubleValue,omitempty"`
		ArrayValue  *otlpOutArray `json:"arrayValue,omitempty"`
	}
	otlpOutArray struct {
		Values []otlpOutAny `json:"values"`
	}
)

func strKV(k, v string) otlpOutKV       { return otlpOutKV{Key: k, Value: otlpOutAny{StringValue: &v}} }
func intKV(k string, v int64) otlpOutKV { return otlpOutKV{Key: k, Value: otlpOutAny{IntValue: &v}} }
func boolKV(k string, v bool) otlpOutKV { return otlpOutKV{Key: k, Value: otlpOutAny{BoolValue: &v}} }
func doubleKV(k string, v float64) otlpOutKV {
	return otlpOutKV{Key: k, Value: otlpOutAny{DoubleValue: &v}}
}
