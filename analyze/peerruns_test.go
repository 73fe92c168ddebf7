package analyze

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/analyze/peer"
	"github.com/servetrace/servetrace/trace"
)

// numpyPercentile is numpy.percentile's default (linear) method, written
// here apart from the package's own, as the independent truth.
func numpyPercentile(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	h := float64(len(s)-1) * p / 100
	lo := int(math.Floor(h))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (h-float64(lo))*(s[hi]-s[lo])
}

// vllmFile is the part of a vLLM result the tests check against.
type vllmFile struct {
	Duration         float64     `json:"duration"`
	RequestTput      float64     `json:"request_throughput"`
	OutputTput       float64     `json:"output_throughput"`
	TotalTput        float64     `json:"total_token_throughput"`
	MeanTPOT         float64     `json:"mean_tpot_ms"`
	TTFTs            []float64   `json:"ttfts"`
	ITLs             [][]float64 `json:"itls"`
	Latencies        []float64   `json:"latencies"`
	Errors           []string    `json:"errors"`
	OutputLens       []int64     `json:"output_lens"`
	InputLens        []int64     `json:"input_lens"`
	StartTimes       []float64   `json:"start_times"`
	RequestRateInfOK any         `json:"request_rate"`
}

func readVLLMFile(t *testing.T, path string) vllmFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v vllmFile
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestVLLMDetailedMatchesTheFile: for detailed vLLM results of 2025 (no
// start_times) and 2026 (start_times, latencies, a failure), throughput
// equals the file's own figures to 0.1%, and the TTFT, ITL and E2E
// percentiles equal numpy's on the file's own lists.
func TestVLLMDetailedMatchesTheFile(t *testing.T) {
	ps := []float64{50, 90, 99}
	for _, file := range []string{"peer/testdata/vllm/2026-detailed.json", "peer/testdata/vllm/2025-detailed.json", "testdata/vllm/rate-inf-2024.json"} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			v := readVLLMFile(t, file)
			rep, err := Analyze([]string{file}, Options{Percentiles: ps, Bootstrap: BootstrapOptions{Resamples: 100}})
			if err != nil {
				t.Fatal(err)
			}
			th := rep.Throughput
			for _, c := range []struct {
				name      string
				got, want float64
			}{{"duration", th.DurationS, v.Duration}, {"request throughput", th.RequestsPerS, v.RequestTput},
				{"output throughput", th.OutputTokensPerS, v.OutputTput}, {"total token throughput", th.TotalTokensPerS, v.TotalTput}} {
				if c.want > 0 && math.Abs(c.got-c.want) > 0.001*c.want {
					t.Errorf("%s %v, want the file's %v within 0.1%%", c.name, c.got, c.want)
				}
			}
			var ttft, itl, e2e []float64
			for i, x := range v.TTFTs {
				if len(v.Errors) > 0 && v.Errors[i] != "" {
					continue
				}
				ttft = append(ttft, x*1e3)
				end := x
				for _, g := range v.ITLs[i] {
					itl = append(itl, g*1e3)
					end += g
				}
				if len(v.Latencies) > 0 {
					end = v.Latencies[i]
				}
				e2e = append(e2e, end*1e3)
			}
			for name, want := range map[string][]float64{"ttft_ms": ttft, "itl_ms": itl, "e2e_ms": e2e} {
				d := rep.Metrics[name]
				if d.N != len(want) {
					t.Errorf("%s n %d, want %d", name, d.N, len(want))
					continue
				}
				for j, q := range d.Quantiles {
					if w := numpyPercentile(want, ps[j]); math.Abs(q.Value-w) > 1e-6*math.Max(1, w) {
						t.Errorf("%s p%g = %v, numpy gives %v", name, ps[j], q.Value, w)
					}
				}
			}
			// With per-request latencies, TPOT is vLLM's own: (latency − TTFT) / (output − 1).
			if len(v.Latencies) > 0 {
				if d := rep.Metrics["tpot_ms"]; math.Abs(d.Mean-v.MeanTPOT) > 0.001*v.MeanTPOT {
					t.Errorf("mean TPOT %v, the file says %v", d.Mean, v.MeanTPOT)
				}
			}
			if _, err := json.Marshal(rep); err != nil {
				t.Errorf("the report does not encode: %v", err)
			}
		})
	}
}

// TestPeerSummariesAsGiven: summary-only files come back as the tool's
// own figures, with the note that no interval can be computed, in the
// table and the JSON.
func TestPeerSummariesAsGiven(t *testing.T) {
	for _, c := range []struct{ file, figure, value string }{
		{"peer/testdata/vllm/2026-summary.json", "p99_ttft_ms", ""},
		{"peer/testdata/vllm/2024-summary.json", "request_inthroughput", "3.158"},
		{"peer/testdata/vllm/2025-summary.json", "p99_itl_ms", ""},
		{"peer/testdata/aiperf/profile_export_aiperf.json", "time_to_first_token.p99", "259.8"},
		{"peer/testdata/genai-perf/profile_export_genai_perf.json", "request_throughput.avg", "20"},
		{"peer/testdata/llmperf/meta-llama-Llama-2-7b-chat-hf_550_150_summary.json", "results_ttft_s_mean", "0.405"},
		{"peer/testdata/vllm/benchmark_results.json", "Tput (req/s)", "24.9"},
		{"peer/testdata/vllm/bench-latency.json", "p99_latency", "1.3023219"},
	} {
		t.Run(filepath.Base(c.file), func(t *testing.T) {
			rep, err := Analyze([]string{c.file}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Given) == 0 || len(rep.Runs) != 0 {
				t.Fatalf("given %d, runs %d; want the summary given and no run", len(rep.Given), len(rep.Runs))
			}
			var buf bytes.Buffer
			if err := WriteTable(&buf, rep); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			for _, w := range []string{c.figure, c.value, "as given", "no interval"} {
				if !strings.Contains(out, w) {
					t.Errorf("table lacks %q:\n%s", w, out)
				}
			}
			buf.Reset()
			if err := WriteMarkdown(&buf, rep); err != nil || !strings.Contains(buf.String(), c.figure) {
				t.Errorf("markdown (%v) lacks %s:\n%s", err, c.figure, buf.String())
			}
			if _, err := json.Marshal(rep); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestPeerRecordsAnalyzed: each tool's per-request file gets the metrics
// of a servetrace run; the TTFT median is worked by hand from each
// fixture (AIPerf's warmup record excluded).
func TestPeerRecordsAnalyzed(t *testing.T) {
	for _, c := range []struct {
		file           string
		counted, ok    int
		ttftMedian     float64
		e2eMax         float64
		itl            bool
		noteFragment   string
		runs, warmupEx int
	}{
		// TTFTs 250, 260, 240 ms; latency = TTFT + gaps + 1.5 ms: max 250 + 4×5 + 1.5.
		{"peer/testdata/aiperf/profile_export.jsonl", 4, 3, 250, 271.5, true, "", 1, 1},
		// TTFTs 43 and 50 ms; the first ends at its last token, 64 ms.
		{"peer/testdata/genai-perf/profile_export.json", 3, 2, 46.5, 64, true, "output tokens are counted as streamed responses", 1, 0},
		{"peer/testdata/guidellm/benchmarks.json", 3, 2, 41, 80, false, "keeps no token times", 1, 0},
		{"peer/testdata/llmperf/meta-llama-Llama-2-7b-chat-hf_550_150_individual_responses.json", 4, 3, 405, 3720, false, "keeps no send or token times", 1, 0},
		// The details line of the SGLang file: TTFTs 39, 41 ms.
		{"peer/testdata/sglang/bench_serving.jsonl", 3, 2, 40, 41 + 33.4, true, "", 1, 0},
	} {
		t.Run(filepath.Base(c.file), func(t *testing.T) {
			rep, err := Analyze([]string{c.file}, Options{Percentiles: []float64{50}, Bootstrap: BootstrapOptions{Resamples: 100}})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Runs) != c.runs || rep.Requests.Counted != c.counted || rep.Requests.Outcomes[trace.OutcomeOK] != c.ok || rep.Requests.Warmup != c.warmupEx {
				t.Errorf("runs %d, requests %+v; want %d runs, %d counted, %d ok, %d warmup", len(rep.Runs), rep.Requests, c.runs, c.counted, c.ok, c.warmupEx)
			}
			if m := rep.Metrics["ttft_ms"].Median; math.Abs(m-c.ttftMedian) > 1e-6 {
				t.Errorf("TTFT median %v, want %v", m, c.ttftMedian)
			}
			if m := rep.Metrics["e2e_ms"].Max; math.Abs(m-c.e2eMax) > 1e-6 {
				t.Errorf("E2E max %v, want %v", m, c.e2eMax)
			}
			if _, has := rep.Metrics["itl_ms"]; has != c.itl {
				t.Errorf("ITL reported %v, want %v", has, c.itl)
			}
			if c.noteFragment != "" && !strings.Contains(strings.Join(rep.Notes, "\n"), c.noteFragment) {
				t.Errorf("notes %q lack %q", rep.Notes, c.noteFragment)
			}
			if rep.Runs[0].Tool == "" {
				t.Error("the run summary does not name its tool")
			}
			// LLMPerf keeps no send times or duration: no rate is made up.
			if untimedFile := strings.Contains(c.file, "llmperf"); untimedFile != (rep.Throughput.RequestsPerS == 0) {
				t.Errorf("throughput %v req/s; want none exactly when the file has no timing", rep.Throughput.RequestsPerS)
			}
		})
	}
}

// TestVLLMSweepDirectory: a `vllm bench sweep serve` directory expands to
// its run=N.json files, without the summary.json that repeats them or
// the warmup run; every run=0.json stays a run of its own, and they pool
// as repeats.
func TestVLLMSweepDirectory(t *testing.T) {
	dirs, err := ExpandRunDirs("peer/testdata/vllm/sweep")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range dirs {
		names = append(names, filepath.Base(filepath.Dir(d))+"/"+filepath.Base(d))
	}
	want := []string{"SERVE--max_num_seqs=64-BENCH--request_rate=4/run=0.json", "SERVE--max_num_seqs=64-BENCH--request_rate=4/run=1.json",
		"SERVE--max_num_seqs=64-BENCH--request_rate=8/run=0.json"}
	if !slices.Equal(names, want) {
		t.Fatalf("expanded to %v, want %v", names, want)
	}
	rep, err := Analyze(dirs, Options{Percentiles: []float64{50}, Bootstrap: BootstrapOptions{Resamples: 100}})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, r := range rep.Runs {
		ids[r.RunID] = true
	}
	if len(rep.Runs) != 3 || len(ids) != 3 || rep.Repeats == nil || rep.Requests.Counted != 36 {
		t.Errorf("%d runs, %d ids, repeats %v, counted %d; want three runs of 12 as repeats", len(rep.Runs), len(ids), rep.Repeats != nil, rep.Requests.Counted)
	}
	if _, err := ExpandRunDirs(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no result file of a supported tool") {
		t.Errorf("an empty directory: %v", err)
	}
}

// writeVLLMResult writes a detailed vLLM result of n requests with
// TTFT 40 + (i mod 20) ms scaled by f, 4 output tokens at 10·f ms gaps.
func writeVLLMResult(t *testing.T, path string, n int, f float64) {
	t.Helper()
	res := map[string]any{"backend": "vllm", "model_id": "m", "request_rate": 10.0, "duration": float64(n) / 10, "completed": n,
		"request_throughput": 10.0, "mean_ttft_ms": 1.0}
	var in, out []int64
	var ttfts, starts []float64
	var itls [][]float64
	for i := range n {
		in, out = append(in, int64(100+i%7)), append(out, 4)
		ttfts = append(ttfts, (40+float64(i%20))*f/1e3)
		itls = append(itls, []float64{0.01 * f, 0.01 * f, 0.01 * f})
		starts = append(starts, 1000+float64(i)/10)
	}
	res["input_lens"], res["output_lens"], res["ttfts"], res["itls"], res["start_times"] = in, out, ttfts, itls, starts
	b, _ := json.Marshal(res)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// servetraceRunLike writes a servetrace run of the same requests as
// writeVLLMResult(n, f).
func servetraceRunLike(t *testing.T, dir string, n int, f float64) {
	t.Helper()
	var rows []trace.Result
	ms := 1e6
	for i := range n {
		sent := int64(i) * 100e6
		ft := sent + int64((40+float64(i%20))*f*ms)
		times := []int64{ft - sent}
		for k := 1; k <= 3; k++ {
			times = append(times, ft-sent+int64(float64(k)*10*f*ms))
		}
		rows = append(rows, trace.Result{Identity: trace.Identity{RequestID: string(rune('a' + i%26))}, Shape: trace.Shape{Stream: true}, ScheduledNs: sent, AdmittedNs: sent,
			SentNs: ptr(sent), FirstChunkNs: ptr(ft), FirstTokenNs: ptr(ft), DoneNs: ptr(sent + times[3]), TokenTimesNs: times,
			ObservedOutputTokens: 4, PromptTokensSent: int64(100 + i%7), Outcome: trace.OutcomeOK, HTTPStatus: 200})
	}
	writeRun(t, dir, "st", rows, 10)
}

// TestCompareVLLMWithServetraceRun: a vLLM bench result beside a
// servetrace run of the same requests gives verdicts (B's doubled
// latencies are worse), with the warning that one side has no workload
// sha256; a summary-only side is refused with the reason.
func TestCompareVLLMWithServetraceRun(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "vllm.json"), filepath.Join(dir, "run")
	writeVLLMResult(t, a, 200, 1)
	servetraceRunLike(t, b, 200, 2)
	aa, err := ExpandRunDirs(a)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Compare(aa, []string{b}, CompareOptions{Bootstrap: BootstrapOptions{Resamples: 200, Seed: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Comparable {
		t.Fatalf("not comparable: %v", c.Reasons)
	}
	worse := 0
	for _, r := range c.Rows {
		if r.Verdict == VerdictWorse {
			worse++
		}
	}
	if worse == 0 {
		t.Errorf("no row worse for doubled latencies: %+v", c.Rows)
	}
	if !strings.Contains(strings.Join(c.Warnings, "\n"), "record no workload sha256") {
		t.Errorf("warnings %q lack the missing-sha note", c.Warnings)
	}
	if _, err := Compare([]string{"peer/testdata/vllm/2026-summary.json"}, []string{b}, CompareOptions{}); err == nil || !strings.Contains(err.Error(), "--save-detailed") {
		t.Errorf("a summary side: %v; want the reason and the flag", err)
	}
	if _, err := Compare([]string{"peer/testdata/aiperf/profile_export_aiperf.json"}, []string{b}, CompareOptions{}); err == nil || !strings.Contains(err.Error(), "profile_export.jsonl") {
		t.Errorf("an AIPerf summary side: %v; want the file to give instead", err)
	}
	if _, err := FindEnvelope([]string{"peer/testdata/vllm/2026-summary.json", "peer/testdata/vllm/2025-summary.json"}, EnvelopeOptions{}); err == nil || !strings.Contains(err.Error(), "an envelope needs them") {
		t.Errorf("an envelope of summaries: %v; want them refused, not ignored", err)
	}
}

// TestArtifactDirectory: a tool's directory holding both its per-request
// file and its summary expands to the per-request file alone, and two
// directories of the same file names stay two runs.
func TestArtifactDirectory(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a", "b"} {
		for _, f := range []string{"profile_export.jsonl", "profile_export_aiperf.json"} {
			b, err := os.ReadFile(filepath.Join("peer/testdata/aiperf", f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(root, d, f), string(b))
		}
	}
	dirs, err := ExpandRunDirs(root + "/")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) != 2 || filepath.Base(dirs[0]) != "profile_export.jsonl" || filepath.Base(dirs[1]) != "profile_export.jsonl" {
		t.Fatalf("expanded to %v, want each directory's per-request file", dirs)
	}
	rep, err := Analyze(dirs, Options{Bootstrap: BootstrapOptions{Resamples: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 || rep.Runs[0].RunID == rep.Runs[1].RunID || rep.Repeats == nil {
		t.Errorf("runs %d (ids %v), repeats %v: want two runs as repeats", len(rep.Runs), []string{rep.Runs[0].RunID}, rep.Repeats != nil)
	}
}

// TestPeerMeanNote: where a file's own mean TPOT differs from the one its
// records give by more than 0.1% (vLLM counts TPOT to its own end of
// request, which a file without latencies does not hold), a note says so;
// within 0.1% (the file's microseconds), none.
func TestPeerMeanNote(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		scale float64
		note  bool
	}{{1.005, true}, {1.0005, false}} {
		p := filepath.Join(dir, "r.json")
		// Two requests, 3 output tokens, gaps 10 and 20 ms: TPOT 15 ms each.
		text := `{"backend": "vllm", "model_id": "m", "request_rate": "inf", "duration": 1, "completed": 2, "request_throughput": 2,
			"input_lens": [5, 5], "output_lens": [3, 3], "ttfts": [0.1, 0.1], "itls": [[0.01, 0.02], [0.01, 0.02]], "errors": ["", ""],
			"mean_tpot_ms": ` + strconv.FormatFloat(15*c.scale, 'f', 6, 64) + `}`
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		rep, err := Analyze([]string{p}, Options{Bootstrap: BootstrapOptions{Resamples: 100}})
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Contains(strings.Join(rep.Notes, "\n"), "mean TPOT 15.00 ms from its records, where the file's mean_tpot_ms says")
		if got != c.note {
			t.Errorf("file TPOT %.3f: note %v, want %v (%q)", 15*c.scale, got, c.note, rep.Notes)
		}
	}
}

// TestPeerOutcome: a peer failure is classed by its status, else by the
// exception text the tool kept.
func TestPeerOutcome(t *testing.T) {
	for _, c := range []struct {
		q    peer.Request
		want string
	}{
		{peer.Request{Status: 503, Error: "Service Unavailable"}, trace.OutcomeHTTPError},
		{peer.Request{Error: "aiohttp.client_exceptions.ServerTimeoutError: Timeout on reading data from socket"}, trace.OutcomeTimeout},
		{peer.Request{Error: "ClientConnectorError: Cannot connect to host localhost:8000"}, trace.OutcomeConnError},
		{peer.Request{Error: "ConnectionResetError: [Errno 104] Connection reset by peer"}, trace.OutcomeConnError},
		{peer.Request{Cancelled: true, Status: 499}, trace.OutcomeCancelled},
		{peer.Request{Error: "Traceback (most recent call last): ... ClientResponseError: 500"}, trace.OutcomeHTTPError},
	} {
		if got := peerOutcome(c.q); got != c.want {
			t.Errorf("%+v: %s, want %s", c.q, got, c.want)
		}
	}
}

// TestOlderGuidellmReportSaysWhatItRan (issue 46, item 15): a guidellm
// 0.2 report is run against its worker's backend and model at its
// strategy's rate (before: "against not recorded", "no rate recorded").
func TestOlderGuidellmReportSaysWhatItRan(t *testing.T) {
	rep, err := Analyze([]string{"peer/testdata/guidellm/v0.2-benchmarks.json"}, Options{Bootstrap: BootstrapOptions{Resamples: 50}})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	if want := "against openai_http meta-llama/Llama-3.1-8B-Instruct: offered 2.00 req/s, completed 1.67 req/s"; !strings.Contains(b.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, b.String())
	}
}
