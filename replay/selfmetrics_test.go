package replay

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servetrace/servetrace/trace"
)

func TestSelfMetricsExposition(t *testing.T) {
	var stats liveStats
	stats.sent.Store(3)
	stats.done.Store(2)
	m := newSelfMetrics("run1", 4, &stats)
	ms := func(v int64) *int64 { x := v * 1e6; return &x }
	m.observe(&trace.Result{Outcome: trace.OutcomeOK, AdmittedNs: 0, SentNs: ms(0), FirstTokenNs: ms(30), TokenTimesNs: []int64{30e6, 45e6, 47e6}})
	m.observe(&trace.Result{Outcome: trace.OutcomeHTTPError, AdmittedNs: 0, SentNs: ms(3)})
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	values := map[string]float64{}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample line %q", line)
		}
		values[line[:i]] = v
	}
	want := map[string]float64{
		`servetrace_requests_sent_total{run_id="run1",shard="4"}`:                     3,
		`servetrace_requests_in_flight{run_id="run1",shard="4"}`:                      1,
		`servetrace_requests_total{run_id="run1",shard="4",outcome="ok"}`:             1,
		`servetrace_requests_total{run_id="run1",shard="4",outcome="http_error"}`:     1,
		`servetrace_ttft_seconds_bucket{run_id="run1",shard="4",le="0.025"}`:          0,
		`servetrace_ttft_seconds_bucket{run_id="run1",shard="4",le="0.05"}`:           1, // 30 ms
		`servetrace_ttft_seconds_count{run_id="run1",shard="4"}`:                      1,
		`servetrace_itl_seconds_bucket{run_id="run1",shard="4",le="0.005"}`:           1, // 2 ms
		`servetrace_itl_seconds_bucket{run_id="run1",shard="4",le="0.02"}`:            2, // and 15 ms, cumulative
		`servetrace_send_lateness_seconds_bucket{run_id="run1",shard="4",le="0.002"}`: 1,
		`servetrace_send_lateness_seconds_bucket{run_id="run1",shard="4",le="+Inf"}`:  2,
		`servetrace_send_lateness_seconds_count{run_id="run1",shard="4"}`:             2,
	}
	for k, v := range want {
		if got, ok := values[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
}

func TestServeMetricsDuringARun(t *testing.T) {
	target := startSim(t, fastSim())
	wl := workload(t, 40, 40*time.Millisecond) // ~1.6 s of schedule
	progress := &lockedBuffer{}
	opts := DefaultOptions()
	// Port 0, read back from the line that says where it serves: a port
	// reserved by listening and closing could be taken meanwhile.
	opts.Target, opts.ServeMetrics, opts.Progress = target, "127.0.0.1:0", progress
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), wl, filepath.Join(t.TempDir(), "run"), opts)
		done <- err
	}()
	var runErr error
	ended := false
	// No keep-alives: every request dials, so it fails once the server is
	// closed instead of reusing a connection the server has yet to drop.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	servedAt := regexp.MustCompile(`serving metrics at (\S+)`)
	var url string
	for deadline := time.Now().Add(30 * time.Second); url == ""; time.Sleep(5 * time.Millisecond) {
		if !ended {
			select {
			case runErr = <-done:
				ended = true
			default:
			}
		}
		if m := servedAt.FindStringSubmatch(progress.String()); m != nil {
			url = m[1]
		} else if ended {
			t.Fatalf("the run ended (err %v) without saying where it serves metrics; progress:\n%s", runErr, progress.String())
		} else if time.Now().After(deadline) {
			t.Fatalf("30 s into the run, it has not said where it serves metrics; progress:\n%s", progress.String())
		}
	}
	// Scrape until a finished request shows, for as long as the run lasts.
	var body string
	for !ended {
		select {
		case runErr = <-done:
			ended = true
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if body = string(b); strings.Contains(body, "servetrace_requests_total") && !strings.Contains(body, `outcome="ok"} 0`) {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(body, "servetrace_requests_sent_total") || strings.Contains(body, `outcome="ok"} 0`) {
		t.Errorf("no live metrics with finished requests during the run:\n%s", body)
	}
	if !ended {
		runErr = <-done
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
	// The server is closed once the run has returned, on its own goroutine:
	// it must stop answering soon after, and not go on serving.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		resp, err := client.Get(url)
		if err != nil {
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("the metrics server still answers 10 s after the run")
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestSelfMetricNamesMatchExposition keeps SelfMetricNames (which the
// Grafana dashboard's queries are checked against) equal to the families
// the endpoint really serves.
func TestSelfMetricNamesMatchExposition(t *testing.T) {
	m := newSelfMetrics("r", 0, &liveStats{})
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	var served []string
	for line := range strings.Lines(rec.Body.String()) {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			served = append(served, f[2])
		}
	}
	if !slices.Equal(served, SelfMetricNames) {
		t.Errorf("served families %v, SelfMetricNames %v", served, SelfMetricNames)
	}
}

func TestServeMetricsBindsLoopbackUnlessNamed(t *testing.T) {
	for addr, want := range map[string]string{":9464": "127.0.0.1:9464", "0.0.0.0:9464": "0.0.0.0:9464", "127.0.0.1:0": "127.0.0.1:0", "[::1]:80": "[::1]:80"} {
		if got := loopbackUnlessNamed(addr); got != want {
			t.Errorf("%q binds %q, want %q", addr, got, want)
		}
	}
	m := newSelfMetrics("r", 0, &liveStats{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, err := m.serve(ctx, ":0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("a host-less --serve-metrics listens at %s, want loopback", url)
	}
}
