package replay

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	target := startSim(t, fastSim())
	wl := workload(t, 30, 30*time.Millisecond) // ~0.9 s of schedule
	opts := DefaultOptions()
	opts.Target, opts.ServeMetrics = target, addr
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), wl, filepath.Join(t.TempDir(), "run"), opts)
		done <- err
	}()
	var body string
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if body = string(b); strings.Contains(body, "servetrace_requests_total") && !strings.Contains(body, `outcome="ok"} 0`) {
			break
		}
	}
	if !strings.Contains(body, "servetrace_requests_sent_total") || strings.Contains(body, `outcome="ok"} 0`) {
		t.Errorf("no live metrics with finished requests during the run:\n%s", body)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("the metrics server still answers after the run")
	}
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
