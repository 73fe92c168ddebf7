package replay

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/replay/sim"
	"github.com/servetrace/servetrace/trace"
)

func TestRunJSONRecordsProvenanceAndHygiene(t *testing.T) {
	s, err := sim.New(fastSim())
	if err != nil {
		t.Fatal(err)
	}
	// The endpoint answers 503 for 600 ms from the first request it gets,
	// as a server loading its weights does: counted from there, not from
	// before the run's setup, however long that takes.
	var firstRequest sync.Once
	var first time.Time
	gated := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		firstRequest.Do(func() { first = time.Now() })
		if time.Since(first) < 600*time.Millisecond {
			http.Error(w, "loading", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Server", "sim-under-test")
		s.Handler().ServeHTTP(w, r)
	}))
	defer gated.Close()
	// Its metrics say 3 requests are busy until 700 ms after the first scrape.
	var firstScrape atomic.Int64
	metricsSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		firstScrape.CompareAndSwap(0, time.Now().UnixNano())
		busy := 0
		if time.Since(time.Unix(0, firstScrape.Load())) < 700*time.Millisecond {
			busy = 3
		}
		fmt.Fprintf(w, "# HELP vllm:num_requests_running x\nvllm:num_requests_running{model_name=\"m\"} %d\nvllm:num_requests_waiting{model_name=\"m\"} 0\n", busy)
	}))
	defer metricsSrv.Close()

	wl := workload(t, 40, 30*time.Millisecond)
	run := filepath.Join(t.TempDir(), "run")
	opts := DefaultOptions()
	opts.Target = gated.URL
	// The limits only fail a hang.
	opts.WaitReady, opts.Metrics, opts.MetricsInterval, opts.WaitIdle = time.Minute, []MetricsEndpoint{{Role: RoleEngine, URL: metricsSrv.URL}}, 300*time.Millisecond, time.Minute
	opts.Labels = map[string]string{"config": "A"}
	opts.CommandLine = RedactArgs([]string{"servetrace", "replay", "--header", "X-Token=s3cret", "wl"})
	start := time.Now()
	if _, err := Run(context.Background(), wl, run, opts); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 700*time.Millisecond {
		t.Error("the run did not wait for readiness and idleness")
	}
	ri, err := trace.ReadRunInfo(run)
	if err != nil {
		t.Fatal(err)
	}
	// At least the 600 ms of loading, which began with the first poll;
	// the upper bound only catches a wrong unit or a hang.
	if ttr, ok := ri.TimeToReadyMs.(float64); !ok || ttr < 600 || ttr > 30_000 {
		t.Errorf("time to ready %v ms, want at least the 600 ms of loading (and under 30 s)", ri.TimeToReadyMs)
	}
	// The server said busy for 700 ms from the first idle poll.
	if ri.IdleWaitMs == nil || *ri.IdleWaitMs < 700 || *ri.IdleWaitMs > 30_000 {
		t.Errorf("idle wait %v ms, want at least the 700 ms the metrics said busy", ri.IdleWaitMs)
	}
	if ri.ServerHeader != "sim-under-test" || ri.ServerModels == trace.NotRecorded {
		t.Errorf("server header %q, models %v", ri.ServerHeader, ri.ServerModels)
	}
	if ri.GoVersion == "" || ri.HostCPUs < 1 || ri.WorkloadSHA256 == "" || ri.Tokenizer != "cl100k_base" || ri.Labels["config"] != "A" {
		t.Errorf("provenance: go %q cpus %d workload %q tokenizer %q labels %v", ri.GoVersion, ri.HostCPUs, ri.WorkloadSHA256, ri.Tokenizer, ri.Labels)
	}
	if strings.Contains(strings.Join(ri.CommandLine, " "), "s3cret") || !slices.Contains(ri.CommandLine, "X-Token=<redacted>") {
		t.Errorf("command line not redacted: %v", ri.CommandLine)
	}
	if ri.StartUTC == "" || ri.EndUTC == "" || ri.Client.CPUSeconds <= 0 || ri.Client.Samples != "client.jsonl" {
		t.Errorf("times %q..%q, client %+v", ri.StartUTC, ri.EndUTC, ri.Client)
	}
	// Scrapes before, during and after, each file marked with its phase.
	phases := map[string]int{}
	for _, f := range ri.Metrics {
		b, err := os.ReadFile(filepath.Join(run, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"before", "during", "after"} {
			if strings.Contains(string(b), "phase="+p) {
				phases[p]++
			}
		}
		if !strings.Contains(string(b), "vllm:num_requests_running") {
			t.Errorf("%s lacks the server's metrics", f)
		}
	}
	if phases["before"] != 1 || phases["after"] != 1 || phases["during"] < 1 {
		t.Errorf("scrape phases %v", phases)
	}
	// Every file is listed with its true hash.
	var listed []string
	for _, f := range ri.Files {
		listed = append(listed, f.Path)
		if sum, _ := trace.HashFile(filepath.Join(run, f.Path)); sum != f.SHA256 {
			t.Errorf("%s: listed sha256 %s, file has %s", f.Path, f.SHA256, sum)
		}
	}
	for _, want := range []string{"client.jsonl", "results/part-00000.parquet", "metrics/scrape-00000.prom"} {
		if !slices.Contains(listed, want) {
			t.Errorf("run.json files lack %s: %v", want, listed)
		}
	}
	// The same workload has the same digest.
	m, _ := trace.ReadManifest(wl)
	if workloadDigest(wl, m) != ri.WorkloadSHA256 {
		t.Error("workload digest is not stable")
	}
}

func TestWaitIdleNeedsMetricsAndUnreadyEndpointFails(t *testing.T) {
	wl := workload(t, 2, time.Millisecond)
	opts := DefaultOptions()
	opts.Target, opts.WaitIdle = "http://127.0.0.1:1", time.Second
	if _, err := Run(context.Background(), wl, filepath.Join(t.TempDir(), "r"), opts); !isOptionError(err, "WaitIdle", "Metrics") {
		t.Errorf("WaitIdle without Metrics: %v", err)
	}
	opts = DefaultOptions()
	opts.Target, opts.WaitReady = "http://127.0.0.1:1", 600*time.Millisecond
	run := filepath.Join(t.TempDir(), "r")
	if _, err := Run(context.Background(), wl, run, opts); !isOptionError(err, "WaitReady", "not ready within") {
		t.Errorf("unready endpoint: %v", err)
	}
	if _, err := os.Stat(run); err == nil {
		t.Error("a run that never started created its run dir")
	}
}

func TestBusyCountAndRedaction(t *testing.T) {
	text := []byte(`# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} 2
vllm:num_requests_running{model_name="b"} 1
vllm:num_requests_waiting{model_name="a"} 4.0
vllm:num_requests_running_total 99
sglang:num_queue_reqs 0
`)
	if n, found := busyCount(text); !found || n != 7 {
		t.Errorf("busyCount = %v, %v; want 7, true", n, found)
	}
	if _, found := busyCount([]byte("up 1\n")); found {
		t.Error("busyCount found gauges in unrelated metrics")
	}
	got := RedactArgs([]string{"replay", "--header=A=1", "--header", "B=2", "--model", "x"})
	want := []string{"replay", "--header=A=<redacted>", "--header", "B=<redacted>", "--model", "x"}
	if !slices.Equal(got, want) {
		t.Errorf("RedactArgs = %v, want %v", got, want)
	}
	got = RedactArgs([]string{"replay", "--target", "http://u:p@h:1/?api_key=k", "--metrics-url=https://h/m?token=t&x", "--label", "note=see http://a:b@c/d?e=f"})
	want = []string{"replay", "--target", "http://REDACTED@h:1/?api_key=REDACTED", "--metrics-url=https://h/m?token=REDACTED&REDACTED", "--label", "note=see http://REDACTED@c/d?e=REDACTED"}
	if !slices.Equal(got, want) {
		t.Errorf("RedactArgs = %v, want %v", got, want)
	}
}

// isOptionError reports whether err is an *opterr.Error for field whose
// message holds want.
func isOptionError(err error, field, want string) bool {
	oe, ok := opterr.As(err)
	return ok && oe.Field == field && strings.Contains(err.Error(), want)
}
