// Package h1 is an HTTP/1.1 client transport for plain http:// endpoints
// that runs each exchange on the calling goroutine: the request is written
// and the response read by the goroutine that asked for it, with no
// connection goroutines in between. net/http's transport hands every
// request to a writer goroutine and every response from a reader
// goroutine, a few goroutine switches per request that a load generator
// pays at thousands of requests a second (docs/measurements.md, "A
// transport without hand-offs"). Responses are parsed by
// net/http.ReadResponse, so framing (chunked bodies, trailers, lengths,
// Connection: close) follows the standard library's parser. Other
// schemes go to a fallback transport.
package h1

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"slices"
	"sync"
	"time"
)

// Transport is an http.RoundTripper for HTTP/1.1 over plain TCP, keeping
// idle connections per host for reuse. Its zero value is not usable: fill
// DialContext at least. It is safe for concurrent use.
type Transport struct {
	// DialContext opens a connection to addr ("host:port").
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// Fallback serves requests that are not plain http:// (https, say).
	// Without it they fail.
	Fallback http.RoundTripper
	// MaxIdleConnsPerHost bounds the idle connections kept for a host;
	// zero keeps DefaultMaxIdleConnsPerHost.
	MaxIdleConnsPerHost int
	// IdleConnTimeout is how long a connection may sit idle and still be
	// reused; zero is no limit.
	IdleConnTimeout time.Duration
	// ReadBufferSize sizes each connection's read buffer; zero is 16 KiB.
	ReadBufferSize int
	// MaxResponseHeaderBytes bounds a response's status line and headers,
	// so a hostile server cannot take the client's memory; zero is
	// DefaultMaxResponseHeaderBytes.
	MaxResponseHeaderBytes int64

	mu   sync.Mutex
	idle map[string][]*conn // by host:port, the most recently used last
}

// Defaults for Transport's zero fields.
const (
	DefaultMaxIdleConnsPerHost    = 100000
	DefaultMaxResponseHeaderBytes = 1 << 20
	defaultReadBufferSize         = 16 << 10
)

// RoundTrip sends req and reads the response's status and headers on the
// calling goroutine; the body is read from the connection as the caller
// reads it. The connection returns to the idle pool when the body has
// been read to its end, and is closed if the body is closed before that
// or the request's context ends while it is in use.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		if t.Fallback != nil {
			return t.Fallback.RoundTrip(req)
		}
		closeBody(req)
		return nil, fmt.Errorf("h1: only http:// URLs are served, not %q", req.URL.Redacted())
	}
	if err := validRequest(req); err != nil {
		closeBody(req)
		return nil, err
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		closeBody(req)
		return nil, err
	}
	ct := httptrace.ContextClientTrace(ctx)
	key := hostPort(req.URL)
	if ct != nil && ct.GetConn != nil {
		ct.GetConn(key)
	}
	c, err := t.getConn(ctx, key)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	if ct != nil && ct.GotConn != nil {
		ct.GotConn(httptrace.GotConnInfo{Conn: c.nc, Reused: c.reused, WasIdle: c.reused, IdleTime: c.idleFor})
	}
	// A cancelled context ends whatever read or write is under way; the
	// connection is then closed, never reused.
	c.stop = context.AfterFunc(ctx, c.interrupt)
	resp, err := t.exchange(ctx, ct, c, req)
	if err != nil {
		c.discard()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	return resp, nil
}

// exchange writes req on c and reads its response's head.
func (t *Transport) exchange(ctx context.Context, ct *httptrace.ClientTrace, c *conn, req *http.Request) (*http.Response, error) {
	var onHead func()
	if ct != nil {
		onHead = ct.WroteHeaders
	}
	closeAfter, err := c.writeRequest(req, hostHeader(req), onHead)
	// As net/http's Request.write, WroteRequest reports every end of the
	// write, a failed one with its error.
	if ct != nil && ct.WroteRequest != nil {
		ct.WroteRequest(httptrace.WroteRequestInfo{Err: err})
	}
	if err != nil {
		var bw *bodyWriteError
		if errors.As(err, &bw) {
			if resp := t.earlyAnswer(ctx, ct, c, req); resp != nil {
				return resp, nil
			}
		}
		return nil, err
	}
	resp, err := t.readHead(ct, c, req)
	if err != nil {
		return nil, err
	}
	reuse := !closeAfter && !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols
	return t.withBody(ctx, c, resp, reuse), nil
}

// earlyAnswerWait bounds the wait for an answer the server sent before it
// stopped reading a request's body.
const earlyAnswerWait = 250 * time.Millisecond

// earlyAnswer reads the answer a server gave before it read the whole
// body and closed (413 Content Too Large, 429, 401), as net/http's
// transport returns it: a broken pipe would hide the status. It returns
// nil when no answer comes within earlyAnswerWait. The connection is not
// reused either way.
func (t *Transport) earlyAnswer(ctx context.Context, ct *httptrace.ClientTrace, c *conn, req *http.Request) *http.Response {
	c.nc.SetReadDeadline(time.Now().Add(earlyAnswerWait))
	var resp *http.Response
	var err error
	if ctx.Err() == nil {
		resp, err = t.readHead(ct, c, req)
	}
	// The body reads without the bound. A context that ended before or
	// meanwhile gets no answer, and its interruption, which setting the
	// bound may have undone, is made again.
	c.nc.SetReadDeadline(time.Time{})
	if ctx.Err() != nil {
		c.interrupt()
		return nil
	}
	if err != nil {
		return nil
	}
	return t.withBody(ctx, c, resp, false)
}

// readHead reads the final response's status line and headers from c,
// reporting interim ones (100 Continue, 103 Early Hints) to ct.
func (t *Transport) readHead(ct *httptrace.ClientTrace, c *conn, req *http.Request) (*http.Response, error) {
	c.limit.left = t.maxHeaderBytes() + int64(c.br.Size())
	defer func() { c.limit.left = -1 }()
	if _, err := c.br.Peek(1); err != nil {
		return nil, headError(err, c)
	}
	if ct != nil && ct.GotFirstResponseByte != nil {
		ct.GotFirstResponseByte()
	}
	for {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			return nil, headError(err, c)
		}
		// 101 switches protocols and ends the exchange.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
		if ct != nil && ct.Got1xxResponse != nil {
			if err := ct.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
				return nil, err
			}
		}
	}
}

// withBody gives resp its body, which lets c go when read to its end or
// closed: back to the pool with reuse, else closed. A response without a
// body lets c go at once.
func (t *Transport) withBody(ctx context.Context, c *conn, resp *http.Response, reuse bool) *http.Response {
	if resp.Body == http.NoBody || resp.ContentLength == 0 {
		resp.Body = http.NoBody
		t.release(c, reuse)
		return resp
	}
	resp.Body = &body{inner: resp.Body, conn: c, transport: t, reuse: reuse, ctx: ctx}
	return resp
}

// headError names a failure to read a response's head, telling a server
// that closed the connection without answering from a garbled answer.
func headError(err error, c *conn) error {
	switch {
	case errors.Is(err, errHeadTooLong):
		return err
	case errors.Is(err, io.EOF) && c.reused:
		return fmt.Errorf("h1: the server closed a reused connection without answering: %w", err)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("h1: the server closed the connection without answering: %w", err)
	}
	return err
}

func (t *Transport) maxHeaderBytes() int64 {
	if t.MaxResponseHeaderBytes > 0 {
		return t.MaxResponseHeaderBytes
	}
	return DefaultMaxResponseHeaderBytes
}

// getConn takes the most recently used live idle connection to key, or
// dials one.
func (t *Transport) getConn(ctx context.Context, key string) (*conn, error) {
	now := time.Now()
	for {
		c := t.takeIdle(key)
		if c == nil {
			break
		}
		idle := now.Sub(c.idleSince)
		if t.IdleConnTimeout > 0 && idle > t.IdleConnTimeout || !c.alive() {
			c.nc.Close()
			continue
		}
		c.reused, c.idleFor = true, idle
		return c, nil
	}
	if t.DialContext == nil {
		return nil, errors.New("h1: Transport.DialContext is not set")
	}
	// net's dialer reports ConnectStart and ConnectDone itself.
	nc, err := t.DialContext(ctx, "tcp", key)
	if err != nil {
		return nil, err
	}
	return newConn(nc, key, t.readBufferSize()), nil
}

func (t *Transport) readBufferSize() int {
	if t.ReadBufferSize > 0 {
		return t.ReadBufferSize
	}
	return defaultReadBufferSize
}

func (t *Transport) takeIdle(key string) *conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	list := t.idle[key]
	if len(list) == 0 {
		return nil
	}
	c := list[len(list)-1]
	list[len(list)-1] = nil
	t.idle[key] = list[:len(list)-1]
	return c
}

// release ends c's exchange: with reuse, and its context not ended, it
// waits in the idle pool; otherwise it is closed. Connections of the same
// pool idle past IdleConnTimeout are closed on the way.
func (t *Transport) release(c *conn, reuse bool) {
	if !c.stop() || !reuse || c.br.Buffered() > 0 {
		// The context ended (its deadline is set on the connection), or
		// the server sent more than the response: neither is reusable.
		c.nc.Close()
		return
	}
	c.idleSince = time.Now()
	max := t.MaxIdleConnsPerHost
	if max <= 0 {
		max = DefaultMaxIdleConnsPerHost
	}
	t.mu.Lock()
	if t.idle == nil {
		t.idle = map[string][]*conn{}
	}
	list := t.idle[c.key]
	// The pool is in the order of release, the oldest first, and taken
	// from the top: connections at the bottom may sit for as long as
	// traffic stays below its peak. Those idle past IdleConnTimeout go
	// here, so their sockets do not outlive the timeout by much.
	var expired []*conn
	if t.IdleConnTimeout > 0 {
		k := 0
		for k < len(list) && c.idleSince.Sub(list[k].idleSince) > t.IdleConnTimeout {
			k++
		}
		if k > 0 {
			expired = slices.Clone(list[:k])
			list = slices.Delete(list, 0, k)
		}
	}
	full := len(list) >= max
	if !full {
		list = append(list, c)
	}
	t.idle[c.key] = list
	t.mu.Unlock()
	for _, e := range expired {
		e.nc.Close()
	}
	if full {
		c.nc.Close()
	}
}

// CloseIdleConnections closes the idle connections, and the fallback's.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			c.nc.Close()
		}
	}
	if f, ok := t.Fallback.(interface{ CloseIdleConnections() }); ok {
		f.CloseIdleConnections()
	}
}

// hostPort is u's host with the scheme's default port made explicit.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host // already host:port
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// hostHeader is what the Host header carries: the request's Host if set,
// else the URL's.
func hostHeader(req *http.Request) string {
	if req.Host != "" {
		return req.Host
	}
	return req.URL.Host
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
