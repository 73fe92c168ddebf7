package replay

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/servetrace/servetrace/trace"
)

// TestSimMetricsEqualClientRecords replays against the simulator with faults
// and checks that its /metrics, parsed by Prometheus's own parser, count
// exactly the requests and tokens the client recorded.
func TestSimMetricsEqualClientRecords(t *testing.T) {
	o := fastSim()
	o.FailRate, o.StreamErrorRate, o.Seed = 0.1, 0.1, 11
	target := startSim(t, o)
	wl := workload(t, 150, 3*time.Millisecond)
	rows, _ := replayTo(t, target, wl, nil)
	var ok, streamErr, prompt, gen float64
	for _, r := range rows {
		switch r.Outcome {
		case trace.OutcomeOK:
			ok++
			prompt += float64(*r.UsagePromptTokens)
			gen += float64(r.ObservedOutputTokens)
		case trace.OutcomeStreamError:
			streamErr++
		}
	}
	// The simulator counts every request before the client can see it end,
	// but its engine republishes the running gauge only after the iteration
	// that sent a request's last token: poll until that gauge settles.
	var sum func(name string) float64
	var ttftSamples uint64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		sum, ttftSamples = scrapeSim(t, target)
		if sum("vllm:num_requests_running") == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("vllm:num_requests_running = %v 10 s after the run ended, want 0", sum("vllm:num_requests_running"))
		}
	}
	checks := []struct {
		name        string
		server, got float64
	}{
		{"vllm:request_success_total", sum("vllm:request_success_total"), ok},
		{"vllm:prompt_tokens_total", sum("vllm:prompt_tokens_total"), prompt},
		{"vllm:generation_tokens_total", sum("vllm:generation_tokens_total"), gen},
		{"vllm:request_aborted_total", sum("vllm:request_aborted_total"), streamErr},
		{"vllm:num_requests_running", sum("vllm:num_requests_running"), 0},
	}
	for _, c := range checks {
		if c.server != c.got {
			t.Errorf("%s = %v, the client recorded %v", c.name, c.server, c.got)
		}
	}
	if ok == 0 || streamErr == 0 {
		t.Errorf("ok %v, stream errors %v: the run should have both", ok, streamErr)
	}
	if float64(ttftSamples) < ok {
		t.Errorf("TTFT histogram has %d samples for %v successful requests", ttftSamples, ok)
	}
}

// scrapeSim reads the simulator's /metrics with Prometheus's own parser and
// returns a function summing a counter's or gauge's samples, and the TTFT
// histogram's sample count.
func scrapeSim(t *testing.T, target string) (sum func(name string) float64, ttftSamples uint64) {
	t.Helper()
	resp, err := http.Get(target + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	sum = func(name string) float64 {
		total := 0.0
		for _, m := range fams[name].GetMetric() {
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
		return total
	}
	if h := fams["vllm:time_to_first_token_seconds"].GetMetric(); len(h) > 0 {
		ttftSamples = h[0].GetHistogram().GetSampleCount()
	}
	return sum, ttftSamples
}
