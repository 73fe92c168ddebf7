package replay

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/internal/promtext"
	"github.com/servetrace/servetrace/trace"
)

// selfMetrics is the replayer's own Prometheus exposition (--serve-metrics):
// requests sent and in flight, outcomes by class, and histograms of TTFT,
// ITL and send lateness, for a live dashboard during long or sharded runs.
// It is fed by the collector, off the send path.
type selfMetrics struct {
	mu       sync.Mutex
	runID    string
	shard    int32
	outcomes map[string]int64
	ttft     promtext.Histogram
	itl      promtext.Histogram
	lateness promtext.Histogram
	stats    *liveStats
}

func newSelfMetrics(runID string, shard int32, stats *liveStats) *selfMetrics {
	lat := []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	return &selfMetrics{runID: runID, shard: shard, outcomes: map[string]int64{}, stats: stats,
		ttft:     promtext.NewHistogram(lat...),
		itl:      promtext.NewHistogram(0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1),
		lateness: promtext.NewHistogram(0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1)}
}

// observe records one finished request.
func (m *selfMetrics) observe(res *trace.Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.outcomes[res.Outcome]++
	if res.SentNs != nil {
		m.lateness.Observe(float64(*res.SentNs-res.AdmittedNs) / 1e9)
		if res.FirstTokenNs != nil {
			m.ttft.Observe(float64(*res.FirstTokenNs-*res.SentNs) / 1e9)
		}
	}
	for i := 1; i < len(res.TokenTimesNs); i++ {
		m.itl.Observe(float64(res.TokenTimesNs[i]-res.TokenTimesNs[i-1]) / 1e9)
	}
}

// SelfMetricNames are the metric families --serve-metrics exposes
// (histograms add _bucket, _sum and _count series), for dashboards.
var SelfMetricNames = []string{"servetrace_requests_sent_total", "servetrace_requests_in_flight", "servetrace_requests_total",
	"servetrace_ttft_seconds", "servetrace_itl_seconds", "servetrace_send_lateness_seconds"}

// ServeHTTP renders the exposition under the lock and writes it after:
// a scraper that reads slowly, or not at all, never holds the lock that
// the collector's observe takes.
func (m *selfMetrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	var b bytes.Buffer
	m.render(&b)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	w.Write(b.Bytes())
}

// render writes the exposition.
func (m *selfMetrics) render(w io.Writer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	base := promtext.Labels("run_id", m.runID, "shard", fmt.Sprint(m.shard))
	sent, done := m.stats.sent.Load(), m.stats.done.Load()
	promtext.WriteHeader(w, "servetrace_requests_sent_total", "counter", "Requests handed to the HTTP transport.")
	promtext.WriteSample(w, "servetrace_requests_sent_total", base, float64(sent))
	promtext.WriteHeader(w, "servetrace_requests_in_flight", "gauge", "Requests sent and not finished.")
	promtext.WriteSample(w, "servetrace_requests_in_flight", base, float64(max(0, sent-done)))
	promtext.WriteHeader(w, "servetrace_requests_total", "counter", "Finished requests by outcome.")
	for _, o := range trace.Outcomes {
		promtext.WriteSample(w, "servetrace_requests_total", base+","+promtext.Labels("outcome", o), float64(m.outcomes[o]))
	}
	promtext.WriteHeader(w, "servetrace_ttft_seconds", "histogram", "Time to first token, from send.")
	m.ttft.Write(w, "servetrace_ttft_seconds", base)
	promtext.WriteHeader(w, "servetrace_itl_seconds", "histogram", "Gap between token events.")
	m.itl.Write(w, "servetrace_itl_seconds", base)
	promtext.WriteHeader(w, "servetrace_send_lateness_seconds", "histogram", "Send time minus admitted time: the client's own lateness.")
	m.lateness.Write(w, "servetrace_send_lateness_seconds", base)
}

// serve listens on addr until ctx ends. An address without a host
// (":9464") means loopback: another interface only when named
// ("0.0.0.0:9464", as a Kubernetes pod needs).
func (m *selfMetrics) serve(ctx context.Context, addr string) (string, error) {
	addr = loopbackUnlessNamed(addr)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", opterr.New("ServeMetrics", addr, "%v", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m)
	srv := serveBounded(ln, mux, selfMetricsConns, false)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	return "http://" + ln.Addr().String() + "/metrics", nil
}

// loopbackUnlessNamed binds a host-less address to loopback.
func loopbackUnlessNamed(addr string) string {
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}
