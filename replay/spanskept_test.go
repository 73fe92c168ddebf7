package replay

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/traceid"
	"github.com/servetrace/servetrace/trace"
)

// freeLoopbackAddr returns a loopback address no one listened on a
// moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// postSpans posts an OTLP/JSON export to the receiver at addr, again
// while it answers busy (429), as an exporter retries.
func postSpans(addr string, body []byte) error {
	for range 600 {
		resp, err := http.Post("http://"+addr+"/v1/traces", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return nil
		case http.StatusTooManyRequests:
			time.Sleep(50 * time.Millisecond)
		default:
			return fmt.Errorf("export: %s", resp.Status)
		}
	}
	return fmt.Errorf("export: busy for 30 s")
}

// hostileSpanJSON is an export of the request's own llm_request span,
// carrying its prompt and answer as text, an event and a link, and of
// forged spans under the run's half of the trace id, made-up request
// halves: what an exporter that knows the run id (it is in every
// traceparent) could send.
func hostileSpanJSON(traceID string, forged int) []byte {
	span := func(id, name string) string {
		return `{"traceId":"` + id + `","spanId":"0102030405060708","name":"` + name + `","kind":2,` +
			`"startTimeUnixNano":"1765000000000000000","endTimeUnixNano":"1765000001000000000","attributes":[` +
			`{"key":"gen_ai.prompt","value":{"stringValue":"PROMPT TEXT kept nowhere"}},` +
			`{"key":"gen_ai.completion","value":{"stringValue":"ANSWER TEXT kept nowhere"}},` +
			`{"key":"gen_ai.usage.prompt_tokens","value":{"intValue":"3"}},` +
			`{"key":"gen_ai.latency.time_in_queue","value":{"doubleValue":0.25}}],` +
			`"events":[{"name":"gen_ai.content.prompt","attributes":[{"key":"gen_ai.prompt","value":{"stringValue":"PROMPT TEXT kept nowhere"}}]}],` +
			`"links":[{"traceId":"` + id + `","spanId":"0807060504030201"}]}`
	}
	spans := []string{span(traceID, "llm_request")}
	for range forged {
		var half [8]byte
		rand.Read(half[:])
		spans = append(spans, span(traceID[:16]+hex.EncodeToString(half[:]), "llm_request"))
	}
	return []byte(`{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"PROMPT TEXT kept nowhere"}}]},` +
		`"scopeSpans":[{"scope":{"name":"vllm"},"spans":[` + strings.Join(spans, ",") + `]}]}]}`)
}

// TestSpansKeepOnlyTheRunsRequests replays ten requests to a server that
// exports, for each, its own span with the prompt and answer as text and
// 20 forged spans under the run's half of the trace id. The run keeps
// exactly its ten requests' spans, writes no text of them, counts the
// forged ones and says in run.json what it dropped.
func TestSpansKeepOnlyTheRunsRequests(t *testing.T) {
	const requests, forged = 10, 20
	collector := freeLoopbackAddr(t)
	srv := newListener(t, func(_ *listener, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			tp := strings.Split(r.Header.Get("Traceparent"), "-")
			if len(tp) != 4 {
				http.Error(w, "no traceparent", http.StatusBadRequest)
				return
			}
			if err := postSpans(collector, hostileSpanJSON(tp[1], forged)); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		okServer(w, r)
	})
	var reqs []trace.Request
	want := map[string]bool{}
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range requests {
		q := oneRequest(nil)()[0]
		q.RequestID = fmt.Sprintf("r%d", i)
		q.TS = t0.Add(time.Duration(i) * 20 * time.Millisecond).UnixMicro()
		reqs = append(reqs, q)
		want[traceid.For("kept-run", q.RequestID).String()] = true
	}
	opts := DefaultOptions()
	opts.Target, opts.RunID = srv.srv.URL, "kept-run"
	opts.Timeout = 30 * time.Second
	opts.CollectSpans, opts.SpansWait = collector, 10*time.Second
	if err := opts.validate(); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(t.TempDir(), "run")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	info, err := runRequests(ctx, sliceSource(reqs), &trace.Manifest{Kind: "workload", BlockSize: 16}, "", runDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if info.Outcomes[trace.OutcomeOK] != requests {
		t.Fatalf("outcomes %v", info.Outcomes)
	}
	s := info.Spans
	if s == nil || s.Kept != requests || s.UnknownRequests != requests*forged || s.OverLimit != 0 {
		t.Errorf("spans %+v: want the %d requests' spans kept and %d forged ones counted as unknown requests", s, requests, requests*forged)
	}
	b, err := os.ReadFile(filepath.Join(runDir, SpansName))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("TEXT kept nowhere")) {
		t.Errorf("%s holds text the spans carried", SpansName)
	}
	got := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		_, rest, _ := strings.Cut(sc.Text(), `"traceId":"`)
		id, _, _ := strings.Cut(rest, `"`)
		if !want[id] || got[id] {
			t.Errorf("%s holds a span of trace %s, not one of the run's requests' or a second", SpansName, id)
		}
		got[id] = true
	}
	if len(got) != requests {
		t.Errorf("%s holds %d requests' spans, want %d", SpansName, len(got), requests)
	}
	notes := strings.Join(info.Notes, "\n")
	for _, w := range []string{fmt.Sprintf("%d request spans", requests*forged), "attributes"} {
		if !strings.Contains(notes, w) {
			t.Errorf("run.json notes do not say %q:\n%s", w, notes)
		}
	}
}
