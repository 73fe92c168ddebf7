package replay

import (
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// The replayer's own servers (--serve-metrics, the image server of
// ImageTransport "url", the loopback endpoint the client floor is measured
// against) answer small requests at once, so each is bounded tightly: a
// few connections served at once (more wait in the kernel's accept queue,
// holding none of the process's descriptors), headers within
// helperHeaderBytes and helperHeaderTimeout, a whole request within
// helperReadTimeout, its answer within helperWriteTimeout, bodies within
// helperBodyBytes (none of them reads more), and an idle connection closed
// after helperIdleTimeout, later than the clients that reuse them drop
// theirs.
const (
	helperHeaderBytes = 16 << 10
	helperBodyBytes   = 64 << 10
)

// The timeouts, variables so that a test can wait them out.
var (
	helperHeaderTimeout = 5 * time.Second
	helperReadTimeout   = 10 * time.Second
	helperWriteTimeout  = 30 * time.Second
	helperIdleTimeout   = 2 * time.Minute
)

// Connections each server serves at once: a scraper or two; the target's
// image fetches, one per request it holds at most (vLLM's pool takes 100
// a host); the floor's client, one request at a time.
const (
	selfMetricsConns = 16
	imageServerConns = 256
	floorConns       = 8
)

// serveBounded serves h on ln within the helpers' bounds, at most maxConns
// connections at once, until the returned server is closed: HTTP/1.1, and
// with h2c HTTP/2 by prior knowledge too.
func serveBounded(ln net.Listener, h http.Handler, maxConns int, h2c bool) *http.Server {
	srv := &http.Server{Handler: http.MaxBytesHandler(h, helperBodyBytes), ReadHeaderTimeout: helperHeaderTimeout,
		ReadTimeout: helperReadTimeout, WriteTimeout: helperWriteTimeout, IdleTimeout: helperIdleTimeout,
		MaxHeaderBytes: helperHeaderBytes, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(h2c)
	go srv.Serve(netutil.LimitListener(ln, maxConns))
	return srv
}
