package h1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newTransport is the transport the tests use, dialing as replay does.
func newTransport() *Transport {
	return &Transport{DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
}

// connCounter counts the connections a net/http server accepted.
type connCounter struct{ n atomic.Int32 }

func (c *connCounter) hook(_ net.Conn, s http.ConnState) {
	if s == http.StateNew {
		c.n.Add(1)
	}
}

// get sends a POST of body to url and returns the response's body and
// whether the connection was reused.
func get(t *testing.T, tr *Transport, ctx context.Context, url string, body []byte) (string, bool, *http.Response) {
	t.Helper()
	var reused atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused.Store(i.Reused) }})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("round trip to %s: %v", url, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	resp.Body.Close()
	return string(b), reused.Load(), resp
}

// exchange round-trips req on tr, reads the body to its end and closes
// the transport's idle connections.
func exchange(t *testing.T, tr *Transport, req *http.Request) {
	t.Helper()
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// TestResponsesOfEveryFramingReuseTheConnection reads chunked streams (one
// with a trailer), fixed-length and empty bodies from net/http's server,
// byte for byte, over one connection.
func TestResponsesOfEveryFramingReuseTheConnection(t *testing.T) {
	var conns connCounter
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 5 {
				fmt.Fprintf(w, "data: %d %s\n\n", i, in)
				w.(http.Flusher).Flush()
			}
		case "/trailer":
			w.Header().Set("Trailer", "X-Tokens")
			io.WriteString(w, "data: 1\n\n")
			w.(http.Flusher).Flush()
			w.Header().Set("X-Tokens", "1")
		case "/fixed":
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "fixed")
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/error":
			http.Error(w, `{"error":{"message":"bad"}}`, http.StatusBadRequest)
		}
	}))
	srv.Config.ConnState = conns.hook
	srv.Start()
	defer srv.Close()
	tr := newTransport()
	defer tr.CloseIdleConnections()

	cases := []struct {
		path, body, want string
		status           int
	}{
		{"/stream", "x", streamOf("x"), 200},
		{"/trailer", "", "data: 1\n\n", 200},
		{"/fixed", "", "fixed", 200},
		{"/empty", "y", "", 204},
		{"/error", "z", `{"error":{"message":"bad"}}` + "\n", 400},
		{"/stream", strings.Repeat("long", 100000), streamOf(strings.Repeat("long", 100000)), 200},
	}
	for i, c := range cases {
		got, reused, resp := get(t, tr, context.Background(), srv.URL+c.path, []byte(c.body))
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d", c.path, resp.StatusCode, c.status)
		}
		if got != c.want {
			t.Errorf("%s: body of %d bytes, want %d: %.60q", c.path, len(got), len(c.want), got)
		}
		if reused != (i > 0) {
			t.Errorf("request %d (%s): reused %v, want %v", i, c.path, reused, i > 0)
		}
		if c.path == "/trailer" && resp.Trailer.Get("X-Tokens") != "1" {
			t.Errorf("%s: trailer %v, want X-Tokens: 1", c.path, resp.Trailer)
		}
	}
	if n := conns.n.Load(); n != 1 {
		t.Errorf("the server accepted %d connections, want 1", n)
	}
}

// streamOf is the /stream handler's answer to a request body.
func streamOf(body string) string {
	var b strings.Builder
	for i := range 5 {
		fmt.Fprintf(&b, "data: %d %s\n\n", i, body)
	}
	return b.String()
}

// TestRequestAsTheServerParsesIt checks what goes on the wire against
// net/http's server-side parser: method, path and query, Host, the
// request's headers, and a 1 MiB body intact.
func TestRequestAsTheServerParsesIt(t *testing.T) {
	type seen struct {
		method, uri, host, ua, ctype, reqID string
		length                              int64
		sum                                 [32]byte
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.RequestURI, r.Host, r.UserAgent(), r.Header.Get("Content-Type"), r.Header.Get("X-Request-Id"), r.ContentLength, sha256.Sum256(b)}
	}))
	defer srv.Close()
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions?api-version=2024-10-21", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "run-1")
	exchange(t, newTransport(), req)
	want := seen{"POST", "/v1/chat/completions?api-version=2024-10-21", strings.TrimPrefix(srv.URL, "http://"), defaultUserAgent,
		"application/json", "run-1", int64(len(body)), sha256.Sum256(body)}
	if s := <-got; s != want {
		t.Errorf("the server saw %+v,\nwant %+v", s, want)
	}
}

// rawServer accepts connections on loopback and hands each to serve.
func rawServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { defer c.Close(); serve(c) })
		}
	})
	return "http://" + ln.Addr().String()
}

// readRequest reads one request from c, its body discarded.
func readRequest(br *bufio.Reader) error {
	req, err := http.ReadRequest(br)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, req.Body)
	return err
}

// TestAConnectionTheServerLetGoIsNotReused: a server that closes an idle
// connection (a keep-alive timeout), or sends bytes on it unasked, must
// cost no request: the next one goes on a new connection.
func TestAConnectionTheServerLetGoIsNotReused(t *testing.T) {
	cases := []struct {
		name  string
		after func(net.Conn) // what the server does once it has answered
	}{
		{"closed", func(c net.Conn) { c.Close() }},
		{"unsolicited bytes", func(c net.Conn) {
			time.Sleep(10 * time.Millisecond) // once the client has read the answer
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var accepted atomic.Int32
			answered := make(chan struct{}, 4)
			url := rawServer(t, func(nc net.Conn) {
				accepted.Add(1)
				br := bufio.NewReader(nc)
				if readRequest(br) != nil {
					return
				}
				io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				c.after(nc)
				answered <- struct{}{}
				io.Copy(io.Discard, br) // until the client closes
			})
			tr := newTransport()
			defer tr.CloseIdleConnections()
			get(t, tr, context.Background(), url, []byte("a"))
			<-answered // the first connection is closed, or has spoken unasked
			time.Sleep(20 * time.Millisecond)
			got, reused, _ := get(t, tr, context.Background(), url, []byte("b"))
			if got != "ok" || reused {
				t.Errorf("second request: body %q reused %v, want ok on a new connection", got, reused)
			}
			if n := accepted.Load(); n != 2 {
				t.Errorf("%d connections accepted, want 2", n)
			}
		})
	}
}

// endlessStream answers with a chunked stream that sends one event and
// then holds the connection open until the client goes; it reports on
// gone when the client closed its end.
func endlessStream(t *testing.T, gone chan<- struct{}) string {
	return rawServer(t, func(nc net.Conn) {
		br := bufio.NewReader(nc)
		if readRequest(br) != nil {
			return
		}
		io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n7\r\ndata: 1\r\n")
		io.Copy(io.Discard, br) // until the client closes
		gone <- struct{}{}
	})
}

// TestCancelAndCloseEndAStreamAtOnce: a stream that would go on forever
// ends when the request's context is cancelled (the read returns the
// cause) or its body is closed, and its connection is closed, not kept.
func TestCancelAndCloseEndAStreamAtOnce(t *testing.T) {
	for _, how := range []string{"cancel", "close"} {
		t.Run(how, func(t *testing.T) {
			gone := make(chan struct{}, 1)
			url := endlessStream(t, gone)
			tr := newTransport()
			defer tr.CloseIdleConnections()
			cause := errors.New("the workload's cancel")
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			first := make([]byte, 7)
			if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "data: 1" {
				t.Fatalf("first event %q, %v", first, err)
			}
			readErr := make(chan error, 1)
			go func() {
				_, err := resp.Body.Read(make([]byte, 10))
				readErr <- err
			}()
			time.Sleep(20 * time.Millisecond)
			if how == "cancel" {
				cancel(cause)
			} else if err := resp.Body.Close(); err != nil {
				t.Errorf("closing the body early: %v, want nil as net/http gives", err)
			}
			select {
			case err := <-readErr:
				if how == "cancel" && !errors.Is(err, cause) {
					t.Errorf("read after cancel: %v, want the context's cause", err)
				}
				if err == nil {
					t.Error("read after the end: no error")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("a read under way did not end within 5 s")
			}
			resp.Body.Close()
			if _, err := resp.Body.Read(make([]byte, 10)); err != http.ErrBodyReadAfterClose {
				t.Errorf("read after Close: %v, want http.ErrBodyReadAfterClose", err)
			}
			select {
			case <-gone:
			case <-time.After(5 * time.Second):
				t.Fatal("the connection was not closed within 5 s")
			}
			if n := idleCount(tr); n != 0 {
				t.Errorf("%d idle connections kept, want 0", n)
			}
		})
	}
}

func idleCount(tr *Transport) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, l := range tr.idle {
		n += len(l)
	}
	return n
}

// TestServersThatDoNotAnswerPlainly covers answers net/http's transport
// also handles: interim 1xx answers before the final one, a head too long
// to hold, a close without an answer, and Connection: close.
func TestServersThatDoNotAnswerPlainly(t *testing.T) {
	cases := []struct {
		name    string
		answer  string
		body    string // the final answer's body; empty when an error is wanted
		wantErr string
		reused  bool // whether the next request may reuse the connection
	}{
		{"interim answers", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "ok", "", true},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", "ok", "", false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\n\r\nok", "ok", "", false},
		{"no answer", "", "", "closed the connection without answering", false},
		{"endless head", "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("p", 1000)+"\r\n", 2000), "", "too long", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var accepted atomic.Int32
			url := rawServer(t, func(nc net.Conn) {
				accepted.Add(1)
				br := bufio.NewReader(nc)
				for readRequest(br) == nil {
					if c.answer == "" {
						return
					}
					io.WriteString(nc, c.answer)
					if c.wantErr != "" || !c.reused {
						return
					}
				}
			})
			tr := newTransport()
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("{}"))
			resp, err := tr.RoundTrip(req)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != c.body || resp.StatusCode != 200 {
				t.Errorf("answer %d %q, want 200 %q", resp.StatusCode, b, c.body)
			}
			_, reused, _ := get(t, tr, context.Background(), url, []byte("{}"))
			if reused != c.reused {
				t.Errorf("next request reused the connection: %v, want %v", reused, c.reused)
			}
		})
	}
}

// TestNothingIsSentForAnInvalidRequest: a line break in a header value,
// the Host or the target would smuggle a header or a request of its own,
// and a length with no body cannot be sent; each is refused unsent.
func TestNothingIsSentForAnInvalidRequest(t *testing.T) {
	var accepted atomic.Int32
	url := rawServer(t, func(nc net.Conn) { accepted.Add(1) })
	cases := []struct {
		name    string
		mend    func(*http.Request)
		wantErr string
	}{
		{"a line break in a value", func(r *http.Request) { r.Header["X-Id"] = []string{"a\r\nX-Evil: 1"} }, "invalid header"},
		{"a space in a name", func(r *http.Request) { r.Header["Bad Name"] = []string{"v"} }, "invalid header"},
		{"a NUL in a value", func(r *http.Request) { r.Header["X-Nul"] = []string{"a\x00b"} }, "invalid header"},
		{"a line break in the Host", func(r *http.Request) { r.Host = "a\r\nX-Evil: 1" }, "invalid Host"},
		{"a space in the method", func(r *http.Request) { r.Method = "GET /x HTTP/1.1\r\n" }, "invalid method"},
		{"a line break in the target", func(r *http.Request) { r.URL.Opaque = "/a HTTP/1.1\r\nX: y" }, "invalid request target"},
		{"a length with no body", func(r *http.Request) { r.Body, r.ContentLength = nil, 5 }, "with no body"},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("{}"))
		c.mend(req)
		if _, err := newTransport().RoundTrip(req); err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.wantErr)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("%d connections opened for refused requests", n)
	}
}

// plainReader hides a reader's WriterTo, so a body takes the read path.
type plainReader struct{ r io.Reader }

func (p plainReader) Read(b []byte) (int, error) { return p.r.Read(b) }

// TestABodyStopsAtItsLength: bytes past the Content-Length would reach the
// server as a request of their own. Whatever the body's kind and size,
// the server gets exactly Content-Length bytes, never the smuggled
// request, and the caller an error; a body short of its length is an
// error too.
func TestABodyStopsAtItsLength(t *testing.T) {
	const smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	var mu sync.Mutex
	var paths []string
	// Checked once the server's cleanup (registered after, so run
	// before) has waited for every connection's handler to return.
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if slices.Contains(paths, "/smuggled") {
			t.Errorf("the server read the bytes past a Content-Length as a request; it saw %v", paths)
		}
	})
	url := rawServer(t, func(nc net.Conn) {
		br := bufio.NewReader(nc)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			mu.Lock()
			paths = append(paths, req.URL.Path)
			mu.Unlock()
			io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	for _, size := range []int{100, 3 * firstWrite} {
		for _, kind := range []string{"bytes.Reader", "plain reader"} {
			for _, c := range []struct {
				name    string
				extra   string // what the body holds past its length
				short   int64  // how many bytes the length claims beyond the body
				wantErr string
			}{
				{"longer", smuggled, 0, "longer than its Content-Length"},
				{"shorter", "", 10, "short of its Content-Length"},
			} {
				name := fmt.Sprintf("%s %d %s", c.name, size, kind)
				body := append(bytes.Repeat([]byte("b"), size), c.extra...)
				var r io.Reader = bytes.NewReader(body)
				if kind == "plain reader" {
					r = plainReader{r}
				}
				req, _ := http.NewRequest(http.MethodPost, url+"/"+strings.ReplaceAll(name, " ", "-"), r)
				req.ContentLength = int64(size) + c.short
				tr := newTransport()
				_, err := tr.RoundTrip(req)
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Errorf("%s: error %v, want %q", name, err, c.wantErr)
				}
				tr.CloseIdleConnections()
			}
		}
	}
}

// TestAnAnswerBeforeTheBodyIsReturned: a server that answers 413 after the
// head and closes without reading a long body gives the caller its
// answer, not the broken pipe the body's write meets.
func TestAnAnswerBeforeTheBodyIsReturned(t *testing.T) {
	const answer = "HTTP/1.1 413 Content Too Large\r\nContent-Length: 7\r\nConnection: close\r\n\r\ntoo big"
	url := rawServer(t, func(nc net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(nc)); err != nil {
			return
		}
		io.WriteString(nc, answer)
		// Closing with the body unread sends a reset.
	})
	tr := newTransport()
	defer tr.CloseIdleConnections()
	// WroteRequest reports the write's end, with the broken pipe on the
	// path under test.
	var wroteErr atomic.Pointer[error]
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) { wroteErr.Store(&info.Err) }})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(make([]byte, 32<<20)))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("error %v, want the 413 answer", err)
	}
	if e := wroteErr.Load(); e == nil || *e == nil {
		t.Fatalf("WroteRequest reported %v, want the body's failed write: the server's answer did not come before the body's end", e)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || string(b) != "too big" {
		t.Errorf("answer %d %q, want 413 %q", resp.StatusCode, b, "too big")
	}
	if n := idleCount(tr); n != 0 {
		t.Errorf("%d idle connections kept after an answer before the body, want 0", n)
	}
}

// failingReader gives n bytes, then fails with errBodyBroke.
type failingReader struct{ n int }

var errBodyBroke = errors.New("the body's source broke")

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errBodyBroke
	}
	n := min(len(p), f.n)
	f.n -= n
	return n, nil
}

// failingWriterTo is failingReader with a WriteTo, the path bytes.Reader
// bodies take.
type failingWriterTo struct{ failingReader }

func (f *failingWriterTo) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(make([]byte, f.n))
	if err != nil {
		return int64(n), err
	}
	return int64(n), errBodyBroke
}

// TestABodyThatFailsIsTheCallersError: a body whose reading fails halfway
// is the caller's error, returned as such, even from a server that
// answers as soon as it has the head; it is never a response.
func TestABodyThatFailsIsTheCallersError(t *testing.T) {
	url := rawServer(t, func(nc net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(nc)); err != nil {
			return
		}
		io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		io.Copy(io.Discard, nc)
	})
	const length = 4 * firstWrite
	for _, c := range []struct {
		name string
		body io.Reader
	}{
		{"a reader", &failingReader{n: 2 * firstWrite}},
		{"a WriterTo", &failingWriterTo{failingReader{n: firstWrite}}},
	} {
		tr := newTransport()
		req, _ := http.NewRequest(http.MethodPost, url, c.body)
		req.ContentLength = length
		resp, err := tr.RoundTrip(req)
		if resp != nil {
			resp.Body.Close()
			t.Errorf("%s: HTTP %d, error %v; want the body's error", c.name, resp.StatusCode, err)
		} else if !errors.Is(err, errBodyBroke) {
			t.Errorf("%s: error %v, want the body's", c.name, err)
		}
		tr.CloseIdleConnections()
	}
}

// TestAnEarlyAnswerIsNotTheCancelledRequests: a request cancelled before
// the transport looks for an early answer gets none, even one the server
// sends within the wait: the bound the wait sets must not undo the
// cancellation's interruption.
func TestAnEarlyAnswerIsNotTheCancelledRequests(t *testing.T) {
	url := rawServer(t, func(nc net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(nc)); err != nil {
			return
		}
		time.Sleep(earlyAnswerWait / 5)
		io.WriteString(nc, "HTTP/1.1 413 Content Too Large\r\nContent-Length: 0\r\n\r\n")
	})
	tr := newTransport()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
	c, err := tr.getConn(ctx, hostPort(req.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer c.discard()
	interrupted := make(chan struct{})
	c.stop = context.AfterFunc(ctx, func() { c.interrupt(); close(interrupted) })
	if _, err := c.writeRequest(req, hostHeader(req), nil); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-interrupted
	if resp := tr.earlyAnswer(ctx, nil, c, req); resp != nil {
		t.Errorf("a cancelled request got the answer %d", resp.StatusCode)
	}
}

// TestIdleConnectionsExpireBelowTheTop: connections at the bottom of the
// pool, which a steady lower load never takes, are closed once idle past
// IdleConnTimeout, when another connection is released.
func TestIdleConnectionsExpireBelowTheTop(t *testing.T) {
	var closed atomic.Int32
	arrived := make(chan struct{}, 3)
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		if r.URL.Path == "/held" {
			<-release
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	tr := newTransport()
	tr.IdleConnTimeout = time.Minute
	defer tr.CloseIdleConnections()
	// Three requests at once: three connections, then idle together.
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			// Not get: it would call t.Fatal off the test's goroutine.
			resp, err := tr.RoundTrip(httptest.NewRequest(http.MethodPost, srv.URL+"/held", nil).WithContext(context.Background()))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	for range 3 {
		<-arrived
	}
	close(release)
	wg.Wait()
	if n := idleCount(tr); n != 3 {
		t.Fatalf("%d idle connections after three at once, want 3", n)
	}
	// The two below the top have been idle for an hour.
	tr.mu.Lock()
	for _, list := range tr.idle {
		for _, c := range list[:len(list)-1] {
			c.idleSince = c.idleSince.Add(-time.Hour)
		}
	}
	tr.mu.Unlock()
	_, reused, _ := get(t, tr, context.Background(), srv.URL, nil) // the top one
	<-arrived
	if !reused {
		t.Error("the freshest idle connection was not reused")
	}
	if n := idleCount(tr); n != 1 {
		t.Errorf("%d idle connections, want 1: the two idle past the timeout closed", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for closed.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := closed.Load(); n != 2 {
		t.Errorf("the server saw %d connections closed, want the 2 idle past the timeout", n)
	}
}

// fakeRoundTripper records that it was asked.
type fakeRoundTripper struct{ asked atomic.Int32 }

func (f *fakeRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	f.asked.Add(1)
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

// TestOtherSchemesGoToTheFallback: https is net/http's; without a
// fallback it is an error that names the URL.
func TestOtherSchemesGoToTheFallback(t *testing.T) {
	f := &fakeRoundTripper{}
	tr := newTransport()
	tr.Fallback = f
	req, _ := http.NewRequest(http.MethodGet, "https://example.invalid/v1/models", nil)
	if _, err := tr.RoundTrip(req); err != nil || f.asked.Load() != 1 {
		t.Errorf("https request: err %v, fallback asked %d times, want once", err, f.asked.Load())
	}
	if _, err := newTransport().RoundTrip(req); err == nil || !strings.Contains(err.Error(), "https://example.invalid") {
		t.Errorf("https without a fallback: %v, want an error naming the URL", err)
	}
}

// TestTraceHooksInOrder: the connection, the request written, the first
// response byte, each reported once and in that order.
func TestTraceHooksInOrder(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(5 * time.Millisecond)
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	var mu sync.Mutex
	var events []string
	add := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	ct := &httptrace.ClientTrace{
		GetConn:              func(string) { add("get") },
		ConnectStart:         func(string, string) { add("connect") },
		GotConn:              func(httptrace.GotConnInfo) { add("got") },
		WroteHeaders:         func() { add("headers") },
		WroteRequest:         func(httptrace.WroteRequestInfo) { add("request") },
		GotFirstResponseByte: func() { add("first byte") },
	}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), ct), http.MethodPost, srv.URL, strings.NewReader("{}"))
	exchange(t, newTransport(), req)
	if got, want := strings.Join(events, ","), "get,connect,got,headers,request,first byte"; got != want {
		t.Errorf("trace events %s, want %s", got, want)
	}
}

// countingConn counts the bytes written to a connection.
type countingConn struct {
	net.Conn
	wrote *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.wrote.Add(int64(n))
	return n, err
}

// TestWroteHeadersComesWithTheHead: for a long body, WroteHeaders marks
// the head on the socket with at most firstWrite of the body, not the
// whole body written; for a short one, the whole request.
func TestWroteHeadersComesWithTheHead(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	defer srv.Close()
	for _, size := range []int{10, 4 << 20} {
		var wrote, atHead atomic.Int64
		tr := newTransport()
		dial := tr.DialContext
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			return countingConn{c, &wrote}, err
		}
		ct := &httptrace.ClientTrace{WroteHeaders: func() { atHead.Store(wrote.Load()) }}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), ct), http.MethodPost, srv.URL, bytes.NewReader(make([]byte, size)))
		exchange(t, tr, req)
		head := wrote.Load() - int64(size)
		if want := head + int64(min(size, firstWrite)); atHead.Load() != want {
			t.Errorf("a %d-byte body: %d bytes written at WroteHeaders, want %d (the head and the body's first %d)", size, atHead.Load(), want, min(size, firstWrite))
		}
	}
}
