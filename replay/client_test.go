package replay

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// rawServer answers every connection on loopback with the given raw HTTP
// response bytes (status line and headers, blank line, body), then closes.
// It is how captured transcripts of real servers, quirks included, reach the
// client unchanged.
func rawServer(t *testing.T, response []byte) string { return cannedServer(t, response, false) }

// cannedServer answers requests on loopback with response; with keepAlive
// every request on a connection, else the first, closing after it.
func cannedServer(tb testing.TB, response []byte, keepAlive bool) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if _, err := c.Write(response); err != nil || !keepAlive {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// transcript loads a captured response and rewrites its framing for a
// connection that closes after the body: curl has already de-chunked it.
func transcript(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "ollama-0.17.4", name))
	if err != nil {
		t.Fatal(err)
	}
	head, body, ok := bytes.Cut(b, []byte("\r\n\r\n"))
	if !ok {
		t.Fatalf("%s: no header/body separator", name)
	}
	var out bytes.Buffer
	for _, line := range strings.Split(string(head), "\r\n") {
		l := strings.ToLower(line)
		if strings.HasPrefix(l, "transfer-encoding:") || strings.HasPrefix(l, "content-length:") {
			continue
		}
		out.WriteString(line + "\r\n")
	}
	out.WriteString("Connection: close\r\n\r\n")
	out.Write(body)
	return out.Bytes()
}

func testRunner(target string) *Runner {
	start := time.Now()
	opts := DefaultOptions()
	opts.Target = target
	opts.Timeout = 5 * time.Second
	r, _ := newRunner(opts)
	r.start, r.clock = start, monotonicClock(start)
	return r
}

func TestClientOnRealServerTranscripts(t *testing.T) {
	cases := []struct {
		file     string
		api      string
		stream   bool
		outcome  string
		status   int32
		tokens   int64 // observed_output_tokens
		events   int   // token events (token_times_ns entries)
		finish   string
		errorHas string
	}{
		// Every chat delta repeats the role; the first already has content,
		// and the finish chunk's empty content is not a token.
		{"chat-stream-usage.http", trace.APIChat, true, trace.OutcomeOK, 200, 6, 6, "length", ""},
		// Completions chunks carry zero usage until the final choices:[] chunk.
		{"completions-stream-usage.http", trace.APICompletions, true, trace.OutcomeOK, 200, 6, 6, "length", ""},
		{"chat-nostream.http", trace.APIChat, false, trace.OutcomeOK, 200, 5, 0, "length", ""},
		{"completions-nostream.http", trace.APICompletions, false, trace.OutcomeOK, 200, 5, 0, "length", ""},
		{"error-unknown-model-stream.http", trace.APIChat, true, trace.OutcomeHTTPError, 404, 0, 0, "", "model 'nosuchmodel' not found"},
		{"error-bad-request.http", trace.APIChat, false, trace.OutcomeHTTPError, 400, 0, 0, "", "HTTP 400: json: cannot unmarshal"},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			r := testRunner(rawServer(t, transcript(t, c.file)))
			res := trace.Result{Shape: trace.Shape{API: c.api}}
			r.exchange(context.Background(), nil, []byte(`{}`), c.stream, &res, nil)
			if res.Outcome != c.outcome || res.HTTPStatus != c.status {
				t.Fatalf("outcome %s (HTTP %d, %q), want %s (HTTP %d)", res.Outcome, res.HTTPStatus, res.Error, c.outcome, c.status)
			}
			if res.ObservedOutputTokens != c.tokens || len(res.TokenTimesNs) != c.events || res.ObservedFinishReason != c.finish {
				t.Errorf("tokens %d, events %d, finish %q; want %d, %d, %q", res.ObservedOutputTokens, len(res.TokenTimesNs), res.ObservedFinishReason, c.tokens, c.events, c.finish)
			}
			if !strings.Contains(res.Error, c.errorHas) {
				t.Errorf("error %q, want it to contain %q", res.Error, c.errorHas)
			}
			if res.SentNs == nil || res.DoneNs == nil || *res.DoneNs < *res.SentNs {
				t.Errorf("sent %v done %v", res.SentNs, res.DoneNs)
			}
			if c.stream && c.outcome == trace.OutcomeOK {
				if res.FirstTokenNs == nil || res.FirstChunkNs == nil || *res.FirstChunkNs > *res.FirstTokenNs {
					t.Errorf("first chunk %v, first token %v", res.FirstChunkNs, res.FirstTokenNs)
				}
				if res.UsagePromptTokens == nil || *res.UsagePromptTokens != 5 {
					t.Errorf("usage prompt tokens %v, want 5 from the final usage chunk", res.UsagePromptTokens)
				}
			}
			if !c.stream && res.FirstTokenNs != nil {
				t.Error("a non-streamed response claims a first-token time")
			}
		})
	}
}

// sse builds a 200 text/event-stream response around body.
func sse(body string) []byte {
	return []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + body)
}

func TestClientStreamEdgeCases(t *testing.T) {
	content := `data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n"
	cases := []struct {
		name     string
		body     string
		outcome  string
		events   int
		firstChk bool // first_chunk_ns set
		firstTok bool
	}{
		{"CRLF lines, comments and [DONE]", ": keep-alive\r\n\r\n" + strings.ReplaceAll(content, "\n", "\r\n") + "data: [DONE]\r\n\r\n", trace.OutcomeOK, 1, true, true},
		{"role-only chunk is a chunk but not a token",
			`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n" + content + "data: [DONE]\n\n", trace.OutcomeOK, 1, true, true},
		{"reasoning and tool-call deltas are tokens",
			`data: {"choices":[{"delta":{"reasoning_content":"hmm"}}]}` + "\n\n" + `data: {"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}` + "\n\n" + "data: [DONE]\n\n", trace.OutcomeOK, 2, true, true},
		{"error object inside a 200 stream", content + `data: {"error":{"message":"engine died","code":500}}` + "\n\n", trace.OutcomeStreamError, 1, true, true},
		{"malformed JSON", content + "data: {\"choices\": [\n\n", trace.OutcomeProtocolError, 1, true, true},
		{"stream cut before [DONE]", content + content, trace.OutcomeConnError, 2, true, true},
		{"finished but no [DONE] is lenient", content + `data: {"choices":[{"delta":{},"finish_reason":"stop"}]}` + "\n\n", trace.OutcomeOK, 1, true, true},
		{"multi-line data joins", "data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n", trace.OutcomeOK, 1, true, true},
		// No token and no finish reason: nothing was generated that the
		// client saw, and a server that says nothing more gave no response.
		{"usage only, no choices, no finish", `data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":0}}` + "\n\ndata: [DONE]\n\n", trace.OutcomeProtocolError, 0, false, false},
		{"an empty completion with its finish reason",
			`data: {"choices":[{"delta":{},"finish_reason":"stop"}]}` + "\n\n" + `data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":0}}` + "\n\ndata: [DONE]\n\n", trace.OutcomeOK, 0, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := testRunner(rawServer(t, sse(c.body)))
			res := trace.Result{Shape: trace.Shape{API: trace.APIChat}}
			r.exchange(context.Background(), nil, []byte(`{}`), true, &res, nil)
			if res.Outcome != c.outcome {
				t.Fatalf("outcome %s (%q), want %s", res.Outcome, res.Error, c.outcome)
			}
			if len(res.TokenTimesNs) != c.events || (res.FirstChunkNs != nil) != c.firstChk || (res.FirstTokenNs != nil) != c.firstTok {
				t.Errorf("events %d first chunk %v first token %v; want %d %v %v", len(res.TokenTimesNs), res.FirstChunkNs != nil, res.FirstTokenNs != nil, c.events, c.firstChk, c.firstTok)
			}
			if c.outcome != trace.OutcomeOK && res.Error == "" {
				t.Error("a failed request has no error text")
			}
		})
	}
}

func TestClientTimeoutAndRefused(t *testing.T) {
	// A server that accepts and never answers: the request times out.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	r := testRunner("http://" + ln.Addr().String())
	r.opts.Timeout = 200 * time.Millisecond
	res := trace.Result{Shape: trace.Shape{API: trace.APIChat}}
	r.exchange(context.Background(), nil, []byte(`{}`), true, &res, nil)
	if res.Outcome != trace.OutcomeTimeout {
		t.Errorf("silent server: outcome %s (%s), want timeout", res.Outcome, res.Error)
	}

	// A port nobody listens on: connection refused.
	r = testRunner("http://" + refusingAddr(t))
	res = trace.Result{Shape: trace.Shape{API: trace.APIChat}}
	r.exchange(context.Background(), nil, []byte(`{}`), true, &res, nil)
	if res.Outcome != trace.OutcomeConnError || !strings.Contains(res.Error, "refused") {
		t.Errorf("closed port: outcome %s (%s), want conn_error: connection refused", res.Outcome, res.Error)
	}
}

// refusingAddr returns a loopback address that refuses connections for
// the rest of the test: a TCP socket bound to the port and never listening
// holds it, so no other test or process can listen there meanwhile, as they
// could on a port reserved by listening and closing.
func refusingAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

func TestClientOnDocumentedServerFormats(t *testing.T) {
	cases := []struct {
		file      string
		events    int   // token events
		tokens    int64 // observed_output_tokens
		reasoning int64
		prompt    int64
		finish    string
		firstGap  bool // first_chunk_ns before first_token_ns (a role-only chunk comes first)
	}{
		{"vllm-chat.sse", 3, 3, 0, 12, "length", true},
		{"vllm-reasoning.sse", 3, 6, 4, 20, "stop", true},
		{"vllm-usage-null-choices.sse", 2, 2, 0, 3, "length", false},
		{"sglang-chat.sse", 3, 4, 1, 9, "stop", true},
		{"tgi-chat.sse", 3, 3, 0, 25, "length", false},
		{"speculative.sse", 4, 12, 0, 4, "length", false},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", "fixtures", c.file))
			if err != nil {
				t.Fatal(err)
			}
			// Deliver each event in its own Read, on a clock that ticks at
			// every reading, so the role-only chunk and the first token
			// arrive at different times whatever the scheduler does.
			r := testRunner("http://unused")
			r.client = &http.Client{Transport: eventPerRead(string(body))}
			var now atomic.Int64
			r.clock = func() int64 { return now.Add(int64(time.Millisecond)) }
			res := trace.Result{Shape: trace.Shape{API: trace.APIChat}}
			r.exchange(context.Background(), nil, []byte(`{}`), true, &res, nil)
			if res.Outcome != trace.OutcomeOK {
				t.Fatalf("outcome %s (%s)", res.Outcome, res.Error)
			}
			if len(res.TokenTimesNs) != c.events || res.ObservedOutputTokens != c.tokens || res.ObservedReasoningTokens != c.reasoning ||
				res.UsagePromptTokens == nil || *res.UsagePromptTokens != c.prompt || res.ObservedFinishReason != c.finish {
				t.Errorf("events %d tokens %d reasoning %d prompt %v finish %q; want %d %d %d %d %q",
					len(res.TokenTimesNs), res.ObservedOutputTokens, res.ObservedReasoningTokens, res.UsagePromptTokens, res.ObservedFinishReason,
					c.events, c.tokens, c.reasoning, c.prompt, c.finish)
			}
			if gap := *res.FirstTokenNs > *res.FirstChunkNs; gap != c.firstGap {
				t.Errorf("first chunk %d, first token %d: a gap is %v, want %v", *res.FirstChunkNs, *res.FirstTokenNs, gap, c.firstGap)
			}
		})
	}
}

// eventPerRead answers every request with body as an SSE stream whose
// Reads return one event each (up to and including its blank line), as if
// each event were its own TCP segment read on its own.
type eventPerRead string

func (e eventPerRead) RoundTrip(req *http.Request) (*http.Response, error) {
	var events []string
	for _, ev := range strings.SplitAfter(string(e), "\n\n") {
		if ev != "" {
			events = append(events, ev)
		}
	}
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: &eventReader{events: events}, ContentLength: -1, Request: req}, nil
}

// eventReader returns one event per Read.
type eventReader struct {
	events []string
	cur    string
}

func (r *eventReader) Read(p []byte) (int, error) {
	if r.cur == "" {
		if len(r.events) == 0 {
			return 0, io.EOF
		}
		r.cur, r.events = r.events[0], r.events[1:]
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

func (r *eventReader) Close() error { return nil }
