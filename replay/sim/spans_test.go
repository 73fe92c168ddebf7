package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/llmspan"
	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/internal/traceid"
	"github.com/servetrace/servetrace/spans"
)

// spanRun is the run id the test's traceparents name, so the collector
// keeps their spans and counts any other trace's as another run's.
const spanRun = "sim-span-export"

// spanReq is a request the export test sends.
type spanReq struct {
	name        string // the traceparent's request id; "" sends none
	path, body  string
	stream      bool
	maxTokens   int
	n           int
	temperature float64 // 0: none in the span, as vLLM leaves a greedy request's out
}

var spanReqs = []spanReq{
	{name: "chat-stream", path: "/v1/chat/completions", stream: true, maxTokens: 6, n: 1, temperature: 1,
		body: `{"model":"servetrace-sim","messages":[{"role":"user","content":"where did the time go"}],"max_tokens":6,"stream":true,"stream_options":{"include_usage":true}}`},
	{name: "chat-whole-n3", path: "/v1/chat/completions", maxTokens: 4, n: 3, temperature: 0.5,
		body: `{"model":"servetrace-sim","messages":[{"role":"user","content":"three answers"}],"max_tokens":4,"n":3,"temperature":0.5}`},
	{name: "completion-stream", path: "/v1/completions", stream: true, maxTokens: 5, n: 1, temperature: 1,
		body: `{"model":"servetrace-sim","prompt":"once upon a time","max_tokens":5,"stream":true,"stream_options":{"include_usage":true},"top_p":0.9}`},
	{name: "completion-greedy", path: "/v1/completions", maxTokens: 3, n: 1,
		body: `{"model":"servetrace-sim","prompt":"two plus two","max_tokens":3,"temperature":0}`},
	{name: "", path: "/v1/completions", maxTokens: 2, n: 1, temperature: 1,
		body: `{"model":"servetrace-sim","prompt":"no trace context","max_tokens":2}`},
}

// TestSpanExportEndToEnd serves the simulator with span export on, to
// servetrace's own OTLP receiver over each protocol and endpoint form,
// sends streamed and whole requests with a traceparent (and one without),
// stops the server and holds each span to the request and to the
// simulator's own accounting: in the client's trace, named llm_request,
// kind server, every attribute there, and queue + prefill + decode equal
// to e2e to the nanosecond, as the engine measured them. Nothing waits
// on a timer: Close flushes the batched spans.
func TestSpanExportEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		name, protocol string
		endpoint       func(addr string) string
	}{
		{"grpc host:port", OTLPGRPC, func(a string) string { return a }},
		{"grpc http URL", OTLPGRPC, func(a string) string { return "http://" + a }},
		{"http/protobuf URL", OTLPHTTPProtobuf, func(a string) string { return "http://" + a + "/v1/traces" }},
		{"http/protobuf host:port", OTLPHTTPProtobuf, func(a string) string { return a }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, kept, rcv := listenSpans(t)
			opts := fast()
			opts.OTLPTracesEndpoint, opts.OTLPProtocol = tc.endpoint(rcv.Addr()), tc.protocol
			rs := start(t, opts)
			ids := make([]string, len(spanReqs))
			usage := make([]int, len(spanReqs))
			for i, r := range spanReqs {
				ids[i], usage[i] = sendSpanReq(t, rs.URL, r)
			}
			if err := rs.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}

			counts := c.Counts() // after the writes to kept, under the collector's lock
			if counts.Spans != int64(len(spanReqs)) || counts.Kept != int64(len(spanReqs)-1) || counts.OtherRuns != 1 {
				t.Errorf("counts %+v: want %d spans, %d kept and the one without traceparent in a trace of its own", counts, len(spanReqs), len(spanReqs)-1)
			}
			byID := map[string]exportedSpan{}
			for _, sp := range keptSpans(t, kept.String()) {
				byID[sp.attrs[llmspan.RequestID].str] = sp
			}
			phases := map[string]bool{}
			for _, p := range c.Phases() {
				phases[p.ServerRequestID] = true
			}
			for i, r := range spanReqs {
				queue, prefill, decode, ok := rs.Phases(ids[i])
				if !ok {
					t.Errorf("%s: the simulator has no phases for %s", r.name, ids[i])
					continue
				}
				if r.name == "" {
					continue // its span is counted above, in another trace
				}
				sp, found := byID[ids[i]]
				if !found || !phases[ids[i]] {
					t.Errorf("%s: no span kept for %s", r.name, ids[i])
					continue
				}
				checkSpan(t, r, sp, usage[i], queue, prefill, decode)
			}
		})
	}
}

// listenSpans starts servetrace's OTLP receiver on loopback for the
// test's run, writing the spans it keeps to the buffer returned. The
// collector writes under its lock: read the buffer after a call that
// takes it (Counts), once no export can come.
func listenSpans(t *testing.T) (*spans.Collector, *bytes.Buffer, *spans.Receiver) {
	t.Helper()
	c := spans.NewCollector(spanRun, 100)
	for _, r := range spanReqs {
		if r.name != "" {
			c.Expect(r.name) // the requests the test sends with a traceparent
		}
	}
	kept := &bytes.Buffer{}
	c.WriteKept(kept)
	rcv, err := spans.Listen("127.0.0.1:0", c, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rcv.Close() })
	return c, kept, rcv
}

// TestRequestsWithoutASpan: a request that fails before its end, with a
// 500 before the first byte or an error mid-stream, exports no span and
// leaves no phases, as vLLM emits the span only for a finished request;
// one whose traceparent is not sampled finishes with its phases but no
// span, as under vLLM's default sampler (parent-based).
func TestRequestsWithoutASpan(t *testing.T) {
	r := spanReqs[0]
	sampled := traceid.Traceparent(spanRun, r.name)
	for _, c := range []struct {
		name        string
		fault       func(*Options)
		traceparent string
		phases      bool
	}{
		{"500", func(o *Options) { o.FailRate = 1 }, sampled, false},
		{"error mid-stream", func(o *Options) { o.StreamErrorRate = 1 }, sampled, false},
		{"parent not sampled", func(*Options) {}, strings.TrimSuffix(sampled, "01") + "00", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			col, _, rcv := listenSpans(t)
			opts := fast()
			opts.OTLPTracesEndpoint = rcv.Addr()
			c.fault(&opts)
			rs := start(t, opts)
			req, _ := http.NewRequest(http.MethodPost, rs.URL+r.path, strings.NewReader(r.body))
			req.Header.Set("traceparent", c.traceparent)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err := rs.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			if n := col.Counts().Spans; n != 0 {
				t.Errorf("%d spans exported, want none", n)
			}
			if _, _, _, ok := rs.Phases("chatcmpl-1"); ok != c.phases {
				t.Errorf("phases logged: %v, want %v", ok, c.phases)
			}
		})
	}
}

// checkSpan holds one exported span to its request and to the engine's
// phases.
func checkSpan(t *testing.T, r spanReq, sp exportedSpan, completion int, queue, prefill, decode time.Duration) {
	t.Helper()
	tp := traceid.Traceparent(spanRun, r.name)
	if want := traceid.For(spanRun, r.name).String(); sp.TraceID != want || sp.ParentSpanID != tp[36:52] {
		t.Errorf("%s: trace %s parent %s, want %s and %s from the traceparent", r.name, sp.TraceID, sp.ParentSpanID, want, tp[36:52])
	}
	if sp.Name != llmspan.Name || !sp.server() {
		t.Errorf("%s: span %q of kind %s, want %q of kind server", r.name, sp.Name, sp.Kind, llmspan.Name)
	}
	ns := func(key string) int64 {
		a, ok := sp.attrs[key]
		if !ok || a.kind != "double" {
			t.Errorf("%s: %s is %+v, want seconds as a double", r.name, key, a)
		}
		return int64(math.Round(a.num * 1e9))
	}
	q, p, d, e2e := ns(llmspan.Queue), ns(llmspan.Prefill), ns(llmspan.Decode), ns(llmspan.E2E)
	if q+p+d != e2e || ns(llmspan.TTFT) != q+p || ns(llmspan.Inference) != p+d {
		t.Errorf("%s: queue %d + prefill %d + decode %d ns is not e2e %d, or ttft %d, inference %d disagree", r.name, q, p, d, e2e, ns(llmspan.TTFT), ns(llmspan.Inference))
	}
	if q != int64(queue) || p != int64(prefill) || d != int64(decode) {
		t.Errorf("%s: span says queue %d, prefill %d, decode %d ns; the engine measured %d, %d, %d", r.name, q, p, d, queue, prefill, decode)
	}
	if dur := sp.end - sp.start; dur != e2e {
		t.Errorf("%s: the span lasts %d ns, its e2e is %d", r.name, dur, e2e)
	}
	ints := map[string]int{llmspan.CompletionTokens: completion, llmspan.MaxTokens: r.maxTokens, llmspan.N: r.n}
	for key, want := range ints {
		if a := sp.attrs[key]; a.kind != "int" || a.num != float64(want) {
			t.Errorf("%s: %s is %+v, want the int %d", r.name, key, a, want)
		}
	}
	if a := sp.attrs[llmspan.PromptTokens]; a.kind != "int" || a.num < 1 {
		t.Errorf("%s: %s is %+v, want a positive int", r.name, llmspan.PromptTokens, a)
	}
	if a, ok := sp.attrs[llmspan.Temperature]; ok != (r.temperature != 0) || a.num != r.temperature {
		t.Errorf("%s: %s is %+v (present %v), want %v", r.name, llmspan.Temperature, a, ok, r.temperature)
	}
	if _, ok := sp.attrs[llmspan.TopP]; !ok {
		t.Errorf("%s: no %s (vLLM's default is 1)", r.name, llmspan.TopP)
	}
}

// sendSpanReq sends r and returns its response id and completion tokens.
func sendSpanReq(t *testing.T, base string, r spanReq) (string, int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+r.path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if r.name != "" {
		req.Header.Set("traceparent", traceid.Traceparent(spanRun, r.name))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: status %d: %s", r.name, resp.StatusCode, b)
	}
	type usage struct {
		CompletionTokens int `json:"completion_tokens"`
	}
	if !r.stream {
		var body struct {
			ID    string `json:"id"`
			Usage usage  `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		return body.ID, body.Usage.CompletionTokens
	}
	var id string
	var u usage
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			ID    string `json:"id"`
			Usage *usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("%s: %v in %s", r.name, err, data)
		}
		id = ev.ID
		if ev.Usage != nil {
			u = *ev.Usage
		}
	}
	return id, u.CompletionTokens
}

// exportedSpan is a span as the collector wrote it (OTLP/JSON, hex ids).
type exportedSpan struct {
	TraceID      string          `json:"traceId"`
	ParentSpanID string          `json:"parentSpanId"`
	Name         string          `json:"name"`
	Kind         json.RawMessage `json:"kind"`
	Start        string          `json:"startTimeUnixNano"`
	End          string          `json:"endTimeUnixNano"`
	Attributes   []struct {
		Key   string `json:"key"`
		Value struct {
			Double *float64 `json:"doubleValue"`
			Int    *string  `json:"intValue"`
			Str    *string  `json:"stringValue"`
		} `json:"value"`
	} `json:"attributes"`

	attrs      map[string]spanAttr
	start, end int64
}

// spanAttr is an attribute's type and value.
type spanAttr struct {
	kind string // double, int, string
	num  float64
	str  string
}

// server reports whether the span's kind is SERVER, as an enum name or
// its number.
func (sp exportedSpan) server() bool {
	k := strings.Trim(string(sp.Kind), `"`)
	return k == "SPAN_KIND_SERVER" || k == "2"
}

// keptSpans reads the collector's OTLP/JSON lines.
func keptSpans(t *testing.T, lines string) []exportedSpan {
	t.Helper()
	var out []exportedSpan
	for line := range strings.Lines(lines) {
		var msg struct {
			ResourceSpans []struct {
				ScopeSpans []struct {
					Spans []exportedSpan `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		}
		if err := json.Unmarshal([]byte(line), &msg); err != nil {
			t.Fatalf("kept spans: %v", err)
		}
		for _, rs := range msg.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					sp.attrs = map[string]spanAttr{}
					for _, a := range sp.Attributes {
						switch v := a.Value; {
						case v.Double != nil:
							sp.attrs[a.Key] = spanAttr{kind: "double", num: *v.Double}
						case v.Int != nil:
							n, _ := strconv.ParseInt(*v.Int, 10, 64)
							sp.attrs[a.Key] = spanAttr{kind: "int", num: float64(n)}
						case v.Str != nil:
							sp.attrs[a.Key] = spanAttr{kind: "string", str: *v.Str}
						}
					}
					sp.start, _ = strconv.ParseInt(sp.Start, 10, 64)
					sp.end, _ = strconv.ParseInt(sp.End, 10, 64)
					out = append(out, sp)
				}
			}
		}
	}
	return out
}

// TestSpanOptionsRefused: a protocol vLLM does not speak, and an
// endpoint that is not host:port or an http:// URL, are refused by New
// as options (so the CLI names its flag), before anything starts.
func TestSpanOptionsRefused(t *testing.T) {
	for _, c := range []struct{ endpoint, protocol, field string }{
		{"127.0.0.1:4317", "http/json", "OTLPProtocol"},
		{"127.0.0.1:4317", "udp", "OTLPProtocol"},
		{"", "thrift", "OTLPProtocol"}, // refused even with export off: a typo should not wait for an endpoint
		{"https://127.0.0.1:4317", OTLPGRPC, "OTLPTracesEndpoint"},
		{"grpc://127.0.0.1:4317", OTLPGRPC, "OTLPTracesEndpoint"},
		{"collector", OTLPHTTPProtobuf, "OTLPTracesEndpoint"},
		{"127.0.0.1", OTLPGRPC, "OTLPTracesEndpoint"},
	} {
		o := fast()
		o.OTLPTracesEndpoint, o.OTLPProtocol = c.endpoint, c.protocol
		s, err := New(o)
		if err == nil {
			s.Close()
			t.Errorf("%q over %q: accepted", c.endpoint, c.protocol)
			continue
		}
		if oe, ok := opterr.As(err); !ok || oe.Field != c.field {
			t.Errorf("%q over %q: %v, want an option error on %s", c.endpoint, c.protocol, err, c.field)
		}
	}
}
