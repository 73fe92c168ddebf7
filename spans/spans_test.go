package spans

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/servetrace/servetrace/internal/llmspan"
	"github.com/servetrace/servetrace/internal/traceid"
	"github.com/servetrace/servetrace/trace"
)

// TestReadFileVLLMFixture reads a file of vLLM's llm_request spans as the
// collector's file exporter writes them (testdata/vllm-llm-request.jsonl,
// hand-written in the shape of vllm/v1/engine/output_processor.py's
// do_tracing; ids of run "run-fixture" computed with sha256sum): two
// requests kept with their phases exactly, and every other span counted
// by what it was.
func TestReadFileVLLMFixture(t *testing.T) {
	c := NewCollector("run-fixture", 100)
	for _, id := range []string{"req-1", "req-2", "req-3"} {
		c.Expect(id)
	}
	if err := ReadFile("testdata/vllm-llm-request.jsonl", c); err != nil {
		t.Fatal(err)
	}
	got := c.Counts()
	want := Counts{Spans: 6, Kept: 2, OtherRuns: 1, NotRequests: 1, Duplicates: 1, Invalid: map[string]int64{"gen_ai.latency.time_in_queue": 1}}
	if !equalCounts(got, want) {
		t.Errorf("counts %+v, want %+v", got, want)
	}
	rows := c.Phases()
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	byID := map[string]int{rows[0].TraceID: 0, rows[1].TraceID: 1}
	r1 := rows[byID[traceid.For("run-fixture", "req-1").String()]]
	if *r1.QueueS != 0.25 || *r1.PrefillS != 0.125 || *r1.DecodeS != 1.5 || *r1.InferenceS != 1.625 || *r1.TTFTS != 0.375 || *r1.E2ES != 1.875 ||
		*r1.PromptTokens != 512 || *r1.CompletionTokens != 64 || r1.ServerRequestID != "chatcmpl-1f0c" || r1.Source != "vllm" {
		t.Errorf("req-1's phases read as %+v", r1)
	}
	r2 := rows[byID[traceid.For("run-fixture", "req-2").String()]]
	if *r2.QueueS != 0.5 || *r2.DecodeS != 0.375 {
		t.Errorf("req-2's phases read as %+v", r2)
	}
}

func equalCounts(a, b Counts) bool {
	if a.Spans != b.Spans || a.Kept != b.Kept || a.OtherRuns != b.OtherRuns || a.NotRequests != b.NotRequests ||
		a.Duplicates != b.Duplicates || a.OverLimit != b.OverLimit || len(a.Invalid) != len(b.Invalid) {
		return false
	}
	for k, v := range b.Invalid {
		if a.Invalid[k] != v {
			return false
		}
	}
	return true
}

// export builds an OTLP export of llm_request spans for the requests of
// run, each with a queue of 0.5 s.
func export(run string, requests ...string) *coltracepb.ExportTraceServiceRequest {
	ss := &tracepb.ScopeSpans{}
	for i, r := range requests {
		id := traceid.For(run, r)
		ss.Spans = append(ss.Spans, &tracepb.Span{TraceId: id[:], SpanId: []byte{1, 2, 3, 4, 5, 6, 7, byte(i + 1)}, Name: "llm_request",
			Kind: tracepb.Span_SPAN_KIND_SERVER, Attributes: []*commonpb.KeyValue{
				{Key: llmspan.Queue, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 0.5}}},
				{Key: llmspan.PromptTokens, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 7}}},
			}})
	}
	return &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{ss}}}}
}

// TestReceiverTakesEveryProtocol: one receiver address takes OTLP over
// gRPC and over HTTP with protobuf, JSON and gzip bodies, as the
// exporters send them.
func TestReceiverTakesEveryProtocol(t *testing.T) {
	c := NewCollector("run", 100)
	for _, id := range []string{"protobuf", "json", "gzip", "grpc"} {
		c.Expect(id)
	}
	r, err := Listen("127.0.0.1:0", c, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	post := func(body []byte, ct, enc string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+r.Addr()+"/v1/traces", bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		if enc != "" {
			req.Header.Set("Content-Encoding", enc)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: status %d", ct, enc, resp.StatusCode)
		}
	}
	pb, _ := proto.Marshal(export("run", "protobuf"))
	post(pb, "application/x-protobuf", "")
	post(otlpJSON(t, export("run", "json")), "application/json", "")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	pb2, _ := proto.Marshal(export("run", "gzip"))
	zw.Write(pb2)
	zw.Close()
	post(gz.Bytes(), "application/x-protobuf", "gzip")

	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := coltracepb.NewTraceServiceClient(conn).Export(ctx, export("run", "grpc")); err != nil {
		t.Fatalf("gRPC export: %v", err)
	}
	if !c.WaitFor(ctx, 4) {
		t.Fatalf("counts %+v, want the 4 requests' spans kept", c.Counts())
	}
	want := map[string]bool{}
	for _, r := range []string{"protobuf", "json", "gzip", "grpc"} {
		want[traceid.For("run", r).String()] = true
	}
	for _, p := range c.Phases() {
		if !want[p.TraceID] || *p.QueueS != 0.5 || *p.PromptTokens != 7 {
			t.Errorf("kept %+v", p)
		}
	}
}

// TestReceiverRefusesOversize: an export over MaxMessageBytes is refused
// whole, whether sent as is, as a gzip bomb or over gRPC, and nothing of
// it is kept.
func TestReceiverRefusesOversize(t *testing.T) {
	c := NewCollector("run", 100)
	r, err := Listen("127.0.0.1:0", c, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	big := bytes.Repeat([]byte{'a'}, MaxMessageBytes+1)
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	zw.Write(big)
	zw.Close()
	for _, c := range []struct {
		name string
		body []byte
		enc  string
	}{{"plain", big, ""}, {"gzip bomb", bomb.Bytes(), "gzip"}} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+r.Addr()+"/v1/traces", bytes.NewReader(c.body))
		req.Header.Set("Content-Type", "application/x-protobuf")
		if c.enc != "" {
			req.Header.Set("Content-Encoding", c.enc)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Logf("%s: %v", c.name, err)
			continue // the server may close the connection before reading all of it
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: status %d, want 413", c.name, resp.StatusCode)
		}
	}
	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msg := export("run", "a")
	msg.ResourceSpans[0].ScopeSpans[0].Spans[0].Name = string(big)
	_, err = coltracepb.NewTraceServiceClient(conn).Export(context.Background(), msg)
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("gRPC export over the bound: %v, want ResourceExhausted", err)
	}
	if n := c.Counts().Spans; n != 0 {
		t.Errorf("%d spans taken from refused exports", n)
	}
}

// TestCollectorHoldsAtMostLimit: spans past the limit are counted, not
// held, Listen without a host listens on loopback only, and another
// interface is refused unless allowed.
func TestCollectorHoldsAtMostLimit(t *testing.T) {
	c := NewCollector("run", 3)
	for _, id := range []string{"a", "b", "c"} {
		c.Expect(id)
	}
	c.limit = 2
	add(t, c, export("run", "a", "b", "c"))
	if n, over := len(c.Phases()), c.Counts().OverLimit; n != 2 || over != 1 {
		t.Errorf("held %d, over the limit %d; want 2 and 1", n, over)
	}
	r, err := Listen(":0", c, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !strings.HasPrefix(r.Addr(), "127.0.0.1:") {
		t.Errorf("listening on %s, want loopback by default", r.Addr())
	}
	if r, err := Listen("0.0.0.0:0", c, false); !errors.Is(err, ErrNotLoopback) {
		if err == nil {
			r.Close()
		}
		t.Errorf("every interface without allowRemote: %v, want ErrNotLoopback", err)
	}
}

// TestWriteKeptIsOTLPJSON: the kept spans are written as OTLP/JSON lines
// with hex ids, only the run's request spans, and read back as they were.
func TestWriteKeptIsOTLPJSON(t *testing.T) {
	var out bytes.Buffer
	c := NewCollector("run", 10)
	c.Expect("a")
	c.WriteKept(&out)
	msg := export("run", "a")
	msg.ResourceSpans[0].ScopeSpans[0].Spans = append(msg.ResourceSpans[0].ScopeSpans[0].Spans, export("other-run", "b").ResourceSpans[0].ScopeSpans[0].Spans...)
	add(t, c, msg)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines written, want 1:\n%s", len(lines), out.String())
	}
	var doc struct {
		ResourceSpans []struct {
			ScopeSpans []struct {
				Spans []struct {
					TraceID string `json:"traceId"`
					Name    string `json:"name"`
				} `json:"spans"`
			} `json:"scopeSpans"`
		} `json:"resourceSpans"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &doc); err != nil {
		t.Fatal(err)
	}
	sp := doc.ResourceSpans[0].ScopeSpans[0].Spans
	if len(sp) != 1 || sp[0].TraceID != traceid.For("run", "a").String() || sp[0].Name != "llm_request" {
		t.Errorf("written spans %+v, want run's request a only, its id in hex", sp)
	}
	again := NewCollector("run", 10)
	again.Expect("a")
	if _, err := again.addJSON([]byte(lines[0])); err != nil || again.Counts().Kept != 1 {
		t.Errorf("the written line reads back as %+v (%v)", again.Counts(), err)
	}
}

// TestJoinFiles joins the fixture's spans to a run named run-fixture,
// keeping only those of the requests its results say were sent, refuses
// to replace the phases without force, and refuses a file that is not an
// export, naming its line.
func TestJoinFiles(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, "run-fixture", []string{"req-1", "req-2", "req-3"}, []string{"req-4"})
	unsent := filepath.Join(t.TempDir(), "unsent.jsonl")
	os.WriteFile(unsent, append(otlpJSON(t, export("run-fixture", "req-4")), '\n'), 0o644)
	counts, err := JoinFiles(dir, []string{"testdata/vllm-llm-request.jsonl", unsent}, false)
	if err != nil || counts.Kept != 2 || counts.UnknownRequests != 1 {
		t.Fatalf("join: %+v, %v; want 2 kept, and the span of req-4, never sent, an unknown request's", counts, err)
	}
	rows, ok, err := trace.ReadServerPhases(dir)
	if err != nil || !ok || len(rows) != 2 {
		t.Fatalf("phases read back: %d rows, %v, %v", len(rows), ok, err)
	}
	if _, err := JoinFiles(dir, []string{"testdata/vllm-llm-request.jsonl"}, false); !errors.Is(err, trace.ErrOutputExists) {
		t.Errorf("a second join without force: %v, want ErrOutputExists", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	good, _ := os.ReadFile("testdata/vllm-llm-request.jsonl")
	os.WriteFile(bad, append(good, []byte("{\"resourceSpans\": 7}\n")...), 0o644)
	if _, err := JoinFiles(dir, []string{bad}, true); err == nil || !strings.Contains(err.Error(), "bad.jsonl:3") {
		t.Errorf("a bad third line: %v, want an error naming bad.jsonl:3", err)
	}
}

// add gives c one export, as the receiver takes it off the wire.
func add(t *testing.T, c *Collector, msg *coltracepb.ExportTraceServiceRequest) {
	t.Helper()
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.addProto(b); err != nil {
		t.Fatal(err)
	}
}

// otlpJSON writes msg in OTLP/JSON: protojson's encoding with the ids
// turned from its base64 to hex, as opentelemetry-proto specifies.
func otlpJSON(t *testing.T, msg *coltracepb.ExportTraceServiceRequest) []byte {
	t.Helper()
	b, err := protojson.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	var toHex func(v any)
	toHex = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && (k == "traceId" || k == "spanId" || k == "parentSpanId") {
					raw, _ := base64.StdEncoding.DecodeString(s)
					x[k] = hex.EncodeToString(raw)
					continue
				}
				toHex(e)
			}
		case []any:
			for _, e := range x {
				toHex(e)
			}
		}
	}
	toHex(v)
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeRun writes a run dir of run runID whose results hold the requests
// sent and, never sent, notSent.
func writeRun(t *testing.T, dir, runID string, sent, notSent []string) {
	t.Helper()
	w, err := trace.NewResultWriter(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i, id := range append(append([]string{}, sent...), notSent...) {
		res := trace.Result{RunID: runID, ScheduledNs: int64(i), Outcome: trace.OutcomeOK}
		res.RequestID = id
		if i < len(sent) {
			res.SentNs = trace.Ptr(int64(i))
		} else {
			res.Outcome = trace.OutcomeNotSent
		}
		if err := w.Write(res); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	info := trace.RunInfo{SchemaVersion: 1, RunID: runID, Scheduled: int64(len(sent) + len(notSent)), Parts: w.Parts(), Complete: true}
	if err := trace.WriteJSONAtomic(filepath.Join(dir, trace.RunInfoName), info); err != nil {
		t.Fatal(err)
	}
}

// TestCollectorKeepsOnlySentRequests gives the collector, over protobuf
// and over OTLP/JSON, the spans of requests the run sent, forged spans
// under the run's half of the trace id, and spans carrying prompt text,
// events and links: only the sent requests' spans are kept, one each;
// the forged ones are counted as unknown requests; nothing but
// llm_request's attributes is written, and the written file stops at its
// bound.
func TestCollectorKeepsOnlySentRequests(t *testing.T) {
	for _, enc := range []string{"protobuf", "json"} {
		t.Run(enc, func(t *testing.T) {
			var out bytes.Buffer
			c := NewCollector("run", 100)
			c.WriteKept(&out)
			c.Expect("a")
			c.Expect("b")
			msg := export("run", "a", "b", "forged-1", "forged-2", "a")
			for _, sp := range msg.ResourceSpans[0].ScopeSpans[0].Spans {
				sp.Attributes = append(sp.Attributes, &commonpb.KeyValue{Key: "gen_ai.prompt", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "PROMPT TEXT"}}})
				sp.Events = []*tracepb.Span_Event{{Name: "PROMPT TEXT"}}
				sp.Links = []*tracepb.Span_Link{{TraceId: sp.TraceId, SpanId: sp.SpanId}}
			}
			msg.ResourceSpans[0].Resource = &resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "PROMPT TEXT"}}}}}
			if enc == "json" {
				if _, err := c.addJSON(otlpJSON(t, msg)); err != nil {
					t.Fatal(err)
				}
			} else {
				add(t, c, msg)
			}
			got := c.Counts()
			if got.Kept != 2 || got.UnknownRequests != 2 || got.Duplicates != 1 {
				t.Errorf("counts %+v: want a and b kept, 2 forged unknown, 1 duplicate", got)
			}
			if bytes.Contains(out.Bytes(), []byte("PROMPT TEXT")) || bytes.Contains(out.Bytes(), []byte("gen_ai.prompt")) {
				t.Errorf("the kept spans' file holds what the spans carried besides their phases:\n%s", out.String())
			}
			if n := strings.Count(out.String(), "\n"); n != 2 {
				t.Errorf("%d lines written, want 2", n)
			}
			if d := c.Dropped(); d != 2*3 {
				t.Errorf("%d attributes, events and links dropped from the kept spans, want 6", d)
			}
		})
	}
	var out bytes.Buffer
	c := NewCollector("run", 100)
	c.WriteKept(&out)
	c.maxWrite = 500
	for _, id := range []string{"a", "b", "c"} {
		c.Expect(id)
	}
	add(t, c, export("run", "a", "b", "c"))
	if got := c.Counts().Kept; got != 3 || c.Unwritten() == 0 || int64(out.Len()) > c.maxWrite {
		t.Errorf("kept %d, %d unwritten, %d bytes written; want 3 kept, the file within %d bytes, the rest counted", got, c.Unwritten(), out.Len(), c.maxWrite)
	}
}
