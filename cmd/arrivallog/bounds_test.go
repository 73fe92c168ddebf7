package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/memcap"
)

// hang is how long a test waits for what must happen before it calls it a
// hang: never a timing.
const hang = 30 * time.Second

// setFor sets *v to x for the test's life.
func setFor[T any](t *testing.T, v *T, x T) {
	old := *v
	*v = x
	t.Cleanup(func() { *v = old })
}

// TestServeRefusesRemoteAddr: serve says loopback; another interface is
// refused, naming the flag that allows it, before anything listens.
func TestServeRefusesRemoteAddr(t *testing.T) {
	done := make(chan error, 1)
	go func() { done <- serve([]string{"-addr", "0.0.0.0:0", "-log", filepath.Join(t.TempDir(), "a.csv")}) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "-addr 0.0.0.0:0") || !strings.Contains(err.Error(), "-allow-remote") {
			t.Errorf("serve -addr 0.0.0.0:0: %v, want a refusal naming -addr and -allow-remote", err)
		}
	case <-time.After(hang):
		t.Fatal("serve -addr 0.0.0.0:0 is serving")
	}
	for _, c := range []struct {
		addr   string
		remote bool
	}{{"127.0.0.1:0", false}, {"localhost:0", false}, {"0.0.0.0:0", true}} {
		ln, err := listen(c.addr, c.remote)
		if err != nil {
			t.Errorf("listen %s (remote %v): %v", c.addr, c.remote, err)
			continue
		}
		ln.Close()
	}
}

// TestLongLoggerBoundsArrivals: 4,000 requests whose X-Request-Id is
// 100 KiB each, past a cap of 1,000 arrivals: the logger keeps 1,000,
// counts 3,000 dropped, and keeps no over-long id, so under a 256 MiB cap
// it holds a few kilobytes, not 400 MiB.
func TestLongLoggerBoundsArrivals(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		l := &logger{chunks: 1, max: 1000}
		for i := range 4000 {
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader("{}"))
			id := fmt.Sprintf("run-%d", i)
			if i >= 10 {
				id = strings.Repeat(string(rune('a'+i%26)), 100<<10)
			}
			r.Header.Set("X-Request-Id", id)
			l.ServeHTTP(httptest.NewRecorder(), r)
		}
		if len(l.arrivals) != 1000 || l.dropped != 3000 {
			t.Fatalf("%d arrivals kept, %d dropped; want 1000 and 3000", len(l.arrivals), l.dropped)
		}
		if l.arrivals[3].id != "run-3" || l.arrivals[10].id != "" {
			t.Errorf("ids %q and %.20q: want run-3 kept and a 100 KiB id logged empty", l.arrivals[3].id, l.arrivals[10].id)
		}
	})
}

// serveLogger serves l on a loopback port as serve does, until the test
// ends.
func serveLogger(t *testing.T, l *logger) string {
	ln, err := listen("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(l)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// TestServerCutsStalledClients: a client that stops reading a long stream
// is cut once a write has waited the write timeout (its arrival is still
// logged); a body that stops coming is cut after the read timeout; an
// idle connection after the idle timeout; headers past the bound are
// refused.
func TestServerCutsStalledClients(t *testing.T) {
	setFor(t, &writeTimeout, 200*time.Millisecond)
	setFor(t, &readTimeout, 200*time.Millisecond)
	setFor(t, &idleTimeout, 200*time.Millisecond)
	l := &logger{chunks: 1 << 20, max: 10}
	addr := serveLogger(t, l)

	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	for deadline := time.Now().Add(hang); ; time.Sleep(10 * time.Millisecond) {
		l.mu.Lock()
		n := len(l.arrivals)
		l.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a stream nobody reads was written to for %v", hang)
		}
	}

	for _, c := range []struct{ name, send string }{
		{"half-sent body", "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n{"},
		{"idle keep-alive", "GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n"},
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
	// Refused with a 431, or, where the server's close overtakes its
	// answer on a loaded machine, with the connection: never served.
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/models", nil)
	req.Header.Set("X-Big", strings.Repeat("x", 2*maxHeaderBytes))
	if resp, err := http.DefaultClient.Do(req); err == nil && resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a header of %d KiB: %s, want 431", 2*maxHeaderBytes>>10, resp.Status)
	}
}

// TestLogRoundTripsOddIDs: an id holding a comma, a quote or a newline is
// written so that report reads it back as it was, not as other fields.
func TestLogRoundTripsOddIDs(t *testing.T) {
	want := []arrival{{`a,b`, 1, 2}, {`say "hi"`, 3, 4}, {"two\nlines", 5, 6}, {"plain", 7, 8}}
	path := filepath.Join(t.TempDir(), "arrivals.csv")
	var b bytes.Buffer
	if err := writeLog(&b, want); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, b.Bytes(), 0o644)
	got, err := readLog(path)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("read back %v, %v; want %v", got, err, want)
	}
}

// TestReadLogRefusesWhatServeNeverWrites: more rows than serve keeps, a
// header of the wrong width and a negative -skip are errors naming the
// file, line or flag, not a panic or an unbounded read.
func TestReadLogRefusesWhatServeNeverWrites(t *testing.T) {
	setFor(t, &maxLogRows, 10)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(text), 0o644)
		return p
	}
	long := write("long.csv", "request_id,arrived_unix_ns,first_byte_unix_ns\n"+strings.Repeat("r,1,2\n", 11))
	narrow := write("narrow.csv", "request_id\nr\n")
	good := write("good.csv", "request_id,arrived_unix_ns,first_byte_unix_ns\n"+strings.Repeat("r,1,2\n", 5))
	for _, c := range []struct {
		name string
		run  func() error
		want string
	}{
		{"rows", func() error { _, err := readLog(long); return err }, "long.csv line 12: more than 10 arrivals"},
		{"header", func() error { _, err := readLog(narrow); return err }, "narrow.csv: no header"},
		{"skip", func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic: %v", p)
				}
			}()
			return report([]string{"-log", good, "-skip", "-3"})
		}, "-skip -3"},
	} {
		if err := c.run(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

// TestLongReadLogBoundsLines: a log whose second line is a gigabyte long
// (a sparse file: no disk) is refused at that line after reading a few
// kilobytes of it, so under a 128 MiB cap the reader never holds it.
func TestLongReadLogBoundsLines(t *testing.T) {
	memcap.Run(t, 128<<20, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "arrivals.csv")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("request_id,arrived_unix_ns,first_byte_unix_ns\n")
		f.Truncate(1 << 30)
		f.Close()
		_, err = readLog(path)
		if err == nil || !strings.Contains(err.Error(), "arrivals.csv line 2") || !strings.Contains(err.Error(), "longer than") {
			t.Errorf("a 1 GiB line: %v, want refused at line 2 as too long", err)
		}
	})
}

// countingBody is a body of n bytes that counts the bytes read from it.
type countingBody struct {
	n, read int64
	mu      sync.Mutex
}

func (b *countingBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := min(int64(len(p)), b.n-b.read)
	if k <= 0 {
		return 0, io.EOF
	}
	clear(p[:k])
	b.read += k
	return int(k), nil
}

// TestServerBoundsBodiesAndConnections: a body of 1 GiB is cut at the
// body bound (64 MiB, and what the sockets buffer), unlogged; with the
// cap's connections open, the next waits, unserved, until one closes.
func TestServerBoundsBodiesAndConnections(t *testing.T) {
	setFor(t, &maxConns, 4)
	l := &logger{chunks: 1, max: 10}
	addr := serveLogger(t, l)
	body := &countingBody{n: 1 << 30}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", body)
	req.ContentLength = body.n
	if resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	body.mu.Lock()
	read := body.read
	body.mu.Unlock()
	l.mu.Lock()
	logged := len(l.arrivals)
	l.mu.Unlock()
	if read > maxBodyBytes+(32<<20) || logged != 0 {
		t.Errorf("a 1 GiB body: %d MiB of it sent, %d arrivals logged; want it cut near %d MiB and none logged", read>>20, logged, maxBodyBytes>>20)
	}

	var held []net.Conn
	for range maxConns {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		held = append(held, conn)
	}
	answered := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{Transport: &http.Transport{}}).Get("http://" + addr + "/v1/models")
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	select {
	case err := <-answered:
		t.Fatalf("connection %d of a cap of %d was served (%v)", maxConns+1, maxConns, err)
	case <-time.After(300 * time.Millisecond):
	}
	held[0].Close()
	select {
	case err := <-answered:
		if err != nil {
			t.Errorf("connection %d, once one closed: %v", maxConns+1, err)
		}
	case <-time.After(hang):
		t.Fatalf("connection %d was not served once one closed", maxConns+1)
	}
}
