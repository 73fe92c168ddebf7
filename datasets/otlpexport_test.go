package datasets

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// writeRun writes a complete run dir holding rows, as a replay would.
func writeRun(t *testing.T, dir string, info trace.RunInfo, rows []trace.Result) string {
	t.Helper()
	w, err := trace.NewResultWriter(dir, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	info.Complete, info.Parts = true, w.Parts()
	if err := trace.WriteJSONAtomic(filepath.Join(dir, trace.RunInfoName), &info); err != nil {
		t.Fatal(err)
	}
	return dir
}

// otlpTestRun is a run of three requests: one ok and streamed, one the
// server refused, one never sent; the first request id comes twice.
func otlpTestRun(t *testing.T) (string, trace.RunInfo, []trace.Result) {
	const start = int64(1735689600_000_000_000) // 2025-01-01T00:00:00Z
	info := trace.RunInfo{RunID: "run-7", ToolVersion: "v0.9.0", StartUnixNs: start}
	ok := trace.Result{
		Identity: trace.Identity{RequestID: "req-1", SessionID: "sess-a", Model: "llama-3.1-8b"},
		Shape:    trace.Shape{InputTokens: 100, OutputTokens: 3, MaxTokens: 16, API: trace.APIChat, Stream: true, N: 1},
		TopP:     new(0.9), Temperature: new(0.5),
		ScheduledNs: 1_000_000, AdmittedNs: 1_000_000, SentNs: new(int64(2_000_000)),
		FirstChunkNs: new(int64(52_000_000)), FirstTokenNs: new(int64(52_000_000)), DoneNs: new(int64(92_000_000)),
		TokenTimesNs:         []int64{50_000_000, 70_000_000, 90_000_000},
		ObservedOutputTokens: 3, UsagePromptTokens: new(int64(104)), UsageCompletionTokens: new(int64(3)), UsageCachedTokens: new(int64(64)),
		ObservedFinishReason: "length", PromptTokensSent: 100, HTTPStatus: 200, Outcome: trace.OutcomeOK, RunID: "run-7",
	}
	refused := trace.Result{
		Identity:    trace.Identity{RequestID: "req-2", Model: "llama-3.1-8b"},
		Shape:       trace.Shape{InputTokens: 50, OutputTokens: 8, MaxTokens: 8, API: trace.APICompletions, N: 1},
		ScheduledNs: 3_000_000, AdmittedNs: 3_000_000, SentNs: new(int64(3_500_000)), DoneNs: new(int64(13_500_000)),
		PromptTokensSent: 50, HTTPStatus: 503, Outcome: trace.OutcomeHTTPError, Error: "server overloaded", RunID: "run-7",
	}
	notSent := trace.Result{
		Identity:    trace.Identity{RequestID: "req-3", Model: "llama-3.1-8b"},
		Shape:       trace.Shape{InputTokens: 10, OutputTokens: 1, MaxTokens: 1, API: trace.APIChat, N: 1},
		ScheduledNs: 900_000_000, AdmittedNs: 900_000_000, Outcome: trace.OutcomeNotSent, RunID: "run-7",
	}
	again := ok
	again.ScheduledNs, again.AdmittedNs = 950_000_000, 950_000_000
	again.SentNs, again.FirstChunkNs, again.FirstTokenNs, again.DoneNs = new(int64(951_000_000)), nil, nil, new(int64(960_000_000))
	again.TokenTimesNs, again.ObservedOutputTokens = nil, 0
	again.Outcome, again.HTTPStatus, again.Error = trace.OutcomeTimeout, 0, "timed out"
	rows := []trace.Result{refused, ok, notSent, again} // not in schedule order: the export sorts
	return writeRun(t, filepath.Join(t.TempDir(), "run"), info, rows), info, rows
}

// TestOTLPExportSpans checks the spans the export writes against the
// results: times from run start plus each offset, an event per token
// event, usage and outcome, status ERROR for every outcome but ok, ids
// from run and request id, and the same bytes on a second export.
func TestOTLPExportSpans(t *testing.T) {
	run, _, _ := otlpTestRun(t)
	var buf bytes.Buffer
	n, err := ExportRunOTLP(context.Background(), run, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 || bytes.Count(buf.Bytes(), []byte("\n")) != 1 {
		t.Fatalf("%d spans on %d lines, want 4 on 1", n, bytes.Count(buf.Bytes(), []byte("\n")))
	}
	var again bytes.Buffer
	if _, err := Export(context.Background(), run, &again, FormatOTLP, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Fatal("a second export wrote other bytes")
	}
	type kv struct {
		Key   string                     `json:"key"`
		Value map[string]json.RawMessage `json:"value"`
	}
	var doc struct {
		ResourceSpans []struct {
			Resource   struct{ Attributes []kv }
			ScopeSpans []struct {
				Scope struct{ Name, Version string }
				Spans []struct {
					TraceID, SpanID, Name              string
					Kind                               int
					StartTimeUnixNano, EndTimeUnixNano string
					Attributes                         []kv
					Events                             []struct{ TimeUnixNano, Name string }
					Status                             *struct {
						Code    int
						Message string
					}
				}
			}
		}
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	rs := doc.ResourceSpans[0]
	res := map[string]string{}
	for _, a := range rs.Resource.Attributes {
		res[a.Key] = string(a.Value["stringValue"])
	}
	if res["service.name"] != `"servetrace"` || res[OTLPAttrRunID] != `"run-7"` || res["service.version"] != `"v0.9.0"` {
		t.Errorf("resource %v", res)
	}
	spans := rs.ScopeSpans[0].Spans
	want := []struct {
		key, name, start, end string
		events                []string
		code                  int
		attrs                 map[string]string
	}{
		{"req-1", "chat llama-3.1-8b", "1735689600002000000", "1735689600092000000",
			[]string{"1735689600052000000", "1735689600072000000", "1735689600092000000"}, 0,
			map[string]string{"gen_ai.usage.input_tokens": `"104"`, "gen_ai.usage.output_tokens": `"3"`, "gen_ai.request.top_p": "0.9",
				"gen_ai.response.time_to_first_chunk": "0.05", "gen_ai.conversation.id": `"sess-a"`, OTLPAttrRequestID: `"req-1"`}},
		{"req-2", "text_completion llama-3.1-8b", "1735689600003500000", "1735689600013500000", nil, 2,
			map[string]string{"gen_ai.usage.input_tokens": `"50"`, "http.response.status_code": `"503"`, "error.type": `"http_error"`}},
		{"req-3", "chat llama-3.1-8b", "1735689600900000000", "1735689600900000000", nil, 2,
			map[string]string{OTLPAttrOutcome: `"not_sent"`}},
		{"req-1#1", "chat llama-3.1-8b", "1735689600951000000", "1735689600960000000", nil, 2,
			map[string]string{OTLPAttrRequestID: `"req-1"`, "error.type": `"timeout"`}},
	}
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d", len(spans), len(want))
	}
	for i, w := range want {
		s := spans[i]
		tid, sid := OTLPTraceID("run-7", w.key)
		if s.TraceID != tid || s.SpanID != sid || len(s.TraceID) != 32 || len(s.SpanID) != 16 {
			t.Errorf("span %d: ids %s/%s, want %s/%s", i, s.TraceID, s.SpanID, tid, sid)
		}
		if s.Name != w.name || s.Kind != 3 || s.StartTimeUnixNano != w.start || s.EndTimeUnixNano != w.end {
			t.Errorf("span %d: %q kind %d %s..%s, want %q kind 3 %s..%s", i, s.Name, s.Kind, s.StartTimeUnixNano, s.EndTimeUnixNano, w.name, w.start, w.end)
		}
		var ev []string
		for _, e := range s.Events {
			ev = append(ev, e.TimeUnixNano)
		}
		if strings.Join(ev, ",") != strings.Join(w.events, ",") {
			t.Errorf("span %d: events at %v, want %v", i, ev, w.events)
		}
		if code := 0; s.Status != nil {
			code = s.Status.Code
			if code != w.code {
				t.Errorf("span %d: status %d, want %d", i, code, w.code)
			}
		} else if w.code != 0 {
			t.Errorf("span %d: no status, want %d", i, w.code)
		}
		got := map[string]string{}
		for _, a := range s.Attributes {
			for _, v := range a.Value {
				if _, dup := got[a.Key]; dup {
					t.Errorf("span %d: attribute %s twice", i, a.Key)
				}
				got[a.Key] = string(v)
			}
		}
		for k, v := range w.attrs {
			if got[k] != v {
				t.Errorf("span %d: %s = %s, want %s", i, k, got[k], v)
			}
		}
	}
	if spans[1].Status == nil || spans[1].Status.Message != "http_error: server overloaded" {
		t.Errorf("status %+v, want the outcome and error", spans[1].Status)
	}
}

// TestOTLPExportReadsBack converts an exported run with this package's
// OTLP reader: every request comes back with its model, usage, times and
// session, so a run can be compared with production spans as a trace.
func TestOTLPExportReadsBack(t *testing.T) {
	run, info, rows := otlpTestRun(t)
	var buf bytes.Buffer
	if _, err := ExportRunOTLP(context.Background(), run, &buf); err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	salt := testSalt(t)
	st, err := Read(context.Background(), &buf, Options{Name: "run.otlp", Log: LogOptions{Salt: salt}}, sink)
	if err != nil || st.Format != FormatOTLP || len(sink.rejects) != 0 {
		t.Fatalf("format %s, rejects %+v, err %v", st.Format, sink.rejects, err)
	}
	if len(sink.rows) != len(rows) {
		t.Fatalf("%d rows, want %d", len(sink.rows), len(rows))
	}
	got, r := sink.rows[0], rows[1] // schedule order: req-1 first

	if got.TS != (info.StartUnixNs+*r.SentNs)/1000 || got.InputTokens != 104 || got.OutputTokens != 3 || got.MaxTokens != 16 ||
		got.Model != r.Model || got.API != trace.APIChat || !got.Stream || *got.TopP != 0.9 || *got.Temperature != 0.5 ||
		*got.E2EMs != 90 || *got.TTFTMs != 50 || *got.FinishReason != "length" || got.SessionID != salt.ID("session", "sess-a") ||
		got.CachedTokens == nil || *got.CachedTokens != 64 {
		t.Errorf("read back %+v (e2e %v ttft %v)", got, deref(got.E2EMs), deref(got.TTFTMs))
	}
	if refused := sink.rows[1]; refused.API != trace.APICompletions || *refused.Status != 503 || refused.InputTokens != 50 {
		t.Errorf("refused request read back as %+v", refused)
	}
}

// TestOTLPExportSplitsDocuments checks a long run is cut into documents of
// at most OTLPExportSpansPerDocument spans, one per line, in schedule
// order.
func TestOTLPExportSplitsDocuments(t *testing.T) {
	rows := make([]trace.Result, 2*OTLPExportSpansPerDocument+5)
	for i := range rows {
		sent := int64(i) * 1_000_000
		rows[i] = trace.Result{Identity: trace.Identity{RequestID: "r" + itoa(int64(i))}, Shape: trace.Shape{InputTokens: 5, API: trace.APIChat, N: 1},
			ScheduledNs: sent, AdmittedNs: sent, SentNs: new(sent), DoneNs: new(sent + 1), Outcome: trace.OutcomeOK, HTTPStatus: 200, RunID: "big"}
	}
	run := writeRun(t, filepath.Join(t.TempDir(), "run"), trace.RunInfo{RunID: "big", StartUnixNs: 1735689600_000_000_000}, rows)
	var buf bytes.Buffer
	if _, err := ExportRunOTLP(context.Background(), run, &buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d documents, want 3", len(lines))
	}
	for i, want := range []int{OTLPExportSpansPerDocument, OTLPExportSpansPerDocument, 5} {
		if got := strings.Count(lines[i], `"traceId"`); got != want {
			t.Errorf("document %d holds %d spans, want %d", i, got, want)
		}
	}
}
