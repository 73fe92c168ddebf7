package datasets

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// otlpWant is what a converted span must hold; nil pointers are checked
// to be nil.
type otlpWant struct {
	ts                  time.Time
	api, model, finish  string
	in, out, max        int64
	stream              bool
	n                   int32
	turn                int32
	temp, topP          *float64
	cached              *int64
	ttft, e2e, think    *float64
	status              *int32
	session, tenant     bool
	features            string
	tenantOf, sessionOf string // raw ids, to check the keyed values
}

// TestOTLPGenAISpans converts two fixtures written for this test in the
// OTLP/JSON encoding — one document per line as the collector's file
// exporter writes them, and one document pretty-printed — and checks every
// GenAI inference span became the request its attributes describe, every
// other span was skipped and counted, and every bad span was rejected on
// its own line.
//
// The shapes follow the OTLP specification's "JSON Protobuf Encoding"
// (opentelemetry-proto docs/specification.md: lowerCamelCase keys, hex
// traceId/spanId, 64-bit integers as decimal strings, enums as integers,
// unknown fields ignored) and the attribute names, types and meanings the
// GenAI semantic conventions' attribute registry gives
// (semantic-conventions-genai docs/registry/attributes/gen-ai.md:
// gen_ai.operation.name, gen_ai.request.model/max_tokens/temperature/
// top_p/stream/choice.count, gen_ai.usage.input_tokens/output_tokens/
// cache_read.input_tokens/reasoning.output_tokens, gen_ai.conversation.id,
// gen_ai.response.finish_reasons (string[]), gen_ai.response.
// time_to_first_chunk (seconds)).
func TestOTLPGenAISpans(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := time.Date(2025, 1, 1, 1, 0, 0, 0, time.UTC)
	cases := []struct {
		file    string
		rows    []otlpWant
		rejects map[int64]string // line → a part of the reason
		skipped string           // the manifest note's tally
	}{
		{
			file: "testdata/otlp/genai.jsonl",
			rows: []otlpWant{
				{ts: t0, api: trace.APIChat, model: "llama-3.1-8b", in: 120, out: 40, max: 256, stream: true, n: 1,
					temp: new(0.7), topP: new(1.0), cached: new(int64(64)), ttft: new(250.0), e2e: new(1500.0), status: new(int32(200)),
					finish: "stop", session: true, tenant: true, tenantOf: "span-user-alice", sessionOf: "conv-1"},
				// intValue as a JSON number and output tokens as a whole
				// double are read; turn 1 of conv-1, 8.5 s after turn 0 ended.
				{ts: t0.Add(10 * time.Second), api: trace.APICompletions, model: "llama-3.1-8b", in: 50, out: 10, max: 10, n: 1, turn: 1,
					e2e: new(800.0), think: new(8500.0), finish: "length", session: true, sessionOf: "conv-1"},
			},
			rejects: map[int64]string{
				2: "gen_ai.usage.input_tokens", // twice: missing, and not a number
				3: "malformed JSON",
			},
			skipped: "2 spans were not GenAI inference spans",
		},
		{
			file: "testdata/otlp/genai-pretty.json",
			rows: []otlpWant{
				// Two calls of one agent's run (invoke_agent planner): a
				// chain, the second 1 s after the first ended.
				{ts: t1.Add(time.Second), api: trace.APIChat, model: "qwen2.5-7b", in: 900, out: 120, max: 120, stream: true, n: 1,
					e2e: new(2000.0), features: "reasoning,tools", tenant: true, tenantOf: "acme-corp", session: true},
				{ts: t1.Add(4 * time.Second), api: trace.APIChat, model: "qwen2.5-7b", in: 1100, out: 30, max: 30, stream: true, n: 2, turn: 1,
					e2e: new(500.0), think: new(1000.0), tenant: true, tenantOf: "acme-corp", session: true},
			},
			rejects: map[int64]string{95: "span: field attributes has the wrong type"},
			skipped: "1 spans were not GenAI inference spans",
		},
	}
	for _, tc := range cases {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "bucket")
			salt := testSalt(t)
			// No --format: the format is detected from the content.
			m, err := Convert(context.Background(), []string{tc.file}, out, ConvertOptions{MaxRejectRatio: -1,
				Options: Options{Stream: true, Log: LogOptions{Salt: salt}}})
			if err != nil {
				t.Fatal(err)
			}
			if m.Sources[0].Format != FormatOTLP {
				t.Fatalf("detected %q, want otlp", m.Sources[0].Format)
			}
			rows, _, err := trace.ReadAll(context.Background(), out)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != len(tc.rows) {
				t.Fatalf("%d rows, want %d: %+v", len(rows), len(tc.rows), rows)
			}
			for i, w := range tc.rows {
				r := rows[i]
				if !r.Time().Equal(w.ts) || r.API != w.api || r.Model != w.model || r.InputTokens != w.in || r.OutputTokens != w.out ||
					r.MaxTokens != w.max || r.Stream != w.stream || r.N != w.n || r.Turn != w.turn || strings.Join(r.Features, ",") != w.features {
					t.Errorf("row %d: %+v, want %+v", i, r, w)
				}
				for _, f := range []struct {
					name      string
					got, want *float64
				}{{"temperature", r.Temperature, w.temp}, {"top_p", r.TopP, w.topP}, {"ttft_ms", r.TTFTMs, w.ttft}, {"e2e_ms", r.E2EMs, w.e2e}, {"think_time_ms", r.ThinkTimeMs, w.think}} {
					if (f.got == nil) != (f.want == nil) || (f.got != nil && *f.got != *f.want) {
						t.Errorf("row %d: %s %v, want %v", i, f.name, deref(f.got), deref(f.want))
					}
				}
				if (r.CachedTokens == nil) != (w.cached == nil) || (r.CachedTokens != nil && *r.CachedTokens != *w.cached) {
					t.Errorf("row %d: cached_tokens %v, want %v", i, deref(r.CachedTokens), deref(w.cached))
				}
				if (r.Status == nil) != (w.status == nil) || (r.Status != nil && *r.Status != *w.status) {
					t.Errorf("row %d: status %v, want %v", i, deref(r.Status), deref(w.status))
				}
				if finish := deref(r.FinishReason); (w.finish == "" && finish != nil) || (w.finish != "" && finish != w.finish) {
					t.Errorf("row %d: finish_reason %v, want %q", i, finish, w.finish)
				}
				// Ids are keyed, never raw.
				if w.tenantOf != "" && r.Tenant != salt.HMAC("tenant", w.tenantOf) {
					t.Errorf("row %d: tenant %q is not the HMAC of %q", i, r.Tenant, w.tenantOf)
				}
				if !w.tenant && r.Tenant != "" {
					t.Errorf("row %d: tenant %q, want none", i, r.Tenant)
				}
				if w.sessionOf != "" && r.SessionID != salt.ID("session", w.sessionOf) {
					t.Errorf("row %d: session %q is not the keyed %q", i, r.SessionID, w.sessionOf)
				}
				if !w.session && r.SessionID != "" {
					t.Errorf("row %d: session %q, want none", i, r.SessionID)
				}
			}
			rej, err := os.ReadFile(filepath.Join(out, trace.RejectsName))
			if err != nil {
				t.Fatal(err)
			}
			for line, reason := range tc.rejects {
				if !bytes.Contains(rej, []byte(`"line":`+itoa(line)+`,"reason":"`+reason)) {
					t.Errorf("no reject on line %d for %q in:\n%s", line, reason, rej)
				}
			}
			if !strings.Contains(strings.Join(m.Notes, "\n"), tc.skipped) {
				t.Errorf("notes %q, want one saying %q", m.Notes, tc.skipped)
			}
		})
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestOTLPDetect checks an OTLP/JSON export is recognised by its content
// alone, one document per line or pretty-printed, and that other JSON is
// not taken for it.
func TestOTLPDetect(t *testing.T) {
	cases := []struct {
		name, input, want string
	}{
		{"one line", `{"resourceSpans":[]}` + "\n", FormatOTLP},
		{"pretty", "{\n  \"resourceSpans\": [\n  ]\n}\n", FormatOTLP},
		{"pretty with a byte-order mark", "\ufeff{\n \"resourceSpans\": []\n}", FormatOTLP},
		{"mooncake", `{"timestamp": 0, "input_length": 5, "output_length": 1}` + "\n", FormatMooncake},
		{"other pretty JSON", "{\n \"spans\": []\n}", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := Read(context.Background(), strings.NewReader(tc.input), Options{Name: "in", Log: LogOptions{Salt: testSalt(t)}}, &memSink{})
			if tc.want == "" {
				if err == nil {
					t.Fatalf("detected %q, want an error", st.Format)
				}
				return
			}
			if err != nil || st.Format != tc.want {
				t.Fatalf("format %q, err %v; want %q", st.Format, err, tc.want)
			}
		})
	}
}

// TestOTLPStreamBounds feeds pretty-printed documents that are hostile in
// size and shape: a document over MaxLineBytes is rejected as it streams
// without stopping the documents after it, a document cut short by the
// end of the input is rejected, and stray text between documents costs
// only its line.
func TestOTLPStreamBounds(t *testing.T) {
	span := func(start int) string {
		return `{"traceId":"aa","spanId":"` + itoa(int64(start)) + `","startTimeUnixNano":"` + itoa(int64(start)) + `000000000",` + // a span id of its own: a repeated one is a retried export's copy
			`"attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}},{"key":"gen_ai.usage.input_tokens","value":{"intValue":"7"}}]}`
	}
	doc := func(spans ...string) string {
		return "{\n\"resourceSpans\": [{\"scopeSpans\": [{\"spans\": [\n" + strings.Join(spans, ",\n") + "\n]}]}]\n}\n"
	}
	huge := "{\n\"resourceSpans\": [], \"pad\": \"" + strings.Repeat("x", MaxLineBytes) + "\"\n}\n"
	cases := []struct {
		name    string
		input   string
		rows    int
		rejects []int64 // lines
	}{
		{"two documents", doc(span(1735689600)) + doc(span(1735689601), span(1735689602)), 3, nil},
		// A one-span document takes 5 lines: the next starts on line 6.
		{"a document over the bound", doc(span(1735689600)) + huge + doc(span(1735689601)), 2, []int64{6}},
		{"cut short", doc(span(1735689600)) + "{\n\"resourceSpans\": [\n", 1, []int64{6}},
		{"stray text", doc(span(1735689600)) + "garbage here\n" + doc(span(1735689601)), 2, []int64{6}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sink := &memSink{}
			st, err := Read(context.Background(), strings.NewReader(tc.input), Options{Name: "in", Format: FormatOTLP, Log: LogOptions{Salt: testSalt(t)}}, sink)
			if err != nil {
				t.Fatal(err)
			}
			if st.Rows != int64(tc.rows) || len(sink.rejects) != len(tc.rejects) {
				t.Fatalf("%d rows, rejects %+v; want %d rows, rejects on lines %v", st.Rows, sink.rejects, tc.rows, tc.rejects)
			}
			for i, l := range tc.rejects {
				if sink.rejects[i].Line != l {
					t.Errorf("reject %d on line %d, want %d (%s)", i, sink.rejects[i].Line, l, sink.rejects[i].Reason)
				}
			}
		})
	}
}

// TestOTLPRejectReasons checks each bad GenAI attribute is rejected with a
// reason naming the attribute and never quoting its value.
func TestOTLPRejectReasons(t *testing.T) {
	base := `{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}},{"key":"gen_ai.usage.input_tokens","value":{"intValue":"7"}}`
	cases := []struct {
		name, attrs, span, want string
	}{
		{"negative usage", `{"key":"gen_ai.usage.output_tokens","value":{"intValue":"-3"}}`, "", "gen_ai.usage.output_tokens: negative"},
		{"fractional usage", `{"key":"gen_ai.usage.output_tokens","value":{"doubleValue":2.5}}`, "", "gen_ai.usage.output_tokens: not a whole number"},
		{"temperature as text", `{"key":"gen_ai.request.temperature","value":{"stringValue":"SECRETWARM"}}`, "", "gen_ai.request.temperature: not a finite number"},
		{"temperature out of range", `{"key":"gen_ai.request.temperature","value":{"doubleValue":1e9}}`, "", "temperature"},
		{"finish reasons as numbers", `{"key":"gen_ai.response.finish_reasons","value":{"arrayValue":{"values":[{"intValue":"1"}]}}}`, "", "gen_ai.response.finish_reasons: not an array of strings"},
		{"model as a bool", `{"key":"gen_ai.request.model","value":{"boolValue":true}}`, "", "gen_ai.request.model: not a string"},
		{"no start", "", `"startTimeUnixNano":"0",`, "startTimeUnixNano: missing"},
		{"end before start", "", `"startTimeUnixNano":"1735689600000000000","endTimeUnixNano":"1735689599000000000",`, "endTimeUnixNano: before startTimeUnixNano"},
		{"start as garbage", "", `"startTimeUnixNano":"SECRETTIME",`, "span: field startTimeUnixNano has the wrong type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			attrs := base
			if tc.attrs != "" {
				attrs += "," + tc.attrs
			}
			times := tc.span
			if times == "" {
				times = `"startTimeUnixNano":"1735689600000000000",`
			}
			line := `{"resourceSpans":[{"scopeSpans":[{"spans":[{` + times + `"attributes":[` + attrs + `]}]}]}]}` + "\n"
			sink := &memSink{}
			if _, err := Read(context.Background(), strings.NewReader(line), Options{Name: "in", Format: FormatOTLP, Log: LogOptions{Salt: testSalt(t)}}, sink); err != nil {
				t.Fatal(err)
			}
			if len(sink.rejects) != 1 || !strings.Contains(sink.rejects[0].Reason, tc.want) || strings.Contains(sink.rejects[0].Reason, "SECRET") {
				t.Fatalf("rejects %+v, want one saying %q", sink.rejects, tc.want)
			}
		})
	}
}

// FuzzReadOTLP feeds the OTLP reader arbitrary bytes: no panic, no
// negative length, and no reject reason or id column quoting the input
// (a marker only the input holds).
func FuzzReadOTLP(f *testing.F) {
	seedFiles(f, "testdata/otlp/*")
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"` + fuzzMarker + `","startTimeUnixNano":"1735689600000000000","attributes":[` +
		`{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}},{"key":"user.id","value":{"stringValue":"` + fuzzMarker + `"}},` +
		`{"key":"gen_ai.usage.input_tokens","value":{"stringValue":"` + fuzzMarker + `"}}]}]}]}]}` + "\n"))
	salt := testSalt(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var sink memSink
		if _, err := Read(context.Background(), bytes.NewReader(data), Options{Name: "fuzz", Format: FormatOTLP, Log: LogOptions{Salt: salt}}, &sink); err != nil {
			return
		}
		for _, r := range sink.rows {
			if r.InputTokens < 0 || r.OutputTokens < 0 || r.MaxTokens < 0 {
				t.Fatalf("negative lengths: %+v", r.Shape)
			}
			if strings.Contains(r.SessionID+r.RequestID+r.Tenant, fuzzMarker) {
				t.Fatalf("input text reached an id column: %+v", r.Identity)
			}
		}
		for _, r := range sink.rejects {
			if strings.Contains(r.Reason, fuzzMarker) {
				t.Fatalf("a reject quotes the input: %q", r.Reason)
			}
		}
	})
}

// TestOTLPVLLMRequestSpans converts a fixture of vLLM's own llm_request
// spans, written for this test in the shape vLLM exports them with
// --otlp-traces-endpoint: the span named llm_request, started at the
// request's arrival, its attributes those of vllm/tracing.py's
// SpanAttributes as vllm/v1/engine/output_processor.py sets them
// (gen_ai.usage.prompt_tokens and completion_tokens, gen_ai.request.n,
// gen_ai.latency.* in seconds), and no gen_ai.operation.name. Each becomes
// a request; the worker's span beside them is skipped and counted; a
// file holding only such spans fails saying how many it skipped and why.
func TestOTLPVLLMRequestSpans(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bucket")
	m, err := Convert(context.Background(), []string{"testdata/otlp/vllm-llm-request.jsonl"}, out, ConvertOptions{Options: Options{Stream: true, Log: LogOptions{Salt: testSalt(t)}}})
	if err != nil {
		t.Fatal(err)
	}
	rows, _, err := trace.ReadAll(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 1, 14, 11, 6, 14, 0, time.UTC)
	want := []struct {
		at        time.Duration
		in, out   int64
		ttft, e2e float64
	}{{0, 512, 64, 125, 1500}, {250 * time.Millisecond, 1024, 16, 250, 500}, {900 * time.Millisecond, 300, 200, 50, 2250}}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, w := range want {
		r := rows[i]
		if !r.Time().Equal(t0.Add(w.at)) || r.InputTokens != w.in || r.OutputTokens != w.out || r.MaxTokens != 256 || r.N != 1 || r.API != trace.APIChat ||
			r.Model != "meta-llama/Llama-3.1-8B-Instruct" || r.TTFTMs == nil || *r.TTFTMs != w.ttft || r.E2EMs == nil || *r.E2EMs != w.e2e || r.Temperature == nil || *r.Temperature != 0.7 {
			t.Errorf("row %d: %+v, want %+v", i, r, w)
		}
	}
	notes := strings.Join(m.Notes, "\n")
	for _, n := range []string{"3 spans are vLLM's own llm_request spans, read as requests", "1 spans were not GenAI inference spans"} {
		if !strings.Contains(notes, n) {
			t.Errorf("notes %q lack %q", m.Notes, n)
		}
	}
	_, err = Convert(context.Background(), []string{"testdata/otlp/vllm-worker-only.jsonl"}, filepath.Join(t.TempDir(), "none"), ConvertOptions{Options: Options{Log: LogOptions{Salt: testSalt(t)}}})
	if err == nil || !strings.Contains(err.Error(), "1 spans were not GenAI inference spans") || !strings.Contains(err.Error(), "no gen_ai.operation.name") {
		t.Errorf("a file of no request spans: %v; want an error saying how many spans were skipped and why", err)
	}
}
