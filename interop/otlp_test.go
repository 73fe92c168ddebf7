package interop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/servetrace/servetrace/datasets"
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
)

// otlpRun writes a run dir of three results as a replay would: an ok
// streamed request, one the server refused, one never sent.
func otlpRun(t *testing.T) string {
	t.Helper()
	run := filepath.Join(t.TempDir(), "run")
	w, err := trace.NewResultWriter(run, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rows := []trace.Result{
		{Identity: trace.Identity{RequestID: "a", SessionID: "s1", Model: "llama"}, Shape: trace.Shape{InputTokens: 64, OutputTokens: 3, MaxTokens: 3, API: trace.APIChat, Stream: true, N: 1},
			Temperature: new(0.25), ScheduledNs: 0, SentNs: new(int64(1_000)), FirstChunkNs: new(int64(41_000)), FirstTokenNs: new(int64(41_000)), DoneNs: new(int64(91_000)),
			TokenTimesNs: []int64{40_000, 65_000, 90_000}, ObservedOutputTokens: 3, UsagePromptTokens: new(int64(70)), ObservedFinishReason: "stop",
			PromptTokensSent: 64, HTTPStatus: 200, Outcome: trace.OutcomeOK, RunID: "interop-run"},
		{Identity: trace.Identity{RequestID: "b", Model: "llama"}, Shape: trace.Shape{InputTokens: 8, OutputTokens: 8, MaxTokens: 8, API: trace.APICompletions, N: 1},
			ScheduledNs: 5_000, SentNs: new(int64(6_000)), DoneNs: new(int64(9_000)), PromptTokensSent: 8, HTTPStatus: 429, Outcome: trace.OutcomeHTTPError,
			Error: "rate limited", RunID: "interop-run"},
		{Identity: trace.Identity{RequestID: "c", Model: "llama"}, Shape: trace.Shape{InputTokens: 8, OutputTokens: 1, MaxTokens: 1, API: trace.APIChat, N: 1},
			ScheduledNs: 7_000, Outcome: trace.OutcomeNotSent, RunID: "interop-run"},
	}
	for _, r := range rows {
		w.Write(r)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	info := trace.RunInfo{RunID: "interop-run", ToolVersion: "test", StartUnixNs: 1_767_225_600_000_000_000, Complete: true, Parts: w.Parts()}
	if err := trace.WriteJSONAtomic(filepath.Join(run, trace.RunInfoName), &info); err != nil {
		t.Fatal(err)
	}
	return run
}

// otlpID undoes protojson's reading of an OTLP/JSON id. OTLP/JSON writes
// traceId and spanId as hex (the OTLP specification's deviation from the
// protobuf JSON mapping), while protojson reads bytes fields as base64; hex
// digits are base64 digits, so the decode succeeds with other bytes, and
// encoding them back as base64 gives the hex text the file holds.
func otlpID(t *testing.T, b []byte, size int) string {
	t.Helper()
	text := base64.StdEncoding.EncodeToString(b)
	raw, err := hex.DecodeString(text)
	if err != nil || len(raw) != size || strings.ToLower(text) != text {
		t.Fatalf("id %q is not %d bytes of lower-case hex", text, size)
	}
	return text
}

// TestOTLPExportDecodesWithProtobufTypes decodes `servetrace export
// --format otlp` output with the OpenTelemetry protobuf types' protojson
// decoder, strictly (an unknown field fails), and checks every span against
// the results it came from.
func TestOTLPExportDecodesWithProtobufTypes(t *testing.T) {
	run := otlpRun(t)
	var buf bytes.Buffer
	if _, err := datasets.Export(context.Background(), run, &buf, datasets.FormatOTLP, datasets.ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	var spans []*tracepb.Span
	var resources []*resourcepb.Resource
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var td tracepb.TracesData
		if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(sc.Bytes(), &td); err != nil {
			t.Fatalf("protojson: %v", err)
		}
		for _, rs := range td.ResourceSpans {
			resources = append(resources, rs.Resource)
			for _, ss := range rs.ScopeSpans {
				if ss.Scope.GetName() != "servetrace" {
					t.Errorf("scope %q", ss.Scope.GetName())
				}
				spans = append(spans, ss.Spans...)
			}
		}
	}
	if len(spans) != 3 || len(resources) != 1 {
		t.Fatalf("%d spans in %d resources, want 3 in 1", len(spans), len(resources))
	}
	res := attrs(resources[0].Attributes)
	if res["service.name"].GetStringValue() != "servetrace" || res[datasets.OTLPAttrRunID].GetStringValue() != "interop-run" {
		t.Errorf("resource attributes %v", resources[0].Attributes)
	}
	const t0 = uint64(1_767_225_600_000_000_000)
	want := []struct {
		id, name   string
		start, end uint64
		events     []uint64
		code       tracepb.Status_StatusCode
		in, out    int64
	}{
		{"a", "chat llama", t0 + 1_000, t0 + 91_000, []uint64{t0 + 41_000, t0 + 66_000, t0 + 91_000}, tracepb.Status_STATUS_CODE_UNSET, 70, 3},
		{"b", "text_completion llama", t0 + 6_000, t0 + 9_000, nil, tracepb.Status_STATUS_CODE_ERROR, 8, 0},
		{"c", "chat llama", t0 + 7_000, t0 + 7_000, nil, tracepb.Status_STATUS_CODE_ERROR, 0, 0},
	}
	for i, w := range want {
		s := spans[i]
		tid, sid := datasets.OTLPTraceID("interop-run", w.id)
		if otlpID(t, s.TraceId, 16) != tid || otlpID(t, s.SpanId, 8) != sid {
			t.Errorf("span %d: ids not derived from run and request id", i)
		}
		if s.Name != w.name || s.Kind != tracepb.Span_SPAN_KIND_CLIENT || s.StartTimeUnixNano != w.start || s.EndTimeUnixNano != w.end || s.Status.GetCode() != w.code {
			t.Errorf("span %d: %q %v %d..%d %v, want %q client %d..%d %v", i, s.Name, s.Kind, s.StartTimeUnixNano, s.EndTimeUnixNano, s.Status.GetCode(), w.name, w.start, w.end, w.code)
		}
		var ev []uint64
		for _, e := range s.Events {
			ev = append(ev, e.TimeUnixNano)
		}
		if len(ev) != len(w.events) || (len(ev) > 0 && ev[len(ev)-1] != w.events[len(w.events)-1]) || (len(ev) > 1 && ev[1] != w.events[1]) {
			t.Errorf("span %d: events %v, want %v", i, ev, w.events)
		}
		a := attrs(s.Attributes)
		if a["gen_ai.usage.input_tokens"].GetIntValue() != w.in || a["gen_ai.usage.output_tokens"].GetIntValue() != w.out ||
			a["gen_ai.request.model"].GetStringValue() != "llama" || a[datasets.OTLPAttrRequestID].GetStringValue() != w.id {
			t.Errorf("span %d: attributes %v", i, s.Attributes)
		}
	}
	a := attrs(spans[0].Attributes)
	if fr := a["gen_ai.response.finish_reasons"].GetArrayValue().GetValues(); len(fr) != 1 || fr[0].GetStringValue() != "stop" {
		t.Errorf("finish reasons %v", fr)
	}
	if a["gen_ai.request.temperature"].GetDoubleValue() != 0.25 || a["gen_ai.conversation.id"].GetStringValue() != "s1" || !a["gen_ai.request.stream"].GetBoolValue() {
		t.Errorf("attributes %v", spans[0].Attributes)
	}
	if got := attrs(spans[1].Attributes)["http.response.status_code"].GetIntValue(); got != 429 || spans[1].Status.GetMessage() != "http_error: rate limited" {
		t.Errorf("refused span: status %d, message %q", got, spans[1].Status.GetMessage())
	}
}

func attrs(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := map[string]*commonpb.AnyValue{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestOTLPReadsProtobufTypesJSON converts spans written by the
// OpenTelemetry protobuf types' protojson encoder — compact and
// pretty-printed — and checks each GenAI span becomes its request. The
// encoder writes the protobuf JSON mapping, not quite OTLP/JSON (base64
// ids, enum names), which the reader takes as well since it reads neither.
func TestOTLPReadsProtobufTypesJSON(t *testing.T) {
	str := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	num := func(k string, v int64) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
	}
	dbl := func(k string, v float64) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
	}
	const t0 = uint64(1_767_225_600_000_000_000)
	td := &tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", "app"), str("user.id", "u-42")}},
		ScopeSpans: []*tracepb.ScopeSpans{{Scope: &commonpb.InstrumentationScope{Name: "sdk"}, Spans: []*tracepb.Span{
			{TraceId: bytes.Repeat([]byte{1}, 16), SpanId: bytes.Repeat([]byte{2}, 8), Name: "chat gpt", Kind: tracepb.Span_SPAN_KIND_CLIENT,
				StartTimeUnixNano: t0, EndTimeUnixNano: t0 + 2_000_000_000,
				Attributes: []*commonpb.KeyValue{str("gen_ai.operation.name", "chat"), str("gen_ai.request.model", "gpt"), num("gen_ai.usage.input_tokens", 321),
					num("gen_ai.usage.output_tokens", 12), num("gen_ai.request.max_tokens", 64), dbl("gen_ai.request.top_p", 0.5),
					str("gen_ai.input.messages", "never kept")},
				Events: []*tracepb.Span_Event{{TimeUnixNano: t0 + 1, Name: "gen_ai.content.prompt", Attributes: []*commonpb.KeyValue{str("gen_ai.prompt", "never kept")}}},
				Status: &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK}},
			{TraceId: bytes.Repeat([]byte{1}, 16), SpanId: bytes.Repeat([]byte{3}, 8), Name: "GET /", StartTimeUnixNano: t0, EndTimeUnixNano: t0 + 1},
		}}},
	}}}
	salt, err := anon.ParseSalt("000102030405060708090a0b0c0d0e0f")
	if err != nil {
		t.Fatal(err)
	}
	for _, multiline := range []bool{false, true} {
		b, err := protojson.MarshalOptions{Multiline: multiline}.Marshal(td)
		if err != nil {
			t.Fatal(err)
		}
		var rows []trace.Request
		sink := &collect{rows: &rows}
		st, err := datasets.Read(context.Background(), bytes.NewReader(append(b, '\n')), datasets.Options{Name: "proto.json", Log: datasets.LogOptions{Salt: salt}}, sink)
		if err != nil || st.Format != datasets.FormatOTLP || st.Rejects != 0 {
			t.Fatalf("multiline %v: format %q, %d rejects, err %v", multiline, st.Format, st.Rejects, err)
		}
		if len(rows) != 1 {
			t.Fatalf("multiline %v: %d rows, want 1", multiline, len(rows))
		}
		r := rows[0]
		if r.TS != int64(t0/1000) || r.InputTokens != 321 || r.OutputTokens != 12 || r.MaxTokens != 64 || r.Model != "gpt" || *r.TopP != 0.5 ||
			*r.E2EMs != 2000 || r.Tenant != salt.HMAC("tenant", "u-42") {
			t.Errorf("multiline %v: %+v", multiline, r)
		}
	}
}

// collect is a datasets.Sink keeping rows.
type collect struct{ rows *[]trace.Request }

func (c *collect) Write(r trace.Request) error { *c.rows = append(*c.rows, r); return nil }
func (c *collect) Reject(trace.Reject) error   { return nil }
