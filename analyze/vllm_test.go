package analyze

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

// TestVLLMResultIn reads a hand-made vllm bench serve --save-detailed file
// and checks our figures against values computed by hand, and the --format
// vllm names against the fields vLLM itself wrote.
func TestVLLMResultIn(t *testing.T) {
	rep, err := Analyze([]string{"testdata/vllm/detailed.json"}, Options{Percentiles: []float64{50, 99}, Bootstrap: BootstrapOptions{Resamples: 200}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests.Counted != 5 || rep.Requests.Outcomes["ok"] != 4 || rep.Requests.Outcomes["http_error"] != 1 {
		t.Fatalf("requests %+v", rep.Requests)
	}
	ttft := rep.Metrics["ttft_ms"]
	// ok TTFTs 100, 200, 300, 400 ms: median 250, type-7 p99 = 300 + 0.97·100 = 397.
	if ttft.N != 4 || math.Abs(ttft.Median-250) > 1e-6 || math.Abs(ttft.Quantiles[1].Value-397) > 1e-6 {
		t.Errorf("ttft n %d median %v p99 %v, want 4, 250, 397", ttft.N, ttft.Median, ttft.Quantiles[1].Value)
	}
	if itl := rep.Metrics["itl_ms"]; itl.N != 9 {
		t.Errorf("%d ITL gaps, want 9 (3+2+1+3)", itl.N)
	}
	// E2E of the first request: 100 + 10 + 20 + 30 ms.
	if e := rep.Metrics["e2e_ms"]; math.Abs(e.Max-460) > 1e-6 {
		t.Errorf("e2e max %v, want 460 (400 + 3×20)", e.Max)
	}
	v := VLLMFormat(rep)
	for key, want := range map[string]float64{"mean_ttft_ms": 250, "median_ttft_ms": 250, "p99_ttft_ms": 397, "std_ttft_ms": math.Sqrt(12500),
		"completed": 4, "failed": 1, "total_output_tokens": 13} {
		var got float64
		switch x := v[key].(type) {
		case float64:
			got = x
		case int:
			got = float64(x)
		case int64:
			got = float64(x)
		default:
			t.Errorf("%s: %T", key, v[key])
			continue
		}
		if math.Abs(got-want) > 0.01 {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}
	if _, ok := v["request_goodput"]; !ok {
		t.Error("request_goodput missing (vLLM writes null without an SLO)")
	}
}

func TestVLLMResultErrors(t *testing.T) {
	if _, err := Analyze([]string{"testdata/vllm/missing.json"}, Options{}); err == nil {
		t.Error("a missing file was accepted")
	}
	dir := t.TempDir() + "/summary.json"
	writeFile(t, dir, `{"duration": 1, "completed": 3}`)
	_, err := Analyze([]string{dir}, Options{})
	if err == nil || !containsAll(err.Error(), dir, "completed, duration", "not a result file of a supported load tool", "vLLM bench serve") {
		t.Errorf("an object of no known tool: %v; want its keys and the tools read, naming the file", err)
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// TestVLLMRateInfWithoutStartTimes reads a result in the shape vLLM's
// benchmarks/benchmark_serving.py wrote in 2024 (save_result: no
// start_times; request_rate "inf" when every request is sent at once): the
// sends are all at 0, the throughput is the file's own (completed /
// duration: 8.0 req/s, 28 output tok/s), and the report encodes as JSON
// (an offered rate of +Inf does not).
func TestVLLMRateInfWithoutStartTimes(t *testing.T) {
	rep, err := Analyze([]string{"testdata/vllm/rate-inf-2024.json"}, Options{Percentiles: []float64{50}, Bootstrap: BootstrapOptions{Resamples: 100}})
	if err != nil {
		t.Fatal(err)
	}
	th := rep.Throughput // equal to the file's figures: TestVLLMDetailedMatchesTheFile
	if lo, hi := th.RequestsPerSCI[0], th.RequestsPerSCI[1]; !(lo < 8 && hi > 8) {
		t.Errorf("request throughput interval [%v, %v] does not hold 8", lo, hi)
	}
	if r := rep.Runs[0]; !r.AllAtOnce || r.OfferedRate != 0 || math.Abs(r.AchievedRate-8) > 1e-9 {
		t.Errorf("run summary: all at once %v, offered %v, achieved %v; want true, 0, 8", r.AllAtOnce, r.OfferedRate, r.AchievedRate)
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "every request is taken as sent at t = 0") {
		t.Errorf("no note on the sends: %q", rep.Notes)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Errorf("the report does not encode as JSON: %v", err)
	}
	// Latencies are the file's lists: TTFT median of 50, 80, 120, 150 ms.
	if m := rep.Metrics["ttft_ms"].Median; math.Abs(m-100) > 1e-6 {
		t.Errorf("TTFT median %v, want 100", m)
	}
}
