package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"

	"go.opentelemetry.io/otel"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/servetrace/servetrace/internal/llmspan"
	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/replay/scrub"
)

// The OTLP protocols Options.OTLPProtocol takes: vLLM's, as it reads
// them from OTEL_EXPORTER_OTLP_TRACES_PROTOCOL.
const (
	OTLPGRPC         = "grpc"
	OTLPHTTPProtobuf = "http/protobuf"
)

// The span's resource and scope names, and where http/protobuf exports
// go by default (the OTLP/HTTP path).
const (
	spanServiceName   = "servetrace-sim"
	spanTracerScope   = "github.com/servetrace/servetrace/replay/sim"
	defaultTracesPath = "/v1/traces"
)

// spanExport sends one llm_request span per finished request over OTLP,
// as vLLM does given --otlp-traces-endpoint: through the OpenTelemetry
// SDK's batch span processor (so a request never waits for an export;
// OTEL_BSP_* tune it as in vLLM's Python SDK), in the trace of the
// request's W3C traceparent header, or a new trace without one.
type spanExport struct {
	endpoint string // redacted: no credentials
	scrub    *scrub.Scrubber
	tp       *sdktrace.TracerProvider
	tracer   oteltrace.Tracer
	prop     propagation.TraceContext
}

// newSpanExport starts an exporter to endpoint over protocol (New has
// checked it: OTLPHTTPProtobuf, or else gRPC). It connects lazily: an
// endpoint with no collector yet is not an error here, and spans it
// cannot take are reported by the SDK's error handler.
func newSpanExport(endpoint, protocol string) (*spanExport, error) {
	hostPort, path, err := otlpEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	secrets := exportSecrets(endpoint)
	scrubber := scrub.New(secrets...)
	redacted := scrub.URL(endpoint)
	scrubExportErrors(secrets)
	var exp sdktrace.SpanExporter
	if protocol == OTLPHTTPProtobuf {
		exp, err = otlptracehttp.New(context.Background(), otlptracehttp.WithEndpoint(hostPort), otlptracehttp.WithURLPath(path), otlptracehttp.WithInsecure())
	} else {
		exp, err = otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(hostPort), otlptracegrpc.WithInsecure())
	}
	if err != nil {
		return nil, fmt.Errorf("sim: OTLP %s exporter to %s: %s", protocol, redacted, scrubber.Scrub(err.Error()))
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the name.
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", spanServiceName)), resource.Environment())
	if err != nil {
		return nil, fmt.Errorf("sim: span resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &spanExport{endpoint: redacted, scrub: scrubber, tp: tp, tracer: tp.Tracer(spanTracerScope)}, nil
}

// exportSecrets are the credentials a span export holds: the endpoint's
// user info and credential query values, and the header values the OTLP
// exporters take from OTEL_EXPORTER_OTLP_HEADERS and
// OTEL_EXPORTER_OTLP_TRACES_HEADERS (an Authorization token), as given
// and percent-decoded.
func exportSecrets(endpoint string) []string {
	secrets := scrub.URLSecrets(endpoint)
	rest := endpoint
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		user, pass, ok := strings.Cut(rest[:at], ":")
		if !ok {
			pass = user // a token given as the user
		}
		secrets = append(secrets, pass)
	}
	for _, env := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		for _, kv := range strings.Split(os.Getenv(env), ",") {
			_, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			secrets = append(secrets, strings.TrimSpace(v))
			if d, err := url.PathUnescape(strings.TrimSpace(v)); err == nil {
				secrets = append(secrets, d)
			}
		}
	}
	return secrets
}

// The OpenTelemetry SDK reports a failed export to its process-wide
// error handler, which prints it, with whatever a collector answered
// (one may quote the Authorization header it refused). The simulator
// installs a handler that prints it scrubbed of every span export's
// secrets.
var (
	exportErrorsOnce sync.Once
	exportSecretsMu  sync.Mutex
	exportScrubber   = scrub.New()
	exportSecretList []string
)

// scrubExportErrors adds secrets to those removed from the SDK's error
// reports, installing the scrubbing handler the first time.
func scrubExportErrors(secrets []string) {
	exportSecretsMu.Lock()
	exportSecretList = append(exportSecretList, secrets...)
	exportScrubber = scrub.New(exportSecretList...)
	exportSecretsMu.Unlock()
	exportErrorsOnce.Do(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			exportSecretsMu.Lock()
			s := exportScrubber
			exportSecretsMu.Unlock()
			log.Print(s.Scrub(err.Error()))
		}))
	})
}

// otlpEndpoint reads an endpoint as vLLM's --otlp-traces-endpoint takes
// it: host:port, or an http:// URL whose path, for http/protobuf, is
// where exports go (/v1/traces when it has none). Export is plain text,
// for a collector on loopback or a trusted network, so https is refused
// rather than silently sent without TLS.
func otlpEndpoint(endpoint string) (hostPort, path string, err error) {
	bad := func(why string) (string, string, error) {
		return "", "", opterr.New("OTLPTracesEndpoint", scrub.URL(endpoint), "%s; give host:port or http://host:port[/path]", why)
	}
	path = defaultTracesPath
	hostPort = endpoint
	if u, perr := url.Parse(endpoint); perr == nil && u.Scheme != "" && u.Host != "" {
		if u.Scheme != "http" {
			return bad("the simulator exports without TLS, over http only")
		}
		hostPort = u.Host
		if u.Path != "" && u.Path != "/" {
			path = u.Path
		}
	}
	if _, port, serr := net.SplitHostPort(hostPort); serr != nil || port == "" {
		return bad("not host:port")
	}
	return hostPort, path, nil
}

// spanRequest is what a request's span needs from its HTTP request: the
// trace context its client sent, and the sampling parameters vLLM
// records.
type spanRequest struct {
	parent            oteltrace.SpanContext // invalid without a traceparent
	temperature, topP float64
}

// request reads a request's span context from its headers and its
// sampling parameters from the body.
func (x *spanExport) request(h http.Header, req *genRequest) spanRequest {
	ctx := x.prop.Extract(context.Background(), propagation.HeaderCarrier(h))
	// vLLM's sampling defaults, when the request gives none.
	sr := spanRequest{parent: oteltrace.SpanContextFromContext(ctx), temperature: 1, topP: samplingParam(req.TopP, 1)}
	if req.Temperature != nil {
		sr.temperature = *req.Temperature
	}
	return sr
}

// samplingParam reads a number the simulator otherwise ignores, def when
// absent, null or not a number: the span reports it, and a request is
// accepted whatever it holds, as before spans were exported.
func samplingParam(raw json.RawMessage, def float64) float64 {
	v := def
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return def
	}
	return v
}

// finished exports the span of a request whose last choice finished: it
// starts at the request's arrival and lasts its e2e, and carries vLLM's
// attributes from the engine's readings. A request aborted or failed
// before its end has no span, as in vLLM, which emits it only from a
// finished request's output.
func (x *spanExport) finished(g *generation, p requestPhases) {
	attrs := []attribute.KeyValue{
		attribute.Float64(llmspan.Queue, p.queue.Seconds()),
		attribute.Float64(llmspan.TTFT, p.ttft().Seconds()),
		attribute.Float64(llmspan.E2E, p.e2e().Seconds()),
		attribute.Float64(llmspan.Prefill, p.prefill.Seconds()),
		attribute.Float64(llmspan.Decode, p.decode.Seconds()),
		attribute.Float64(llmspan.Inference, p.inference().Seconds()),
		attribute.Int(llmspan.PromptTokens, g.promptTokens),
		attribute.Int(llmspan.CompletionTokens, g.generated()),
		attribute.String(llmspan.RequestID, g.id),
		attribute.Int(llmspan.MaxTokens, g.maxTokens),
		attribute.Int(llmspan.N, len(g.choices)),
	}
	// vLLM sets these only when truthy: a greedy request has no temperature.
	if g.span.temperature != 0 {
		attrs = append(attrs, attribute.Float64(llmspan.Temperature, g.span.temperature))
	}
	if g.span.topP != 0 {
		attrs = append(attrs, attribute.Float64(llmspan.TopP, g.span.topP))
	}
	ctx := context.Background()
	if g.span.parent.IsValid() {
		ctx = oteltrace.ContextWithRemoteSpanContext(ctx, g.span.parent)
	}
	start := g.times.arrival
	_, sp := x.tracer.Start(ctx, llmspan.Name, oteltrace.WithSpanKind(oteltrace.SpanKindServer), oteltrace.WithTimestamp(start), oteltrace.WithAttributes(attrs...))
	// The end is the start plus e2e, not a second wall-clock reading, so
	// the span lasts exactly its e2e attribute.
	sp.End(oteltrace.WithTimestamp(start.Add(p.e2e())))
}

// shutdown exports the spans still batched and stops the exporter,
// within ctx.
func (x *spanExport) shutdown(ctx context.Context) error {
	if err := x.tp.Shutdown(ctx); err != nil {
		return errors.New("sim: the last spans were not exported to " + x.endpoint + ": " + x.scrub.Scrub(err.Error()))
	}
	return nil
}
