package analyze

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/loghist"
)

// TestHostilePeerFiles (issue 42, 4 and 5): other tools' files that are
// long or hold impossible values, analyzed end to end. A vLLM file of
// more requests than are held is streamed in fixed memory, with the held
// analysis's figures (before, it was read whole: 3.0 GB of RSS for 3M
// requests); a completed count of 2e9 beside a dozen records gives no
// rate of billions; an LLMPerf latency of 1e308 does not become the
// request's end.
func TestHostilePeerFiles(t *testing.T) {
	dir := t.TempDir()
	t.Run("a file longer than the rows held is streamed", func(t *testing.T) {
		path := filepath.Join(dir, "long.json")
		writeBigVLLMResult(t, path, 30_000)
		opts := Options{Bootstrap: BootstrapOptions{Resamples: 200, Seed: 1}}
		held, err := Analyze([]string{path}, opts)
		if err != nil {
			t.Fatal(err)
		}
		opts.InMemoryRows = 10_000
		got, err := Analyze([]string{path}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if held.Streamed != nil || got.Streamed == nil || got.Streamed.Rows != 30_000 {
			t.Fatalf("streamed: held %+v, limited %+v; want the limited analysis streamed over 30,000 rows", held.Streamed, got.Streamed)
		}
		if !reflect.DeepEqual(held.Requests, got.Requests) || !reflect.DeepEqual(held.Throughput, got.Throughput) {
			t.Errorf("held %+v %+v, streamed %+v %+v", held.Requests, held.Throughput, got.Requests, got.Throughput)
		}
		for _, m := range []string{"ttft_ms", "e2e_ms", "itl_ms", "tpot_ms"} {
			h, g := held.Metrics[m], got.Metrics[m]
			if h.N != g.N || !near(g.Median, h.Median, loghist.RelErr) || !near(g.Max, h.Max, 1e-12) {
				t.Errorf("%s: held n %d median %g max %g, streamed %d %g %g", m, h.N, h.Median, h.Max, g.N, g.Median, g.Max)
			}
		}
	})
	t.Run("completed 2e9 beside 12 records", func(t *testing.T) {
		b, err := os.ReadFile("peer/testdata/vllm/2026-detailed.json")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "completed.json")
		os.WriteFile(path, []byte(strings.Replace(string(b), `"completed": 11`, `"completed": 2e9`, 1)), 0o644)
		rep, err := Analyze([]string{path}, Options{Bootstrap: BootstrapOptions{Resamples: 100}})
		if err != nil {
			t.Fatal(err)
		}
		if r := rep.Runs[0].AchievedRate; r > 100 {
			t.Errorf("achieved %g req/s from 12 requests over 1.26 s", r)
		}
		if !strings.Contains(strings.Join(rep.Notes, "\n"), "it says 2000000000 requests completed but holds 12 records") {
			t.Errorf("notes %q", rep.Notes)
		}
	})
	t.Run("an LLMPerf latency of 1e308", func(t *testing.T) {
		path := filepath.Join(dir, "x_individual_responses.json")
		os.WriteFile(path, []byte(`[{"error_code": null, "error_msg": "", "ttft_s": 0.4, "end_to_end_latency_s": 1e308, "number_input_tokens": 5, "number_output_tokens": 3},
			{"error_code": null, "error_msg": "", "ttft_s": 0.3, "end_to_end_latency_s": 0.9, "number_input_tokens": 5, "number_output_tokens": 3}]`), 0o644)
		rep, err := Analyze([]string{path}, Options{Bootstrap: BootstrapOptions{Resamples: 100}})
		if err != nil {
			t.Fatal(err)
		}
		if e := rep.Metrics["e2e_ms"]; e.N != 1 || math.Abs(e.Max-900) > 1e-9 {
			t.Errorf("E2E n %d max %g; want only the valid request's 900 ms", e.N, e.Max)
		}
		if !strings.Contains(strings.Join(rep.Notes, "\n"), "1 record(s) with a latency out of range") {
			t.Errorf("notes %q", rep.Notes)
		}
	})
}

// TestPeerFilesSayWhatTheyHold (issue 41): a result file whose requests
// all failed says so, rather than show zeros as latencies; a peer file's
// report holds no client lateness (the tool records none), and its JSON
// gives null, not 0, for the figures the file does not hold; a mean E2E
// from the records that strays from the file's own is noted, with why.
func TestPeerFilesSayWhatTheyHold(t *testing.T) {
	dir := t.TempDir()
	failed := filepath.Join(dir, "failed.json")
	os.WriteFile(failed, []byte(`{"backend": "vllm", "model_id": "m", "request_rate": 4.0, "duration": 3.0, "completed": 0, "request_throughput": 0.0, "mean_ttft_ms": 0.0,
		"input_lens": [10, 10, 10], "output_lens": [0, 0, 0], "ttfts": [0.0, 0.0, 0.0], "itls": [[], [], []], "start_times": [1.0, 1.5, 2.0],
		"errors": ["Bad Gateway", "Bad Gateway", "Bad Gateway"]}`), 0o644)
	rep, err := Analyze([]string{failed}, Options{Bootstrap: BootstrapOptions{Resamples: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "every one of the 3 counted requests failed (http_error 3)") {
		t.Errorf("notes %q", rep.Notes)
	}
	if _, ok := rep.Metrics["lateness_ms"]; ok {
		t.Error("a peer file's report holds a client lateness of 0")
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Throughput json.RawMessage `json:"throughput"`
		Runs       []map[string]json.RawMessage
	}
	json.Unmarshal(b, &back)
	if string(back.Throughput) != "null" || string(back.Runs[0]["lateness"]) != "null" || string(back.Runs[0]["client"]) != "null" || string(back.Runs[0]["offered_rate_rps"]) == "null" {
		t.Errorf("JSON throughput %s, run %v: want null for what the file does not hold", back.Throughput, back.Runs[0])
	}
	e2e := filepath.Join(dir, "e2e.json")
	os.WriteFile(e2e, []byte(`{"backend": "vllm", "model_id": "m", "request_rate": "inf", "duration": 1, "completed": 2, "request_throughput": 2, "mean_latency_ms": 130.65,
		"input_lens": [5, 5], "output_lens": [3, 3], "ttfts": [0.1, 0.1], "itls": [[0.01, 0.02], [0.01, 0.02]], "errors": ["", ""]}`), 0o644)
	rep, err = Analyze([]string{e2e}, Options{Bootstrap: BootstrapOptions{Resamples: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "mean E2E 130.00 ms from its records, where the file's mean_latency_ms says 130.65 ms (-0.50%)") {
		t.Errorf("notes %q", rep.Notes)
	}
}
