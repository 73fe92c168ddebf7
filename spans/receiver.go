package spans

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
)

// MaxMessageBytes bounds one OTLP export, compressed and inflated alike:
// 16 MiB holds tens of thousands of request spans, and a larger message
// is refused (413 over HTTP, ResourceExhausted over gRPC) before it is
// held.
const MaxMessageBytes = 16 << 20

// The receiver's bounds on what exporters, or anyone reaching its port,
// can make it hold. maxConns connections are served at once (more wait
// in the kernel's queue, holding none of the process's descriptors);
// maxExports exports are read and decoded at once, each within
// MaxMessageBytes, and one more is answered busy (429, ResourceExhausted
// with a retry delay), which the OTLP exporters retry; a connection must
// send its headers within headerTimeout and a whole export within
// readTimeout, and an idle one is closed after idleTimeout.
const (
	maxConns    = 64
	maxExports  = 2
	maxStreams  = 16 // HTTP/2 streams a connection may have open
	idleTimeout = 60 * time.Second
	retryAfter  = time.Second
)

// headerTimeout and readTimeout are variables so that a test can wait
// them out.
var (
	headerTimeout = 10 * time.Second
	readTimeout   = 30 * time.Second
)

// ErrNotLoopback is Listen's refusal of an address on another interface
// than loopback, without allowRemote.
var ErrNotLoopback = errors.New("not a loopback address")

// Receiver is an OTLP trace receiver on one address: gRPC (the
// collector's TraceService, over HTTP/2 without TLS) and HTTP POST
// /v1/traces with protobuf or JSON bodies, plain or gzip, as the
// OpenTelemetry exporters send them. What it receives goes to its
// Collector.
type Receiver struct {
	ln      net.Listener
	srv     *http.Server
	grpc    *grpc.Server
	c       *Collector
	exports chan struct{} // a slot per export being read and decoded
}

// Listen starts a receiver for c on addr ("host:port"; a missing host is
// 127.0.0.1). A host that is not loopback is refused (an error wrapping
// ErrNotLoopback) unless allowRemote is set: the receiver takes spans
// from anyone who reaches it.
func Listen(addr string, c *Collector, allowRemote bool) (*Receiver, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("span receiver address %q: want host:port, e.g. 127.0.0.1:4317", addr)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	if !allowRemote && !IsLoopback(host) {
		return nil, fmt.Errorf("span receiver address %q: %w: spans would be taken from any host that reaches it", addr, ErrNotLoopback)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("span receiver: %w", err)
	}
	r := &Receiver{ln: ln, c: c, exports: make(chan struct{}, maxExports),
		grpc: grpc.NewServer(grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.ForceServerCodecV2(rawCodec{}))}
	r.grpc.RegisterService(&traceServiceDesc, r)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // gRPC without TLS: h2c with prior knowledge
	r.srv = &http.Server{Handler: r, Protocols: &protocols, ReadHeaderTimeout: headerTimeout, ReadTimeout: readTimeout,
		WriteTimeout: readTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: 64 << 10,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: maxStreams}}
	go r.srv.Serve(netutil.LimitListener(ln, maxConns))
	return r, nil
}

// IsLoopback reports whether host ("localhost" or an IP) is loopback.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Addr is the address the receiver listens on.
func (r *Receiver) Addr() string { return r.ln.Addr().String() }

// Close stops the receiver: it takes no new export and lets those in
// progress finish (up to closeGrace), so an engine's exporter is answered,
// not cut mid-stream; past the grace they are cut.
func (r *Receiver) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	err := r.srv.Shutdown(ctx)
	if err != nil {
		err = r.srv.Close()
	}
	r.grpc.Stop()
	return err
}

// closeGrace bounds how long Close waits for exports in progress.
const closeGrace = 2 * time.Second

// ServeHTTP serves gRPC and OTLP/HTTP, an export at a time per slot:
// with every slot taken, the export is refused as busy before its body
// is read.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	isGRPC := req.ProtoMajor == 2 && strings.HasPrefix(req.Header.Get("Content-Type"), "application/grpc")
	if !isGRPC && req.URL.Path != "/v1/traces" {
		http.Error(w, "servetrace receives OTLP traces at /v1/traces", http.StatusNotFound)
		return
	}
	if !isGRPC && req.Method != http.MethodPost {
		http.Error(w, "POST an OTLP export", http.StatusMethodNotAllowed)
		return
	}
	select {
	case r.exports <- struct{}{}:
		defer func() { <-r.exports }()
	default:
		if isGRPC {
			grpcBusy(w)
		} else {
			// Closing the connection spares reading the body to keep it.
			w.Header().Set("Connection", "close")
			w.Header().Set("Retry-After", fmt.Sprint(int(retryAfter/time.Second)))
			http.Error(w, "busy with other exports: retry", http.StatusTooManyRequests)
		}
		return
	}
	if isGRPC {
		r.grpc.ServeHTTP(w, req)
		return
	}
	r.serveHTTPExport(w, req)
}

// serveHTTPExport takes one OTLP/HTTP export.
func (r *Receiver) serveHTTPExport(w http.ResponseWriter, req *http.Request) {
	body, err := readBody(w, req)
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, errTooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
		http.Error(w, err.Error(), status)
		return
	}
	isJSON := strings.HasPrefix(req.Header.Get("Content-Type"), "application/json")
	if isJSON {
		_, err = r.c.addJSON(body)
	} else {
		_, err = r.c.addProto(body)
	}
	if err != nil {
		http.Error(w, "not an OTLP trace export: "+err.Error(), http.StatusBadRequest)
		return
	}
	// ExportTraceServiceResponse, empty: {} in JSON, no bytes in protobuf.
	if isJSON {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}"))
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

var errTooLarge = fmt.Errorf("an OTLP export over %d MiB", MaxMessageBytes>>20)

// readBody reads an export's body, inflating gzip, within MaxMessageBytes
// both before and after inflating.
func readBody(w http.ResponseWriter, req *http.Request) ([]byte, error) {
	var src io.Reader = http.MaxBytesReader(w, req.Body, MaxMessageBytes)
	switch enc := req.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(src)
		if err != nil {
			return nil, fmt.Errorf("gzip body: %w", err)
		}
		src = zr
	default:
		return nil, fmt.Errorf("content encoding %q: send gzip or none", enc)
	}
	var buf bytes.Buffer
	if req.ContentLength > 0 && req.ContentLength <= MaxMessageBytes {
		buf.Grow(int(req.ContentLength))
	}
	n, err := io.Copy(&buf, io.LimitReader(src, MaxMessageBytes+1))
	var maxErr *http.MaxBytesError
	switch {
	case errors.As(err, &maxErr) || n > MaxMessageBytes:
		return nil, errTooLarge
	case err != nil:
		return nil, fmt.Errorf("read body: %w", err)
	}
	return buf.Bytes(), nil
}
