package replay

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

// hang is how long a test waits for what must happen before it calls it a
// hang: never a timing.
const hang = 30 * time.Second

// setFor sets *v to x for the test's life: restored after its servers
// have closed (cleanups run last first).
func setFor[T any](t *testing.T, v *T, x T) {
	old := *v
	*v = x
	t.Cleanup(func() { *v = old })
}

// helperServer is one of the replayer's own servers, started for a test:
// its address, a path it answers GET on, and its connection cap.
type helperServer struct {
	name  string
	start func(t *testing.T) (addr, path string)
	conns int
}

var helperServers = []helperServer{
	{"self-metrics", func(t *testing.T) (string, string) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		url, err := newSelfMetrics("run", 0, &liveStats{}).serve(ctx, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/metrics"), "/metrics"
	}, selfMetricsConns},
	{"image server", func(t *testing.T) (string, string) {
		s, err := startImageServer(context.Background(), newMediaCache(1<<20))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.stop)
		url := s.url(mediaKey{id: 1, w: 8, h: 8, format: "png"})
		return strings.TrimPrefix(s.base, "http://"), strings.TrimPrefix(url, s.base)
	}, imageServerConns},
	{"floor server", func(t *testing.T) (string, string) {
		_, srv, url, err := startFloorServer()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		return strings.TrimPrefix(url, "http://"), "/v1/chat/completions"
	}, floorConns},
}

// get sends a GET of path on a connection of its own and returns the
// answer's status.
func get(addr, path string, header http.Header) (int, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	req.Header = header
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestHelperServersCapConnections: with a server's cap of connections
// open, the next connection waits, unserved, until one closes.
func TestHelperServersCapConnections(t *testing.T) {
	for _, hs := range helperServers {
		t.Run(hs.name, func(t *testing.T) {
			addr, path := hs.start(t)
			var held []net.Conn
			for range hs.conns {
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				held = append(held, conn)
			}
			answered := make(chan error, 1)
			go func() {
				_, err := get(addr, path, nil)
				answered <- err
			}()
			select {
			case err := <-answered:
				t.Fatalf("connection %d of a cap of %d was served (%v)", hs.conns+1, hs.conns, err)
			case <-time.After(300 * time.Millisecond):
			}
			held[0].Close()
			select {
			case err := <-answered:
				if err != nil {
					t.Errorf("connection %d, once one closed: %v", hs.conns+1, err)
				}
			case <-time.After(hang):
				t.Fatalf("connection %d was not served once one closed", hs.conns+1)
			}
		})
	}
}

// TestHelperServersCutStalledClients: a request whose body stops coming,
// and an idle keep-alive connection, are cut once the read or idle
// timeout has passed; headers past the bound are refused (431).
func TestHelperServersCutStalledClients(t *testing.T) {
	setFor(t, &helperReadTimeout, 200*time.Millisecond)
	setFor(t, &helperIdleTimeout, 200*time.Millisecond)
	for _, hs := range helperServers {
		t.Run(hs.name, func(t *testing.T) {
			addr, path := hs.start(t)
			for _, c := range []struct{ name, send string }{
				{"half-sent body", "POST " + path + " HTTP/1.1\r\nHost: helper\r\nContent-Length: 1000\r\n\r\n{"},
				{"idle keep-alive", "GET " + path + " HTTP/1.1\r\nHost: helper\r\n\r\n"},
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
					t.Errorf("%s: the server held the connection for %v", c.name, hang)
				}
			}
			// Refused with a 431, or, where the server's close overtakes
			// its answer on a loaded machine, with the connection.
			status, err := get(addr, path, http.Header{"X-Big": {strings.Repeat("x", 2*helperHeaderBytes)}})
			if err == nil && status != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("a header of %d KiB: %d, want 431", 2*helperHeaderBytes>>10, status)
			}
		})
	}
}

// countingBody is a body of n bytes that counts the bytes read from it.
type countingBody struct {
	n    int64
	read atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	left := b.n - b.read.Load()
	if left <= 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), left)
	for i := range p[:k] {
		p[i] = 'x'
	}
	b.read.Add(k)
	return int(k), nil
}

// TestFloorServerHoldsNoHostileInput: the floor's endpoint reads a body no
// further than its bound (a 1 GiB one is cut well before its end), and
// notes only the floor's own request ids: a flood of others leaves it
// holding nothing.
func TestFloorServerHoldsNoHostileInput(t *testing.T) {
	fs, srv, url, err := startFloorServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	body := &countingBody{n: 1 << 30}
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", body)
	req.ContentLength = body.n
	if resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if n := body.read.Load(); n > 64<<20 {
		t.Errorf("the floor server took %d MiB of a 1 GiB body; want it cut within its %d KiB bound (and the sockets' buffers)", n>>20, helperBodyBytes>>10)
	}

	for i := range 10_000 {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader("{}"))
		r.Header.Set("X-Request-Id", fmt.Sprintf("hostile-%d", i))
		fs.ServeHTTP(httptest.NewRecorder(), r)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader("{}"))
	r.Header.Set("X-Request-Id", floorRunID+"-7")
	fs.ServeHTTP(httptest.NewRecorder(), r)
	noted := 0
	for i := range floorRequests {
		if fs.noted[i] {
			noted++
		}
	}
	if noted != 1 || !fs.noted[7] {
		t.Errorf("after 10,000 foreign ids and floor-7: %d slots noted, want floor-7's alone", noted)
	}
}

// blockingWriter is a ResponseWriter whose Write blocks until released: a
// scraper that stopped reading, its connection's buffers full.
type blockingWriter struct {
	*httptest.ResponseRecorder
	entered, release chan struct{}
	once             sync.Once
}

func (w *blockingWriter) Write(b []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.release
	return w.ResponseRecorder.Write(b)
}

// TestSelfMetricsScraperNeverBlocksTheCollector: while a scrape's write
// is stuck, the collector still records finished requests.
func TestSelfMetricsScraperNeverBlocksTheCollector(t *testing.T) {
	m := newSelfMetrics("run", 0, &liveStats{})
	w := &blockingWriter{ResponseRecorder: httptest.NewRecorder(), entered: make(chan struct{}), release: make(chan struct{})}
	defer close(w.release)
	go m.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	<-w.entered
	observed := make(chan struct{})
	go func() {
		m.observe(&trace.Result{Outcome: trace.OutcomeOK})
		close(observed)
	}()
	select {
	case <-observed:
	case <-time.After(hang):
		t.Fatalf("observe waited %v on a scrape that does not write", hang)
	}
}
