package sim

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/memcap"
)

// hang is how long a test waits for what must happen before it calls it
// a hang: never a timing.
const hang = 30 * time.Second

// textBody reads a JSON request of n bytes of prompt text ("hello hello
// ..." between head and tail) without holding it: a client can send bodies
// far larger than its own memory.
type textBody struct {
	head, tail string
	n, off     int
}

func (b *textBody) Read(p []byte) (int, error) {
	total := len(b.head) + b.n + len(b.tail)
	k := 0
	for ; k < len(p) && b.off < total; k, b.off = k+1, b.off+1 {
		switch {
		case b.off < len(b.head):
			p[k] = b.head[b.off]
		case b.off < len(b.head)+b.n:
			p[k] = "hello "[(b.off-len(b.head))%6]
		default:
			p[k] = b.tail[b.off-len(b.head)-b.n]
		}
	}
	if k == 0 {
		return 0, io.EOF
	}
	return k, nil
}

// setFor sets *v to x for the test's life: restored after its servers
// have closed (cleanups run last first).
func setFor[T any](t *testing.T, v *T, x T) {
	old := *v
	*v = x
	t.Cleanup(func() { *v = old })
}

// holdRequest opens a connection and sends a request's headers and the
// first bytes of a body of declared length, then nothing: the request is
// in progress until the connection closes.
func holdRequest(t *testing.T, addr, path string, declared int) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", path, declared)
	return conn
}

// waitFor polls cond until it holds, failing the test after hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(hang); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", hang, what)
		}
	}
}

const smallCompletion = `{"model":"servetrace-sim","prompt":"hi","max_tokens":2}`

// TestSimRefusesBodiesPastTheBudget holds the body budget with requests
// that declare the largest body and send a byte of it; then a small
// completion and a /tokenize are refused as busy, 429 with a Retry-After,
// before their bodies are read. Once the held requests go, the budget is
// whole again and requests are served.
func TestSimRefusesBodiesPastTheBudget(t *testing.T) {
	rs := start(t, fast())
	addr := strings.TrimPrefix(rs.URL, "http://")
	var held []net.Conn
	for range maxBodyBytesInFlight / maxRequestBytes {
		held = append(held, holdRequest(t, addr, "/v1/completions", maxRequestBytes))
	}
	waitFor(t, "the held bodies never took the budget", func() bool { return rs.sim.bodies.inUse() == maxBodyBytesInFlight })
	for _, c := range []struct{ path, body string }{
		{"/v1/completions", smallCompletion},
		{"/tokenize", `{"model":"servetrace-sim","prompt":"hi"}`},
	} {
		resp := post(t, rs.URL+c.path, c.body)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s with the budget spent: %s, Retry-After %q; want 429 with a Retry-After", c.path, resp.Status, resp.Header.Get("Retry-After"))
		}
	}
	for _, c := range held {
		c.Close()
	}
	waitFor(t, "the budget was not given back", func() bool { return rs.sim.bodies.inUse() == 0 })
	if resp := post(t, rs.URL+"/v1/completions", smallCompletion); resp.StatusCode != http.StatusOK {
		t.Errorf("after the held requests went: %s", resp.Status)
	}
	resp := post(t, rs.URL+"/v1/completions", strings.Repeat(" ", maxRequestBytes+1))
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over %d MiB: %s, want 413", maxRequestBytes>>20, resp.Status)
	}
}

// TestSimRefusesTokenizeFlood holds as many /tokenize requests as are
// served at once; one more is refused as busy while a completion is still
// served.
func TestSimRefusesTokenizeFlood(t *testing.T) {
	rs := start(t, fast())
	addr := strings.TrimPrefix(rs.URL, "http://")
	for range maxTokenizeRequests {
		holdRequest(t, addr, "/tokenize", 100)
	}
	waitFor(t, "the held /tokenize requests never arrived", func() bool { return len(rs.sim.tokenizeRequests) == maxTokenizeRequests })
	resp := post(t, rs.URL+"/tokenize", `{"model":"servetrace-sim","prompt":"hi"}`)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("/tokenize past %d at once: %s, Retry-After %q; want 429 with a Retry-After", maxTokenizeRequests, resp.Status, resp.Header.Get("Retry-After"))
	}
	if resp := post(t, rs.URL+"/v1/completions", smallCompletion); resp.StatusCode != http.StatusOK {
		t.Errorf("a completion beside the /tokenize flood: %s", resp.Status)
	}
}

// TestSimCutsStalledClients: a request whose body stops coming is cut
// once the read timeout has passed, and an idle keep-alive connection once
// the idle timeout has; neither holds a connection, a descriptor and a
// handler for good.
func TestSimCutsStalledClients(t *testing.T) {
	setFor(t, &readTimeout, 200*time.Millisecond)
	setFor(t, &idleTimeout, 200*time.Millisecond)
	rs := start(t, fast())
	addr := strings.TrimPrefix(rs.URL, "http://")
	for _, c := range []struct{ name, send string }{
		{"half-sent body", "POST /v1/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"},
		{"idle keep-alive", "GET /health HTTP/1.1\r\nHost: sim\r\n\r\n"},
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte(c.send))
		conn.SetReadDeadline(time.Now().Add(hang))
		_, err = io.Copy(io.Discard, conn)
		conn.Close()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%s: the simulator held the connection for %v", c.name, hang)
		}
	}
	waitFor(t, "the half-sent body still holds the budget", func() bool { return rs.sim.bodies.inUse() == 0 })
	// Headers past the bound: a 431, or, where the server's close
	// overtakes its answer on a loaded machine, the connection; never
	// served.
	req, _ := http.NewRequest(http.MethodGet, rs.URL+"/health", nil)
	req.Header.Set("X-Big", strings.Repeat("x", 2*maxHeaderBytes))
	if resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("a header of %d KiB: %s, want 431", 2*maxHeaderBytes>>10, resp.Status)
		}
	}
}

// TestConnCap: the cap is 16384 connections, less where the descriptor
// limit would leave fewer than 256 descriptors for the process's own use,
// and never under 64.
func TestConnCap(t *testing.T) {
	for _, c := range []struct {
		nofile uint64
		want   int
	}{{0, 16384}, {1 << 20, 16384}, {16640, 16384}, {16639, 16383}, {1024, 768}, {300, 64}, {10, 64}} {
		if got := connCap(c.nofile); got != c.want {
			t.Errorf("connCap(%d) = %d, want %d", c.nofile, got, c.want)
		}
	}
}

// h2Client speaks HTTP/2 by prior knowledge, as replay does with HTTP 2.
func h2Client() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}

// TestSimCutsClientsThatStopReading: a client that takes a stream's
// headers and then reads nothing, over HTTP/1.1 or HTTP/2, is cut once a
// write has waited the write timeout, and its request is aborted in the
// engine instead of holding a handler, and its tokens, for good.
func TestSimCutsClientsThatStopReading(t *testing.T) {
	setFor(t, &streamWriteTimeout, 300*time.Millisecond)
	for _, c := range []struct {
		name   string
		client *http.Client
	}{{"HTTP/1.1", &http.Client{Transport: &http.Transport{}}}, {"HTTP/2", h2Client()}} {
		t.Run(c.name, func(t *testing.T) {
			p, _ := LookupPreset("zero")
			o := DefaultOptions()
			o.Engine, o.MaxModelLen = p.Engine, p.MaxModelLen
			rs := start(t, o)
			body := fmt.Sprintf(`{"model":"servetrace-sim","prompt":"hi","max_tokens":%d,"ignore_eos":true,"stream":true}`, p.MaxModelLen-10)
			resp, err := c.client.Post(rs.URL+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s", resp.Status)
			}
			waitFor(t, "a stream nobody reads is still being generated", func() bool { return rs.sim.inFlight.Load() == 0 })
		})
	}
}

// TestSimStreamOutlivesReadTimeout: the read timeout bounds the reading of
// a request, not its answer. A stream that lasts many times the read
// timeout, over HTTP/1.1 and HTTP/2, is streamed whole: net/http lifts the
// read deadline once the body is read (checked here, for it is what lets
// the simulator use http.Server.ReadTimeout at all).
func TestSimStreamOutlivesReadTimeout(t *testing.T) {
	setFor(t, &readTimeout, 100*time.Millisecond)
	o := fast()
	o.Engine.Cost = CostModel{IterBase: 20 * time.Millisecond}
	rs := start(t, o)
	for _, c := range []struct {
		name   string
		client *http.Client
	}{{"HTTP/1.1", &http.Client{Transport: &http.Transport{}}}, {"HTTP/2", h2Client()}} {
		resp, err := c.client.Post(rs.URL+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"servetrace-sim","prompt":"hi","max_tokens":30,"ignore_eos":true,"stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		ev := sseEvents(t, resp)
		resp.Body.Close()
		if len(ev) != 32 || ev[31] != "[DONE]" { // 30 tokens, the finish reason, [DONE]
			t.Errorf("%s: %d events, want 32 ending in [DONE]", c.name, len(ev))
		}
	}
}

// TestSimConnectionCap: with the cap's connections open, the next waits,
// unserved, until one closes; over HTTP/2, where one connection carries
// many requests, a request past the cap in progress is refused as busy.
func TestSimConnectionCap(t *testing.T) {
	const most = 4
	setFor(t, &testConnCap, most)

	t.Run("connections", func(t *testing.T) {
		rs := start(t, fast())
		addr := strings.TrimPrefix(rs.URL, "http://")
		var held []net.Conn
		for range most {
			held = append(held, holdRequest(t, addr, "/v1/completions", 100))
		}
		answered := make(chan error, 1)
		go func() {
			resp, err := (&http.Client{Transport: &http.Transport{}}).Get(rs.URL + "/health")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = errors.New(resp.Status)
				}
			}
			answered <- err
		}()
		select {
		case err := <-answered:
			t.Fatalf("connection %d of a cap of %d was served (%v)", most+1, most, err)
		case <-time.After(300 * time.Millisecond):
		}
		held[0].Close()
		select {
		case err := <-answered:
			if err != nil {
				t.Errorf("connection %d, once one closed: %v", most+1, err)
			}
		case <-time.After(hang):
			t.Fatalf("connection %d was not served once one closed", most+1)
		}
		for _, c := range held {
			c.Close()
		}
	})

	t.Run("HTTP/2 requests", func(t *testing.T) {
		rs := start(t, fast()) // a server of its own: no request of the last still in progress
		client := h2Client()
		var wg sync.WaitGroup
		var writers []*io.PipeWriter
		for range most {
			pr, pw := io.Pipe()
			writers = append(writers, pw)
			req, _ := http.NewRequest(http.MethodPost, rs.URL+"/v1/completions", pr)
			wg.Go(func() {
				if resp, err := client.Do(req); err == nil {
					resp.Body.Close()
				}
			})
			pw.Write([]byte("{"))
		}
		// Each is in progress once it reads its body, a step of the budget
		// taken for a body of unknown length.
		waitFor(t, "the held requests never read their bodies", func() bool { return rs.sim.bodies.inUse() == most*bodyStep })
		resp, err := client.Get(rs.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Errorf("request %d over HTTP/2 with a cap of %d: %s, Retry-After %q; want 429 with a Retry-After", most+1, most, resp.Status, resp.Header.Get("Retry-After"))
		}
		for _, pw := range writers {
			pw.CloseWithError(errors.New("gone"))
		}
		wg.Wait()
	})
}

// TestLongSimBodiesInFlightAreBounded sends, at once, a dozen 64 MiB
// prompts of text, to /v1/completions, /v1/chat/completions (without a
// length, chunked) and /tokenize: read whole and decoded, each would hold
// several times its bytes. Under a 1 GiB cap every one must be answered,
// refused as too long once counted or as busy, and the budget given back.
func TestLongSimBodiesInFlightAreBounded(t *testing.T) {
	memcap.Run(t, 1<<30, func(t *testing.T) {
		rs := start(t, fast())
		n := maxRequestBytes - 200
		var wg sync.WaitGroup
		var mu sync.Mutex
		answers := map[string]int{}
		for i := range 12 {
			path, head, tail, sized := "/v1/completions", `{"model":"servetrace-sim","prompt":"`, `"}`, true
			switch i % 3 {
			case 1:
				path, head, tail, sized = "/v1/chat/completions", `{"model":"servetrace-sim","messages":[{"role":"user","content":"`, `"}]}`, false
			case 2:
				path = "/tokenize"
			}
			wg.Go(func() {
				body := &textBody{head: head, tail: tail, n: n}
				req, _ := http.NewRequest(http.MethodPost, rs.URL+path, body)
				if sized {
					req.ContentLength = int64(len(head) + n + len(tail))
				}
				client := &http.Client{Transport: &http.Transport{}}
				resp, err := client.Do(req)
				answer := "no answer (connection closed on a refused body)"
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					answer = resp.Status
				}
				mu.Lock()
				answers[path+": "+answer]++
				mu.Unlock()
			})
		}
		wg.Wait()
		t.Logf("answers: %v", answers)
		for a := range answers {
			if !strings.Contains(a, "400") && !strings.Contains(a, "429") && !strings.Contains(a, "no answer") {
				t.Errorf("answer %q: want 400 (too long) or 429 (busy)", a)
			}
		}
		waitFor(t, "the budget was not given back", func() bool { return rs.sim.bodies.inUse() == 0 })
		if resp := post(t, rs.URL+"/v1/completions", smallCompletion); resp.StatusCode != http.StatusOK {
			t.Errorf("after the flood: %s", resp.Status)
		}
	})
}

// TestLongSimWaitingRequestsHoldNoText queues 200 requests for 130,000
// tokens each behind one running sequence: a waiting request holds its
// counts, not its text (max_tokens words would be 2 MiB each), so under a
// 256 MiB cap they all wait.
func TestLongSimWaitingRequestsHoldNoText(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		o := fast()
		o.Engine.MaxNumSeqs = 1
		o.Engine.Cost = CostModel{IterBase: time.Second}
		rs := start(t, o)
		const requests = 200
		client := h2Client()
		var resps []*http.Response
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range requests {
			wg.Go(func() {
				resp, err := client.Post(rs.URL+"/v1/completions", "application/json",
					strings.NewReader(`{"model":"servetrace-sim","prompt":"hi","max_tokens":130000,"stream":true}`))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				resps = append(resps, resp)
				mu.Unlock()
			})
		}
		wg.Wait()
		waitFor(t, "the requests never reached the engine", func() bool { return rs.sim.inFlight.Load() == requests })
		for _, r := range resps {
			r.Body.Close()
		}
	})
}

// TestSimSlowAnswersOutliveWriteTimeout: the write timeout bounds a write
// the client does not take, not the wait for tokens. Over HTTP/2, which
// enforces a write deadline as a timer on the stream whether or not a
// write is waiting, a stream whose first token comes after many write
// timeouts, a stream that stalls as long mid-way, and a whole answer that
// long in coming are all answered in full.
func TestSimSlowAnswersOutliveWriteTimeout(t *testing.T) {
	setFor(t, &streamWriteTimeout, 200*time.Millisecond)
	o := fast()
	o.Engine.Cost = CostModel{IterBase: 700 * time.Millisecond}
	o.StallRate, o.StallFor = 1, time.Second
	rs := start(t, o)
	client := h2Client()
	for _, c := range []struct {
		name, body string
		events     int
	}{
		{"stream", `{"model":"servetrace-sim","prompt":"hi","max_tokens":3,"ignore_eos":true,"stream":true}`, 5},
		{"whole", `{"model":"servetrace-sim","prompt":"hi","max_tokens":3,"ignore_eos":true}`, 0},
	} {
		resp, err := client.Post(rs.URL+"/v1/completions", "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if c.events > 0 {
			if ev := sseEvents(t, resp); len(ev) != c.events || ev[len(ev)-1] != "[DONE]" {
				t.Errorf("%s: %d events %v, want %d ending in [DONE]", c.name, len(ev), ev, c.events)
			}
		} else if b, err := io.ReadAll(resp.Body); err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"finish_reason":"length"`) {
			t.Errorf("%s: %s %v %s", c.name, resp.Status, err, b)
		}
		resp.Body.Close()
	}
}
