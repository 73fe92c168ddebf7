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

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// MaxMessageBytes bounds one OTLP export, compressed and inflated alike:
// 16 MiB holds tens of thousands of request spans, and a larger message
// is refused (413 over HTTP, ResourceExhausted over gRPC) before it is
// held.
const MaxMessageBytes = 16 << 20

// Receiver is an OTLP trace receiver on one address: gRPC (the
// collector's TraceService, over HTTP/2 without TLS) and HTTP POST
// /v1/traces with protobuf or JSON bodies, plain or gzip, as the
// OpenTelemetry exporters send them. What it receives goes to its
// Collector.
type Receiver struct {
	ln   net.Listener
	srv  *http.Server
	grpc *grpc.Server
	c    *Collector
}

// Listen starts a receiver for c on addr ("host:port"; a missing host is
// 127.0.0.1, so spans are taken from this host only unless a host is
// named).
func Listen(addr string, c *Collector) (*Receiver, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("span receiver address %q: want host:port, e.g. 127.0.0.1:4317", addr)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("span receiver: %w", err)
	}
	r := &Receiver{ln: ln, c: c, grpc: grpc.NewServer(grpc.MaxRecvMsgSize(MaxMessageBytes))}
	coltracepb.RegisterTraceServiceServer(r.grpc, traceService{c: c})
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // gRPC without TLS: h2c with prior knowledge
	r.srv = &http.Server{Handler: r, Protocols: &protocols, ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
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

// ServeHTTP routes gRPC to the gRPC server and serves OTLP/HTTP.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.ProtoMajor == 2 && strings.HasPrefix(req.Header.Get("Content-Type"), "application/grpc") {
		r.grpc.ServeHTTP(w, req)
		return
	}
	if req.URL.Path != "/v1/traces" {
		http.Error(w, "servetrace receives OTLP traces at /v1/traces", http.StatusNotFound)
		return
	}
	if req.Method != http.MethodPost {
		http.Error(w, "POST an OTLP export", http.StatusMethodNotAllowed)
		return
	}
	body, err := readBody(w, req)
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, errTooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
		http.Error(w, err.Error(), status)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	ct := req.Header.Get("Content-Type")
	isJSON := strings.HasPrefix(ct, "application/json")
	if isJSON {
		err = unmarshalJSON(body, &msg)
	} else {
		err = proto.Unmarshal(body, &msg)
	}
	if err != nil {
		http.Error(w, "not an OTLP trace export: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.c.Add(&msg)
	var out []byte
	if isJSON {
		w.Header().Set("Content-Type", "application/json")
		out, _ = protojson.Marshal(&coltracepb.ExportTraceServiceResponse{})
	} else {
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ = proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	}
	w.Write(out)
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

// traceService is the gRPC TraceService.
type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	c *Collector
}

// Export takes one export.
func (s traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.c.Add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}
