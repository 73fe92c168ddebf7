package replay

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// The secrets every hostile-server case replays with.
const (
	hostileKey    = "sk-hostile-KEY-51f0a7c3e9"
	hostileHeader = "hdr-HOSTILE-9b2d64"
)

// listener is a loopback server that records what reaches it: the paths,
// and any Authorization or secret header it receives.
type listener struct {
	srv     *httptest.Server
	mu      sync.Mutex
	hits    []string // "METHOD /path"
	secrets []string // Authorization and X-Tenant values received
	handle  func(l *listener, w http.ResponseWriter, r *http.Request)
}

func newListener(t *testing.T, handle func(l *listener, w http.ResponseWriter, r *http.Request)) *listener {
	l := &listener{handle: handle}
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.hits = append(l.hits, r.Method+" "+r.URL.Path)
		for _, h := range []string{"Authorization", "X-Tenant"} {
			if v := r.Header.Get(h); v != "" {
				l.secrets = append(l.secrets, h+": "+v)
			}
		}
		l.mu.Unlock()
		if l.handle != nil {
			l.handle(l, w, r)
			return
		}
		okServer(w, r)
	}))
	t.Cleanup(l.srv.Close)
	return l
}

func (l *listener) seen() (hits, secrets []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.hits...), append([]string(nil), l.secrets...)
}

// okServer answers like a well-behaved OpenAI server: a model list, and
// three tokens with a finish reason and usage for every generation request.
func okServer(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
		return
	}
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	for _, s := range []string{"a", "b", "c"} {
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", s)
	}
	fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n")
	fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n")
}

// streamed answers a generation request with the given SSE body.
func streamed(body string) func(*listener, http.ResponseWriter, *http.Request) {
	return answer("text/event-stream", body)
}

// whole answers a generation request with the given JSON body.
func whole(body string) func(*listener, http.ResponseWriter, *http.Request) {
	return answer("application/json", body)
}

// answer answers GETs as a healthy server and a generation request with
// body as contentType.
func answer(contentType, body string) func(*listener, http.ResponseWriter, *http.Request) {
	return func(_ *listener, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			okServer(w, r)
			return
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", contentType)
		io.WriteString(w, body)
	}
}

// usageOf answers with one token and the given usage object, streamed.
func usageOf(usage string) func(*listener, http.ResponseWriter, *http.Request) {
	return streamed(`data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}` + "\n\n" +
		`data: {"choices":[],"usage":` + usage + "}\n\ndata: [DONE]\n\n")
}

// hostileRun is what one case's replay left behind.
type hostileRun struct {
	rows    []trace.Result
	info    *trace.RunInfo
	infoRaw map[string]any // run.json as JSON, for fields by their JSON names
	dir     string         // the run dir
	runErr  error
	main    *listener // the target
	other   *listener // a second origin
	elapsed time.Duration
}

// file returns everything the run wrote, file by file.
func (h *hostileRun) files(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	filepath.Walk(h.dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			b, _ := os.ReadFile(p)
			out[p] = b
		}
		return nil
	})
	if h.rows != nil {
		b, _ := json.Marshal(h.rows) // parquet pages are compressed: the decoded rows too
		out["decoded results"] = b
	}
	return out
}

type hostileCase struct {
	name string
	// serve handles every request to the target; other every request to
	// the second origin (default: okServer).
	serve, other func(l *listener, w http.ResponseWriter, r *http.Request)
	// reqs builds the workload from the target's and the other origin's
	// URLs (default: one streamed chat request of 200 tokens).
	reqs func() []trace.Request
	opts func(o *Options, main, other string)
	// outcome is every row's outcome, errHas a text each row's error holds;
	// runErrHas, when set, is what Run's error must say instead.
	outcome, errHas, runErrHas string
	check                      func(t *testing.T, h *hostileRun)
	// scrapeLimit, when set, is maxScrape during the case;
	// scrapesLimit, maxScrapesBytes.
	scrapeLimit  int
	scrapesLimit int64
}

func oneRequest(mod func(*trace.Request)) func() []trace.Request {
	return func() []trace.Request {
		q := trace.Request{Identity: trace.Identity{RequestID: "r1"}, TS: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro(),
			Shape: trace.Shape{InputTokens: 200, OutputTokens: 3, MaxTokens: 3, API: trace.APIChat, Stream: true, N: 1}}
		if mod != nil {
			mod(&q)
		}
		return []trace.Request{q}
	}
}

// redirectTo answers generation requests (and, with models, GET requests)
// with a redirect of the given status to url.
func redirectTo(status int, url func() string, models bool) func(*listener, http.ResponseWriter, *http.Request) {
	return func(l *listener, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && !models {
			okServer(w, r)
			return
		}
		http.Redirect(w, r, url(), status)
	}
}

// noSecretsAt fails when the other origin received anything at all.
func nothingReached(t *testing.T, l *listener) {
	t.Helper()
	if hits, secrets := l.seen(); len(hits) > 0 || len(secrets) > 0 {
		t.Errorf("the other origin received %v with secrets %v", hits, secrets)
	}
}

func noneInFiles(t *testing.T, h *hostileRun, needles ...string) {
	t.Helper()
	for where, b := range h.files(t) {
		for _, n := range needles {
			if strings.Contains(string(b), n) {
				t.Errorf("%q found in %s", n, where)
			}
		}
	}
}

func runHostile(t *testing.T, tc hostileCase) *hostileRun {
	t.Helper()
	h := &hostileRun{dir: filepath.Join(t.TempDir(), "run")}
	h.other = newListener(t, tc.other)
	serve := tc.serve
	if serve == nil {
		serve = func(_ *listener, w http.ResponseWriter, r *http.Request) { okServer(w, r) }
	}
	h.main = newListener(t, serve)
	reqs := oneRequest(nil)
	if tc.reqs != nil {
		reqs = tc.reqs
	}
	opts := DefaultOptions()
	opts.Target, opts.APIKey, opts.Headers = h.main.srv.URL, hostileKey, map[string]string{"X-Tenant": hostileHeader}
	opts.Timeout = 5 * time.Second
	if tc.opts != nil {
		tc.opts(&opts, h.main.srv.URL, h.other.srv.URL)
	}
	// Run's own steps, past the trace reader: these requests are what the
	// reader would refuse.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	if err := opts.validate(); err != nil {
		h.runErr = err
	} else {
		h.info, h.runErr = runRequests(ctx, sliceSource(reqs()), &trace.Manifest{Kind: "workload", BlockSize: 16}, "", h.dir, opts)
	}
	h.elapsed = time.Since(start)
	if h.runErr != nil {
		return h
	}
	b, err := os.ReadFile(filepath.Join(h.dir, trace.RunInfoName))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &h.infoRaw); err != nil {
		t.Fatal(err)
	}
	if h.rows, err = trace.ReadResults(h.dir); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestHostileServers replays against loopback servers that misbehave the
// way real ones and hostile ones do, and checks what each run records.
func TestHostileServers(t *testing.T) {
	var otherURL, mainURL string
	other := func() string { return otherURL + "/v1/chat/completions" }
	same := func() string { return mainURL + "/v2/chat/completions" }
	b64 := func(enc *base64.Encoding, s string) string { return enc.EncodeToString([]byte(s)) }
	spaced := func(s string) string { return strings.Join(strings.Split(s, ""), " ") }
	cases := []hostileCase{
		// 1. Redirects are not followed unless asked, and then within the
		// origin only, without the secrets.
		{name: "301 to another origin is not followed", serve: redirectTo(http.StatusMovedPermanently, other, false),
			outcome: trace.OutcomeHTTPError, errHas: "HTTP 301",
			check: func(t *testing.T, h *hostileRun) {
				nothingReached(t, h.other)
				if e := h.rows[0].Error; !strings.Contains(e, h.other.srv.URL) {
					t.Errorf("error %q does not name the Location's origin %s", e, h.other.srv.URL)
				}
			}},
		{name: "307 to another origin is not followed", serve: redirectTo(http.StatusTemporaryRedirect, other, false),
			outcome: trace.OutcomeHTTPError, errHas: "HTTP 307",
			check: func(t *testing.T, h *hostileRun) { nothingReached(t, h.other) }},
		{name: "307 within the origin is not followed unless asked", serve: redirectTo(http.StatusTemporaryRedirect, same, false),
			outcome: trace.OutcomeHTTPError, errHas: "HTTP 307"},
		{name: "307 within the origin, asked: followed without the secrets",
			serve: func(l *listener, w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v1/chat/completions" {
					http.Redirect(w, r, same(), http.StatusTemporaryRedirect)
					return
				}
				okServer(w, r)
			},
			opts:    func(o *Options, _, _ string) { setFollowRedirects(o) },
			outcome: trace.OutcomeOK,
			check: func(t *testing.T, h *hostileRun) {
				hits, secrets := h.main.seen()
				// preflight, models answer, the request, its redirect
				if len(hits) < 2 || hits[len(hits)-1] != "POST /v2/chat/completions" {
					t.Fatalf("the target saw %v; want the redirect followed with a POST", hits)
				}
				// Every request but the redirected one carries the key and
				// the header: 2 each for the preflight, the models answer
				// and the first POST.
				if n := len(secrets); n != 2*(len(hits)-1) {
					t.Errorf("the target saw secrets %v over %v: the redirected request must carry none", secrets, hits)
				}
			}},
		{name: "307 to another origin, asked: still not followed", serve: redirectTo(http.StatusTemporaryRedirect, other, false),
			opts:    func(o *Options, _, _ string) { setFollowRedirects(o) },
			outcome: trace.OutcomeHTTPError, errHas: "HTTP 307",
			check: func(t *testing.T, h *hostileRun) { nothingReached(t, h.other) }},
		{name: "301 within the origin, asked: a POST is not turned into a GET", serve: redirectTo(http.StatusMovedPermanently, same, false),
			opts:    func(o *Options, _, _ string) { setFollowRedirects(o) },
			outcome: trace.OutcomeHTTPError, errHas: "HTTP 301",
			check: func(t *testing.T, h *hostileRun) {
				if hits, _ := h.main.seen(); strings.Contains(strings.Join(hits, ","), "GET /v2/") {
					t.Errorf("the POST was resent as a GET: %v", hits)
				}
			}},
		{name: "a redirected /v1/models preflight is not followed", serve: redirectTo(http.StatusFound, func() string { return otherURL + "/v1/models" }, true),
			runErrHas: "HTTP 302",
			check:     func(t *testing.T, h *hostileRun) { nothingReached(t, h.other) }},
		{name: "a redirected metrics scrape is not followed",
			serve: func(l *listener, w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/metrics" {
					http.Redirect(w, r, otherURL+"/metrics", http.StatusFound)
					return
				}
				okServer(w, r)
			},
			opts: func(o *Options, main, _ string) {
				o.Metrics = []MetricsEndpoint{{Role: RoleEngine, URL: main + "/metrics"}}
			},
			runErrHas: "HTTP 302",
			check:     func(t *testing.T, h *hostileRun) { nothingReached(t, h.other) }},

		{name: "a metrics URL on another origin gets no credentials",
			serve: func(_ *listener, w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet && r.URL.Path == "/v1/models" { // a vLLM: its cache settings are asked of the metrics
					fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model","owned_by":"vllm","root":"m"}]}`)
					return
				}
				okServer(w, r)
			},
			other: func(_ *listener, w http.ResponseWriter, r *http.Request) {
				w.Write([]byte("vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"))
			},
			opts: func(o *Options, _, other string) {
				o.Metrics = []MetricsEndpoint{{Role: RoleEngine, URL: other + "/metrics"}}
			},
			outcome: trace.OutcomeOK,
			check: func(t *testing.T, h *hostileRun) {
				hits, secrets := h.other.seen()
				if len(hits) == 0 {
					t.Fatal("the metrics URL was never asked")
				}
				if len(secrets) > 0 {
					t.Errorf("the metrics URL on another origin received %v", secrets)
				}
			}},

		// 2. A stream that ends before any token, and impossible usage.
		{name: "[DONE] before any token", serve: streamed("data: [DONE]\n\n"),
			outcome: trace.OutcomeProtocolError, errHas: "[DONE] before any token"},
		{name: "[DONE] after usage but no token and no finish", serve: streamed(`data: {"choices":[],"usage":{"prompt_tokens":200,"completion_tokens":0}}` + "\n\ndata: [DONE]\n\n"),
			outcome: trace.OutcomeProtocolError, errHas: "[DONE] before any token"},
		{name: "an honest empty completion is ok",
			serve: streamed(`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
				`data: {"choices":[],"usage":{"prompt_tokens":200,"completion_tokens":0}}` + "\n\ndata: [DONE]\n\n"),
			outcome: trace.OutcomeOK},
		{name: "[DONE] with a finish reason but usage claiming tokens",
			serve: streamed(`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
				`data: {"choices":[],"usage":{"prompt_tokens":200,"completion_tokens":7}}` + "\n\ndata: [DONE]\n\n"),
			outcome: trace.OutcomeProtocolError, errHas: "before any token"},
		{name: "negative completion tokens", serve: usageOf(`{"prompt_tokens":200,"completion_tokens":-5}`),
			outcome: trace.OutcomeProtocolError, errHas: "completion_tokens"},
		{name: "completion tokens above the ceiling", serve: usageOf(`{"prompt_tokens":200,"completion_tokens":20000000}`),
			outcome: trace.OutcomeProtocolError, errHas: "completion_tokens"},
		{name: "negative prompt tokens", serve: usageOf(`{"prompt_tokens":-1,"completion_tokens":1}`),
			outcome: trace.OutcomeProtocolError, errHas: "prompt_tokens"},
		{name: "prompt tokens above the ceiling", serve: usageOf(`{"prompt_tokens":1e12,"completion_tokens":1}`),
			outcome: trace.OutcomeProtocolError, errHas: "prompt_tokens"},
		{name: "negative usage in a whole response", serve: whole(`{"choices":[{"text":"abc","finish_reason":"length"}],"usage":{"prompt_tokens":200,"completion_tokens":-3}}`),
			reqs:    oneRequest(func(q *trace.Request) { q.Stream = false }),
			outcome: trace.OutcomeProtocolError, errHas: "completion_tokens"},
		{name: "prompt tokens above the ceiling in a whole response", serve: whole(`{"choices":[{"text":"abc","finish_reason":"length"}],"usage":{"prompt_tokens":99999999999,"completion_tokens":3}}`),
			reqs:    oneRequest(func(q *trace.Request) { q.Stream = false }),
			outcome: trace.OutcomeProtocolError, errHas: "prompt_tokens"},

		// 3. A whole response too large to hold.
		{name: "a 9 MiB whole response", serve: whole(`{"choices":[{"text":"` + strings.Repeat("x", 9<<20) + `","finish_reason":"length"}],"usage":{"prompt_tokens":200,"completion_tokens":3}}`),
			reqs:    oneRequest(func(q *trace.Request) { q.Stream = false }),
			outcome: trace.OutcomeProtocolError, errHas: "over 8 MiB"},
		{name: "a 9 MiB SSE event", serve: streamed(`data: {"choices":[{"delta":{"content":"` + strings.Repeat("x", 9<<20) + `"}}]}` + "\n\n"),
			outcome: trace.OutcomeProtocolError, errHas: "MiB"},

		// 4. A server that cuts prompts silently.
		{name: "silently truncated prompts are counted", serve: usageOf(`{"prompt_tokens":50,"completion_tokens":1}`),
			reqs: func() []trace.Request {
				var out []trace.Request
				for i := range 3 {
					q := oneRequest(func(q *trace.Request) { q.RequestID, q.InputTokens = fmt.Sprint("r", i), int64(600+100*i) })()[0]
					q.TS += int64(i) * 1000
					out = append(out, q)
				}
				return out
			},
			outcome: trace.OutcomeOK,
			check: func(t *testing.T, h *hostileRun) {
				pt, ok := h.infoRaw["prompt_truncation"].(map[string]any)
				if !ok {
					t.Fatalf("run.json has no prompt_truncation: %v", h.infoRaw["prompt_truncation"])
				}
				if pt["requests"] != 3.0 || pt["max_deficit_tokens"] != 750.0 || pt["p50_deficit_tokens"] != 650.0 {
					t.Errorf("prompt_truncation %v; want 3 requests, max deficit 750, p50 650", pt)
				}
			}},
		{name: "a chat template's added tokens are no truncation", serve: usageOf(`{"prompt_tokens":190,"completion_tokens":1}`),
			outcome: trace.OutcomeOK,
			check: func(t *testing.T, h *hostileRun) {
				if v, ok := h.infoRaw["prompt_truncation"]; ok {
					t.Errorf("a deficit within the tolerance is recorded as truncation: %v", v)
				}
			}},

		// 5. Rows the trace reader would refuse.
		{name: "a NaN think time neither hangs nor overflows",
			reqs: func() []trace.Request {
				a := oneRequest(func(q *trace.Request) { q.SessionID, q.Turn = "s", 0 })()[0]
				b := oneRequest(func(q *trace.Request) {
					q.RequestID, q.SessionID, q.Turn, q.ThinkTimeMs = "r2", "s", 1, trace.Ptr(math.NaN())
				})()[0]
				b.TS += 1000
				return []trace.Request{a, b}
			},
			outcome: trace.OutcomeOK,
			check: func(t *testing.T, h *hostileRun) {
				if !h.info.Complete || h.elapsed > 5*time.Second {
					t.Errorf("complete %v after %v: the turn after a NaN think time must be sent at once", h.info.Complete, h.elapsed)
				}
				if !strings.Contains(fmt.Sprint(h.infoRaw["notes"]), "think_time_ms") {
					t.Errorf("run.json notes %v do not say think_time_ms was ignored", h.infoRaw["notes"])
				}
			}},
		{name: "an infinite think time does not overflow",
			reqs: func() []trace.Request {
				a := oneRequest(func(q *trace.Request) { q.SessionID, q.Turn = "s", 0 })()[0]
				b := oneRequest(func(q *trace.Request) {
					q.RequestID, q.SessionID, q.Turn, q.ThinkTimeMs = "r2", "s", 1, trace.Ptr(math.Inf(-1))
				})()[0]
				b.TS += 1000
				return []trace.Request{a, b}
			},
			outcome: trace.OutcomeOK,
			check: func(t *testing.T, h *hostileRun) {
				if !h.info.Complete || h.elapsed > 5*time.Second {
					t.Errorf("complete %v after %v", h.info.Complete, h.elapsed)
				}
			}},
		{name: "a NaN cancel_after_ms does not cancel", reqs: oneRequest(func(q *trace.Request) { q.CancelAfterMs = trace.Ptr(math.NaN()) }),
			outcome: trace.OutcomeOK},
		{name: "an infinite cancel_after_ms does not cancel", reqs: oneRequest(func(q *trace.Request) { q.CancelAfterMs = trace.Ptr(math.Inf(1)) }),
			outcome: trace.OutcomeOK},
		{name: "a negative cancel_after_ms does not cancel", reqs: oneRequest(func(q *trace.Request) { q.CancelAfterMs = trace.Ptr(-5.0) }),
			outcome: trace.OutcomeOK,
			check: func(t *testing.T, h *hostileRun) {
				if !strings.Contains(fmt.Sprint(h.infoRaw["notes"]), "cancel_after_ms") {
					t.Errorf("run.json notes %v do not say cancel_after_ms was ignored", h.infoRaw["notes"])
				}
			}},
		{name: "a NaN temperature is not sent", reqs: oneRequest(func(q *trace.Request) { q.Temperature = trace.Ptr(math.NaN()) }),
			outcome: trace.OutcomeNotSent, errHas: "temperature",
			check: notSentAtAll},
		{name: "a NUL byte in the request id is not sent", reqs: oneRequest(func(q *trace.Request) { q.RequestID = "r\x001" }),
			outcome: trace.OutcomeNotSent, errHas: "request_id",
			check: notSentAtAll},
		{name: "a prompt of 10^18 tokens is not built", reqs: oneRequest(func(q *trace.Request) { q.InputTokens = 1e18 }),
			outcome: trace.OutcomeNotSent, errHas: "10000000",
			check: notSentAtAll},
		{name: "a prompt of 10^9 tokens is not built", reqs: oneRequest(func(q *trace.Request) { q.InputTokens = 1e9 }),
			outcome: trace.OutcomeNotSent, errHas: "10000000",
			check: notSentAtAll},

		// 6. Secrets echoed by the server, and in URLs.
		{name: "headers echoed in /v1/models and the Server header are scrubbed",
			serve: func(l *listener, w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					w.Header().Set("Server", "gw/1.0 (auth "+r.Header.Get("Authorization")+"; tenant "+r.Header.Get("X-Tenant")+")")
					echo, _ := json.Marshal(map[string]any{"object": "list", "data": []any{map[string]any{"id": "m", "owned_by": r.Header.Get("Authorization"),
						r.Header.Get("X-Tenant"): "tenant", "meta": []any{b64(base64.StdEncoding, hostileKey), spaced(hostileHeader)}}}})
					w.Write(echo)
					return
				}
				okServer(w, r)
			},
			outcome: trace.OutcomeOK,
			check: func(t *testing.T, h *hostileRun) {
				noneInFiles(t, h, hostileKey, hostileHeader, b64(base64.StdEncoding, hostileKey), spaced(hostileHeader), "51f0a7", "9b2d64")
				if !strings.Contains(h.info.ServerHeader, "gw/1.0") {
					t.Errorf("server header %q lost what was not secret", h.info.ServerHeader)
				}
			}},
		{name: "encoded copies of the key in an error body are scrubbed",
			serve: func(l *listener, w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					okServer(w, r)
					return
				}
				basic := b64(base64.StdEncoding, "user:"+hostileKey)
				msg := fmt.Sprintf("denied: basic %s url %s raw %s spaced %s dotted %s quoted %s",
					basic, b64(base64.RawURLEncoding, "x"+hostileHeader), b64(base64.StdEncoding, "ab"+hostileKey), spaced(hostileKey),
					strings.Join(strings.Split(hostileHeader, ""), "."), hostileKey[3:9])
				echo, _ := json.Marshal(msg)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprintf(w, `{"error":{"message":%s}}`, echo)
			},
			outcome: trace.OutcomeHTTPError, errHas: "denied",
			check: func(t *testing.T, h *hostileRun) {
				e := h.rows[0].Error
				for _, n := range []string{b64(base64.StdEncoding, "user:"+hostileKey)[8:20], b64(base64.RawURLEncoding, "x"+hostileHeader)[4:16],
					b64(base64.StdEncoding, "ab"+hostileKey)[4:16], "s k - h o", "h.d.r", hostileKey[3:9]} {
					if strings.Contains(e, n) {
						t.Errorf("error %q keeps %q", e, n)
					}
				}
			}},
		{name: "a metrics answer past the limit is kept to its last whole line, with a note (issue 42, 6)",
			scrapeLimit: 1 << 20, // 32 MiB outside tests: the same code, a 32nd of the bytes
			opts: func(o *Options, main, _ string) {
				o.Metrics = []MetricsEndpoint{{Role: RoleNode, URL: main + "/metrics"}}
			},
			serve: func(l *listener, w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/metrics" {
					line := []byte("node_some_gauge{cpu=\"0\",mode=\"idle\",pad=\"" + strings.Repeat("x", 60) + "\"} 12345.5\n")
					for n := 0; n < 5<<20/4; n += len(line) {
						w.Write(line)
					}
					return
				}
				okServer(w, r)
			},
			outcome: trace.OutcomeOK,
			check: func(t *testing.T, h *hostileRun) {
				if len(h.info.Metrics) == 0 {
					t.Fatal("no scrape was written")
				}
				b, err := os.ReadFile(filepath.Join(h.dir, h.info.Metrics[0]))
				if err != nil {
					t.Fatal(err)
				}
				lines := strings.Split(string(b), "\n")
				if len(lines) < 3 || !strings.HasPrefix(lines[1], trace.ScrapeCutPrefix) || !strings.Contains(lines[1], "passed 1048576 bytes") {
					t.Errorf("the scrape's second line is %.200q; want the cut noted", lines[1])
				}
				if !strings.HasSuffix(string(b), " 12345.5\n") {
					t.Errorf("the scrape ends %q: mid-line", b[len(b)-40:])
				}
				if len(b) > 1<<20+1024 {
					t.Errorf("the scrape holds %d bytes", len(b))
				}
			}},
		{name: "scrapes past the run's total are kept as gaps, with a note",
			scrapeLimit: 1 << 20, scrapesLimit: 3 << 19, // 32 MiB and 8 GiB outside tests
			opts: func(o *Options, main, _ string) {
				o.Metrics = []MetricsEndpoint{{Role: RoleNode, URL: main + "/metrics"}}
			},
			serve: func(l *listener, w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/metrics" {
					w.Write(bytes.Repeat([]byte("node_some_gauge 1\n"), 1<<20/18))
					return
				}
				okServer(w, r)
			},
			outcome: trace.OutcomeOK,
			check: func(t *testing.T, h *hostileRun) {
				var kept, gaps int
				for _, m := range h.info.Metrics {
					b, err := os.ReadFile(filepath.Join(h.dir, m))
					if err != nil {
						t.Fatal(err)
					}
					if strings.Contains(string(b), "# scrape failed: not kept: the run's scrapes passed") {
						gaps++
					} else {
						kept++
					}
				}
				if kept != 1 || gaps < 1 {
					t.Errorf("%d scrapes kept, %d gaps; want the first kept (1 MiB of 1.5) and the rest gaps", kept, gaps)
				}
				if !strings.Contains(strings.Join(h.info.Notes, "\n"), "metrics scrapes past 1 MiB in all were not kept") {
					t.Errorf("notes %q; want the gaps noted", h.info.Notes)
				}
			}},
		{name: "credentials and query secrets in URLs are redacted",
			opts: func(o *Options, main, _ string) {
				u := strings.Replace(main, "http://", "http://audituser:URLPASS-77aa@", 1)
				o.Target = u + "/?api_key=QUERYSECRET-31&api-version=1"
				o.Metrics = []MetricsEndpoint{{Role: RoleEngine, URL: u + "/metrics?token=METRICSECRET-52"}}
				o.CommandLine = RedactArgs([]string{"servetrace", "replay", "--target", o.Target, "--metrics-url=" + o.Metrics[0].URL})
			},
			serve: func(l *listener, w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/metrics" {
					fmt.Fprintln(w, "vllm:num_requests_running 0")
					return
				}
				if r.URL.Query().Get("api_key") != "QUERYSECRET-31" {
					http.Error(w, "the query was not sent", http.StatusBadRequest)
					return
				}
				okServer(w, r)
			},
			outcome: trace.OutcomeOK,
			check: func(t *testing.T, h *hostileRun) {
				noneInFiles(t, h, "URLPASS", "QUERYSECRET", "METRICSECRET", "audituser")
				if ep := h.info.Endpoint; !strings.Contains(ep, "REDACTED@127.0.0.1") || !strings.Contains(ep, "api_key=REDACTED") {
					t.Errorf("endpoint %q: want the userinfo and query values REDACTED", ep)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.scrapeLimit > 0 {
				defer func(old int) { maxScrape = old }(maxScrape)
				maxScrape = tc.scrapeLimit
			}
			if tc.scrapesLimit > 0 {
				defer func(old int64) { maxScrapesBytes = old }(maxScrapesBytes)
				maxScrapesBytes = tc.scrapesLimit
			}
			h := runHostileWithURLs(t, tc, &mainURL, &otherURL)
			if tc.runErrHas != "" {
				if h.runErr == nil || !strings.Contains(h.runErr.Error(), tc.runErrHas) {
					t.Errorf("Run error %v, want one saying %q", h.runErr, tc.runErrHas)
				}
			} else {
				if h.runErr != nil {
					t.Fatalf("Run: %v", h.runErr)
				}
				if len(h.rows) == 0 {
					t.Fatal("no results")
				}
				for _, r := range h.rows {
					if r.Outcome != tc.outcome || !strings.Contains(r.Error, tc.errHas) {
						t.Errorf("%s: outcome %s (%q), want %s with %q", r.RequestID, r.Outcome, r.Error, tc.outcome, tc.errHas)
					}
				}
			}
			if tc.check != nil && !t.Failed() {
				tc.check(t, h)
			}
		})
	}
}

// runHostileWithURLs runs tc with mainURL and otherURL set to the case's
// listeners while it runs (the redirect handlers read them).
func runHostileWithURLs(t *testing.T, tc hostileCase, mainURL, otherURL *string) *hostileRun {
	t.Helper()
	opts := tc.opts
	tc.opts = func(o *Options, main, other string) {
		*mainURL, *otherURL = main, other
		if opts != nil {
			opts(o, main, other)
		}
	}
	return runHostile(t, tc)
}

func setFollowRedirects(o *Options) { o.FollowRedirects = true }

// notSentAtAll checks a request recorded not_sent never reached the server
// and claims no send time, and that run.json counts it.
func notSentAtAll(t *testing.T, h *hostileRun) {
	t.Helper()
	for _, r := range h.rows {
		if r.SentNs != nil {
			t.Errorf("%s: not_sent with sent_ns %d", r.RequestID, *r.SentNs)
		}
	}
	if hits, _ := h.main.seen(); strings.Contains(strings.Join(hits, ","), "POST") {
		t.Errorf("the server received %v", hits)
	}
	if h.info.Outcomes[trace.OutcomeNotSent] != int64(len(h.rows)) {
		t.Errorf("run.json outcomes %v", h.info.Outcomes)
	}
}
