package sim

import (
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"
)

// The simulator's server bounds what clients, or anyone reaching its port,
// can make it hold. Replay opens a connection per request in flight and
// keeps idle ones, so the connection cap sits above any run's concurrency;
// connections past it wait in the kernel's accept queue, holding none of
// the process's descriptors. Requests in progress are capped alike (HTTP/2
// multiplexes many on a connection) and one more is answered busy.
const (
	mostConns      = 16384    // connections, and requests in progress, at most
	fdHeadroom     = 256      // descriptors kept for the process's own files, fetches and exports
	leastConns     = 64       // the cap however few descriptors there are
	maxHeaderBytes = 64 << 10 // a request's headers (vLLM's uvicorn takes 16 KiB)
	retryAfter     = time.Second
)

// Timeouts, variables so that a test can wait them out. A client must send
// its headers within headerTimeout and its whole request within
// readTimeout of its start (net/http lifts the read deadline once the body
// is read, so a stream outlives it); a write that a client does not take
// within streamWriteTimeout (see generation.renewWriteDeadline) cuts the
// response and aborts the request in the engine; a keep-alive connection
// idle for idleTimeout is closed, later than replay's client drops its own
// idle connections (90 s), so a request is never sent on a connection the
// server is closing.
var (
	headerTimeout      = 10 * time.Second
	readTimeout        = 60 * time.Second
	streamWriteTimeout = 60 * time.Second
	idleTimeout        = 5 * time.Minute
)

// connCap is how many connections the server serves at once: mostConns,
// or fewer where the descriptor limit (nofile; 0 when unknown) would
// otherwise let connections take the descriptors the process needs, so
// that accept never fails for want of one.
func connCap(nofile uint64) int {
	if nofile == 0 || nofile >= mostConns+fdHeadroom {
		return mostConns
	}
	return max(leastConns, int(nofile)-fdHeadroom)
}

// newHTTPServer returns the server Start serves the simulator with, and
// the listener it serves on: ln with at most maxConns connections served
// at once.
func (s *Server) newHTTPServer(ln net.Listener, maxConns int) (*http.Server, net.Listener) {
	srv := &http.Server{Handler: requestCap(s.Handler(), maxConns, s.writeTimeout), ReadHeaderTimeout: headerTimeout, ReadTimeout: readTimeout,
		IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes, Protocols: new(http.Protocols),
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 256}}
	// HTTP/1.1, and HTTP/2 by prior knowledge for clients that ask for it.
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	return srv, netutil.LimitListener(ln, maxConns)
}

// requestCap serves at most max requests at once, answering one more
// busy, and gives each response a write deadline: a handler that writes
// later, or longer, renews it.
func requestCap(h http.Handler, most int, writeTimeout time.Duration) http.Handler {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer n.Add(-1)
		if n.Add(1) > int64(most) {
			busy(w, fmt.Sprintf("the server is serving %d requests, as many as it takes at once; retry later", most))
			return
		}
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeTimeout))
		h.ServeHTTP(w, r)
	})
}

// busy answers 429 with a Retry-After, as an overloaded server does, and
// closes an HTTP/1.1 connection rather than read a body it refused.
func busy(w http.ResponseWriter, msg string) {
	w.Header().Set("Retry-After", fmt.Sprint(int(retryAfter/time.Second)))
	w.Header().Set("Connection", "close")
	writeError(w, http.StatusTooManyRequests, "RateLimitError", msg)
}

// testConnCap, when set, replaces the connection cap, for a test to reach.
var testConnCap int
