package replay

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

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
	ttft     histogram
	itl      histogram
	lateness histogram
	stats    *liveStats
}

// histogram has cumulative-friendly fixed buckets in seconds.
type histogram struct {
	bounds []float64
	counts []int64 // per bucket, the last is +Inf
	sum    float64
	n      int64
}

func newHistogram(bounds ...float64) histogram {
	return histogram{bounds: bounds, counts: make([]int64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v)
	h.counts[i]++
	h.sum += v
	h.n++
}

func (h *histogram) write(w io.Writer, name, help, labels string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	var cum int64
	for i, b := range h.bounds {
		cum += h.counts[i]
		fmt.Fprintf(w, "%s_bucket{%sle=\"%g\"} %d\n", name, labels, b, cum)
	}
	fmt.Fprintf(w, "%s_bucket{%sle=\"+Inf\"} %d\n%s_sum{%s} %g\n%s_count{%s} %d\n",
		name, labels, h.n, name, strings.TrimSuffix(labels, ","), h.sum, name, strings.TrimSuffix(labels, ","), h.n)
}

func newSelfMetrics(runID string, shard int32, stats *liveStats) *selfMetrics {
	lat := []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	return &selfMetrics{runID: runID, shard: shard, outcomes: map[string]int64{}, stats: stats,
		ttft:     newHistogram(lat...),
		itl:      newHistogram(0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1),
		lateness: newHistogram(0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1)}
}

// observe records one finished request.
func (m *selfMetrics) observe(res *trace.Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.outcomes[res.Outcome]++
	if res.SentNs != nil {
		m.lateness.observe(float64(*res.SentNs-res.AdmittedNs) / 1e9)
		if res.FirstTokenNs != nil {
			m.ttft.observe(float64(*res.FirstTokenNs-*res.SentNs) / 1e9)
		}
	}
	for i := 1; i < len(res.TokenTimesNs); i++ {
		m.itl.observe(float64(res.TokenTimesNs[i]-res.TokenTimesNs[i-1]) / 1e9)
	}
}

func (m *selfMetrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	m.mu.Lock()
	defer m.mu.Unlock()
	labels := fmt.Sprintf("run_id=%q,shard=\"%d\",", m.runID, m.shard)
	base := strings.TrimSuffix(labels, ",")
	sent, done := m.stats.sent.Load(), m.stats.done.Load()
	fmt.Fprintf(w, "# HELP servetrace_requests_sent_total Requests handed to the HTTP transport.\n# TYPE servetrace_requests_sent_total counter\nservetrace_requests_sent_total{%s} %d\n", base, sent)
	fmt.Fprintf(w, "# HELP servetrace_requests_in_flight Requests sent and not finished.\n# TYPE servetrace_requests_in_flight gauge\nservetrace_requests_in_flight{%s} %d\n", base, max(0, sent-done))
	fmt.Fprintf(w, "# HELP servetrace_requests_total Finished requests by outcome.\n# TYPE servetrace_requests_total counter\n")
	for _, o := range trace.Outcomes {
		fmt.Fprintf(w, "servetrace_requests_total{%soutcome=%q} %d\n", labels, o, m.outcomes[o])
	}
	m.ttft.write(w, "servetrace_ttft_seconds", "Time to first token, from send.", labels)
	m.itl.write(w, "servetrace_itl_seconds", "Gap between token events.", labels)
	m.lateness.write(w, "servetrace_send_lateness_seconds", "Send time minus admitted time: the client's own lateness.", labels)
}

// serve listens on addr until ctx ends.
func (m *selfMetrics) serve(ctx context.Context, addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("--serve-metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	return "http://" + ln.Addr().String() + "/metrics", nil
}
