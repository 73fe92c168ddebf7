package peer

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The fixtures under testdata/ are written by hand in each tool's
// documented or source-defined shape (cited at each format's reader):
// vLLM benchmarks/serve.py and benchmark_serving.py of 2024–2026,
// SGLang python/sglang/bench_serving.py (JSONL appended per run, a bare
// Infinity for an unlimited rate), AIPerf aiperf/exporters/json_exporter.py
// and record_export_results_processor.py, perf_analyzer
// src/profile_data_exporter.cc and genai_perf/export_data/json_exporter.py,
// guidellm src/guidellm/benchmark/schemas/report.py (v0.2.1's
// benchmark/benchmark.py for guidellm/v0.2-benchmarks.json), vLLM
// vllm/benchmarks/latency.py (vllm/bench-latency.json), LLMPerf
// token_benchmark_ray.py, and vLLM's
// .buildkite/performance-benchmarks/scripts/convert-results-json-to-markdown.py.
func TestReadEachFormat(t *testing.T) {
	for _, c := range []struct {
		file       string
		tool       string
		runs       int
		requests   int // of the first run; -1 for a summary
		ok         int
		completed  int64
		durationS  float64
		sendTimes  SendTimes
		allAtOnce  bool
		offered    float64
		firstFig   string // a figure the first run must carry
		firstValue float64
	}{
		{"vllm/2026-detailed.json", "vLLM bench serve", 1, 12, 11, 11, -1, SentRecorded, false, 4, "p99_ttft_ms", -1},
		{"vllm/2026-summary.json", "vLLM bench serve", 1, -1, 0, 11, -1, SentRecorded, false, 4, "mean_ttft_ms", -1},
		{"vllm/2025-detailed.json", "vLLM bench serve", 1, 8, 8, 8, 2.2103, SentSpread, false, 4, "total_token_throughput", -1},
		{"vllm/2025-summary.json", "vLLM bench serve", 1, -1, 0, 8, 2.2103, SentRecorded, false, 4, "p99_itl_ms", -1},
		{"vllm/2024-summary.json", "vLLM bench serve", 1, -1, 0, 3, 0.95, SentRecorded, true, 0, "request_inthroughput", 3.158},
		{"vllm/benchmark_results.json", "vLLM benchmark table", 2, -1, 0, -1, 0, SentRecorded, false, 0, "Median TPOT (ms)", 7.1},
		{"sglang/bench_serving.jsonl", "SGLang bench_serving", 2, -1, 0, 100, 12.5, SentRecorded, true, 0, "total_output_tokens_retokenized", 12791},
		{"aiperf/profile_export.jsonl", "AIPerf", 1, 5, 4, -1, 0, SentRecorded, false, 0, "", 0},
		{"aiperf/profile_export_aiperf.json", "AIPerf 0.3.0", 1, -1, 0, 3, 0.88, SentRecorded, false, 0, "time_to_first_token.p99", 259.8},
		{"genai-perf/profile_export.json", "GenAI-Perf (perf_analyzer 2.59.0)", 1, 3, 2, 2, 0.1, SentRecorded, false, 0, "", 0},
		{"genai-perf/profile_export_genai_perf.json", "GenAI-Perf", 1, -1, 0, -1, 0, SentRecorded, false, 0, "request_throughput.avg", 20},
		{"guidellm/benchmarks.json", "guidellm 0.7.3", 1, 3, 2, 2, 1.5, SentRecorded, false, 2, "", 0},
		{"llmperf/meta-llama-Llama-2-7b-chat-hf_550_150_individual_responses.json", "LLMPerf", 1, 4, 3, -1, 0, SentAllAtOnce, false, 0, "", 0},
		{"llmperf/meta-llama-Llama-2-7b-chat-hf_550_150_summary.json", "LLMPerf", 1, -1, 0, 3, 6, SentRecorded, false, 0, "results_number_input_tokens_max", 551},
	} {
		t.Run(c.file, func(t *testing.T) {
			runs, err := Read(filepath.Join("testdata", c.file))
			if err != nil {
				t.Fatal(err)
			}
			if len(runs) != c.runs {
				t.Fatalf("%d runs, want %d", len(runs), c.runs)
			}
			r := runs[0]
			if r.Tool != c.tool {
				t.Errorf("tool %q, want %q", r.Tool, c.tool)
			}
			if c.requests < 0 {
				if r.Requests != nil {
					t.Errorf("%d requests from a summary", len(r.Requests))
				}
			} else if len(r.Requests) != c.requests || len(r.Requests)-r.Failed() != c.ok {
				t.Errorf("%d requests, %d ok; want %d, %d", len(r.Requests), len(r.Requests)-r.Failed(), c.requests, c.ok)
			}
			if c.completed != -1 && r.Completed != c.completed {
				t.Errorf("completed %d, want %d", r.Completed, c.completed)
			}
			if c.durationS >= 0 && math.Abs(r.DurationS-c.durationS) > 1e-9 {
				t.Errorf("duration %v, want %v", r.DurationS, c.durationS)
			}
			if r.SendTimes != c.sendTimes || r.AllAtOnce != c.allAtOnce || r.OfferedRate != c.offered {
				t.Errorf("send times %v all at once %v offered %v; want %v %v %v", r.SendTimes, r.AllAtOnce, r.OfferedRate, c.sendTimes, c.allAtOnce, c.offered)
			}
			if c.firstFig != "" {
				v, ok := r.Figure(c.firstFig)
				if !ok {
					t.Errorf("no figure %s in %v", c.firstFig, r.Figures)
				} else if c.firstValue >= 0 && math.Abs(v-c.firstValue) > 1e-9 {
					t.Errorf("%s = %v, want %v", c.firstFig, v, c.firstValue)
				}
			}
		})
	}
}

// TestRecordTimes checks per-request times against the fixtures' values,
// worked by hand from each file.
func TestRecordTimes(t *testing.T) {
	read := func(file string) Run {
		t.Helper()
		runs, err := Read(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		return runs[0]
	}
	// AIPerf: records in completion order, sorted by send; the warmup
	// record is first (sent at 0), then the one sent 200 ms later with
	// TTFT 260 ms and chunk gaps 4, 4 ms; the error keeps its status.
	a := read("aiperf/profile_export.jsonl")
	if q := a.Requests[0]; !q.Warmup || q.SentNs != 0 {
		t.Errorf("AIPerf first record %+v, want the warmup one at 0", q)
	}
	if q := a.Requests[1]; q.SentNs != 200e6 || q.TTFTNs != 260e6 || len(q.GapsNs) != 2 || q.GapsNs[0] != 4e6 || q.OutputTokens != 3 || q.InputTokens != 512 || q.E2ENs != 269.5e6 {
		t.Errorf("AIPerf record sent at 200 ms: %+v", q)
	}
	if q := a.Requests[4]; q.OK || q.Status != 500 || q.InputTokens != 550 {
		t.Errorf("AIPerf error record %+v, want status 500 and its error_isl", q)
	}
	// GenAI-Perf: the [DONE] response is no token, and the request ends
	// at its last token event.
	g := read("genai-perf/profile_export.json")
	if q := g.Requests[0]; q.TTFTNs != 43e6 || q.OutputTokens != 3 || len(q.GapsNs) != 2 || q.GapsNs[1] != 11e6 || q.E2ENs != 64e6 {
		t.Errorf("GenAI-Perf first request %+v", q)
	}
	// Bundled events are tokens of one token event; a whole completion is
	// not streamed; error bodies and events are failures with their text.
	sh := read("genai-perf/shapes.json")
	if q := sh.Requests[0]; !q.OK || q.OutputTokens != 4 || q.TTFTNs != 40e6 || len(q.GapsNs) != 2 || q.GapsNs[1] != 15e6 || q.E2ENs != 65e6 {
		t.Errorf("GenAI-Perf bundled events %+v", q)
	}
	if q := sh.Requests[1]; !q.OK || q.Streamed || q.TTFTNs != -1 || q.E2ENs != 200e6 {
		t.Errorf("GenAI-Perf whole completion %+v", q)
	}
	if q := sh.Requests[2]; q.OK || !strings.Contains(q.Error, "does not exist") {
		t.Errorf("GenAI-Perf error body %+v", q)
	}
	if q := sh.Requests[3]; q.OK || q.Error != "upstream overloaded" {
		t.Errorf("GenAI-Perf error event %+v", q)
	}
	if q := g.Requests[1]; q.SentNs != 1e6 {
		t.Errorf("GenAI-Perf second request sent at %d ns, want 1 ms after the first", q.SentNs)
	}
	// guidellm: sends from request_start_time, relative to the first.
	gl := read("guidellm/benchmarks.json")
	if q := gl.Requests[1]; q.SentNs != 500e6 || q.TTFTNs != 42e6 || q.E2ENs != 80e6 || q.OutputTokens != 4 {
		t.Errorf("guidellm second request %+v", q)
	}
	if q := gl.Requests[2]; q.OK || !strings.Contains(q.Error, "500") {
		t.Errorf("guidellm errored request %+v", q)
	}
	// vLLM 2026: sends from start_times, latencies as E2E.
	v := read("vllm/2026-detailed.json")
	if q := v.Requests[0]; q.SentNs != 0 || q.E2ENs <= q.TTFTNs {
		t.Errorf("vLLM first request %+v", q)
	}
	if q := v.Requests[5]; q.OK || !strings.Contains(q.Error, "500") {
		t.Errorf("vLLM failed request %+v", q)
	}
	// SGLang with --output-details: the failed third request.
	s, err := Read("testdata/sglang/bench_serving.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if r := s[1]; len(r.Requests) != 3 || r.Requests[2].OK || r.ID != "sglang:testdata/sglang/bench_serving:2" || r.OfferedRate != 2 {
		t.Errorf("SGLang second line: %d requests, id %s, offered %v", len(r.Requests), r.ID, r.OfferedRate)
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, text string
		notPeer    bool
		want       []string
	}{
		{"unknown.json", `{"duration": 1, "completed": 3}`, true, []string{"completed, duration", "not a result file of a supported load tool"}},
		{"empty.json", "  \n", true, []string{"empty file"}},
		{"csv.json", "a,b\n1,2\n", true, []string{"not JSON"}},
		{"cut.jsonl", `{"metadata":{"request_start_ns":1},"metrics":{},"error":null}` + "\n" + `{"metadata":{"request_st`, true, []string{"cut.jsonl:2", "does not parse"}},
		{"cut-array.json", `[{"ttft_s": 1,`, true, []string{"JSON array that does not parse"}},
		{"lists.json", `{"ttfts": [0.1, 0.2], "itls": [[]], "input_lens": [1, 2], "output_lens": [1, 1]}`, false, []string{"vLLM bench serve", "ttfts 2, itls 1"}},
		{"units.jsonl", `{"metadata":{"request_start_ns":1759813207532900363},"metrics":{"time_to_first_token":{"value":1,"unit":"tokens"}},"error":null}`, false, []string{"AIPerf", "not a time unit"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, c.name)
			if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Read(p)
			if err == nil {
				t.Fatal("accepted")
			}
			if errors.Is(err, ErrNotPeer) != c.notPeer {
				t.Errorf("errors.Is(ErrNotPeer) = %v, want %v: %v", !c.notPeer, c.notPeer, err)
			}
			for _, w := range append(c.want, p) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: want %q in it", err, w)
				}
			}
		})
	}
}

// TestNullIsNoFigure: a figure the tool wrote as null (vLLM's
// request_goodput without --goodput) is not given as 0.
func TestNullIsNoFigure(t *testing.T) {
	runs, err := Read("testdata/vllm/2025-summary.json")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := runs[0].Figure("request_goodput"); ok {
		t.Errorf("request_goodput given as %v; the file says null", v)
	}
}

func TestSanitizePython(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"a": NaN, "b": Infinity, "c": -Infinity}`, `{"a": null, "b": "inf", "c": "-inf"}`},
		{`{"s": "NaN and Infinity stay", "x": 1}`, `{"s": "NaN and Infinity stay", "x": 1}`},
		{`{"s": "quote \" NaN", "r": NaN}`, `{"s": "quote \" NaN", "r": null}`},
		{`[1, 2]`, `[1, 2]`},
	} {
		if got := string(sanitizePython([]byte(c.in))); got != c.want {
			t.Errorf("sanitizePython(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestRunID(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"/x/y/run=0.json", "vllm:/x/y/run=0"},
		{"x/../z/bench.jsonl:3", "vllm:z/bench:3"},
		{"sum.json[2]", "vllm:sum[2]"},
	} {
		if got := runID("vllm", c.src); got != c.want {
			t.Errorf("runID(%s) = %s, want %s", c.src, got, c.want)
		}
	}
}

// TestUnsupportedNamed checks that files of known tools that hold no run
// are named as that tool's, with what to give instead.
func TestUnsupportedNamed(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ text, want string }{
		{`{"timeslices": [{"timeslice_index": 0}], "input_config": {}}`, "an AIPerf timeslice export"},
		{`[{"benchmark": {"name": "vLLM benchmark"}, "model": {"name": "m"}, "metric": {"name": "ttft"}}]`, "PyTorch benchmark-database record"},
		{`{"run_number": 1, "error_type": "RuntimeError", "error": "x"}`, "a vLLM sweep failure record"},
	} {
		p := filepath.Join(dir, "f.json")
		if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Read(p)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrNotPeer) {
			t.Errorf("%s: %v; want %q", c.text, err, c.want)
		}
	}
}

// TestModelsAndSummariesAsWritten (issue 41): the model a file records is
// read where its tool writes it (guidellm's args.model; AIPerf's
// input_config.model_names, beside or instead of its endpoint's), and a
// vLLM summary without completed or duration is read as a summary saying
// which it lacks, not refused as no result file.
func TestModelsAndSummariesAsWritten(t *testing.T) {
	gl, err := Read("testdata/guidellm/benchmarks.json")
	if err != nil || gl[0].Model != "Qwen/Qwen3-8B" {
		t.Errorf("guidellm model %q, %v", gl[0].Model, err)
	}
	dir := t.TempDir()
	for _, c := range []struct{ name, text, want string }{
		{"aiperf.json", `{"aiperf_version": "0.4.0", "benchmark_duration": {"unit": "sec", "avg": 10}, "request_throughput": {"unit": "requests/sec", "avg": 3},
			"input_config": {"model_names": ["meta-llama/Llama-3.1-8B-Instruct"], "endpoint": {"type": "chat"}}}`, "meta-llama/Llama-3.1-8B-Instruct"},
		{"aiperf-endpoint.json", `{"aiperf_version": "0.3.0", "benchmark_duration": {"unit": "sec", "avg": 10}, "request_throughput": {"unit": "requests/sec", "avg": 3},
			"input_config": {"endpoint": {"model_names": "m-a,m-b"}}}`, "m-a"},
	} {
		p := filepath.Join(dir, c.name)
		os.WriteFile(p, []byte(c.text), 0o644)
		runs, err := Read(p)
		if err != nil || runs[0].Model != c.want {
			t.Errorf("%s: model %q, %v; want %q", c.name, runs[0].Model, err, c.want)
		}
	}
	p := filepath.Join(dir, "vllm-summary.json")
	os.WriteFile(p, []byte(`{"backend": "vllm", "model_id": "m", "request_throughput": 8.2, "mean_ttft_ms": 41.5, "p99_ttft_ms": 80.1}`), 0o644)
	runs, err := Read(p)
	if err != nil || runs[0].HasRecords() || !strings.Contains(strings.Join(runs[0].Notes, "\n"), "has no duration or completed") {
		t.Errorf("a vLLM summary without duration and completed: %v, %+v", err, runs)
	}
}

// TestVLLMPooling reads an embedding benchmark's result: latencies, no
// tokens.
func TestVLLMPooling(t *testing.T) {
	p := filepath.Join(t.TempDir(), "embed.json")
	text := `{"backend": "openai-embeddings", "model_id": "e5", "request_rate": "inf", "duration": 1.0, "completed": 2, "total_input_tokens": 30,
	"request_throughput": 2.0, "mean_e2el_ms": 15.0, "input_lens": [10, 20], "latencies": [0.01, 0.02], "errors": ["", ""]}`
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	runs, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	if r := runs[0]; len(r.Requests) != 2 || r.Requests[1].E2ENs != 20e6 || r.Requests[1].Streamed || r.SendTimes != SentAllAtOnce {
		t.Errorf("pooling run %+v", r)
	}
}

// TestLatencyOnlyAndOlderFiles (issue 46, item 15): real files that hold
// less than a serving run are read for what they have and say what they
// lack, where they were refused or misread. `vllm bench latency
// --output-json` (vllm/benchmarks/latency.py: avg_latency, std_latency,
// latencies, percentiles, whole batches in seconds) is a summary of its
// figures noting it has no request_throughput, completed or duration; so
// is a serve summary of latency statistics alone. A guidellm 0.2 report
// (src/guidellm/benchmark/benchmark.py at v0.2.1: GenerativeBenchmark's
// args.strategy, worker.backend_model, request_loader.processor,
// total_count, requests' start_time and first_token_time) gives its model,
// backend, strategy, rate and successful count (before, the model was
// "not recorded" and the rate lost).
func TestLatencyOnlyAndOlderFiles(t *testing.T) {
	t.Run("vllm bench latency", func(t *testing.T) {
		runs, err := Read("testdata/vllm/bench-latency.json")
		if err != nil {
			t.Fatal(err)
		}
		r := runs[0]
		if len(runs) != 1 || r.HasRecords() || r.Tool != "vLLM bench latency" || r.Remedy == "" {
			t.Fatalf("runs %+v; want one summary of vLLM bench latency with a remedy", runs)
		}
		got := map[string]Figure{}
		for _, f := range r.Figures {
			got[f.Name] = f
		}
		if f := got["avg_latency"]; f.Value != 1.2843791395000002 || f.Unit != "s" {
			t.Errorf("avg_latency %+v; want 1.2843791395000002 s", f)
		}
		if f := got["p99_latency"]; f.Value != 1.3023219 || f.Unit != "s" {
			t.Errorf("p99_latency %+v; want 1.3023219 s", f)
		}
		if f := got["iterations"]; f.Value != 5 {
			t.Errorf("iterations %+v; want 5", f)
		}
		if notes := strings.Join(r.Notes, "\n"); !strings.Contains(notes, "has no request_throughput, completed or duration") || !strings.Contains(notes, "whole batches") {
			t.Errorf("notes %q", notes)
		}
	})
	t.Run("a serve summary of latency statistics alone", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "latency-only.json")
		os.WriteFile(p, []byte(`{"mean_ttft_ms": 41.5, "median_ttft_ms": 40.2, "p99_ttft_ms": 80.1, "mean_tpot_ms": 7.2, "p99_itl_ms": 9.9, "mean_e2el_ms": 512.0}`), 0o644)
		runs, err := Read(p)
		if err != nil {
			t.Fatal(err)
		}
		r := runs[0]
		if r.HasRecords() || r.Tool != "vLLM bench serve" || len(r.Figures) != 6 || !strings.Contains(strings.Join(r.Notes, "\n"), "has no request_throughput, duration or completed") {
			t.Errorf("run %+v; want a vLLM summary of 6 figures saying what it lacks", r)
		}
	})
	t.Run("guidellm 0.2", func(t *testing.T) {
		runs, err := Read("testdata/guidellm/v0.2-benchmarks.json")
		if err != nil {
			t.Fatal(err)
		}
		r := runs[0]
		if len(runs) != 1 || r.Model != "meta-llama/Llama-3.1-8B-Instruct" || r.Backend != "openai_http" || r.OfferedRate != 2 || r.Completed != 2 ||
			r.DurationS != 1.2 || !strings.HasSuffix(r.ID, "-constant") {
			t.Fatalf("run %+v; want model, backend, rate 2, 2 completed over 1.2 s, a constant strategy", r)
		}
		if len(r.Requests) != 3 || r.Failed() != 1 || r.Requests[1].SentNs != 500e6 || r.Requests[0].TTFTNs != 40e6 || r.Requests[1].E2ENs != 700e6 {
			t.Errorf("requests %+v; want 3, 1 failed, the second sent 0.5 s in with TTFT 45 ms and latency 0.7 s", r.Requests)
		}
	})
}
