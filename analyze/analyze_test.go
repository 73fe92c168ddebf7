package analyze

import (
	"bytes"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

func TestPercentileType7(t *testing.T) {
	cases := []struct {
		data []float64
		p    float64
		want float64
	}{
		{[]float64{1, 2, 3, 4}, 0.5, 2.5}, // numpy.percentile default
		{[]float64{1, 2, 3, 4}, 0.9, 3.7}, // 1 + 0.9·3
		{[]float64{1, 2, 3, 4}, 0, 1},
		{[]float64{1, 2, 3, 4}, 1, 4},
		{[]float64{7}, 0.99, 7},
		{[]float64{10, 20}, 0.25, 12.5},
	}
	for _, c := range cases {
		if got := Percentile(c.data, c.p); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Percentile(%v, %v) = %v, want %v", c.data, c.p, got, c.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 0.5)) {
		t.Error("empty data should give NaN")
	}
}

func TestOrderStatCIKnownRanks(t *testing.T) {
	cases := []struct {
		n          int
		p          float64
		lo, hi     int
		loOK, hiOK bool
	}{
		{100, 0.5, 40, 61, true, true},     // standard table for the median, n = 100
		{367, 0.99, 0, 0, true, false},     // p99 needs n ≥ 368 for an upper bound
		{368, 0.99, 0, 368, true, true},    // ... and then it is the maximum
		{71, 0.99, 0, 0, true, false},      // "with 71 samples p99 is just the maximum"
		{5, 0.5, 0, 0, false, false},       // too few for either side
		{3688, 0.999, 0, 3688, true, true}, // p99.9 needs 3,688
	}
	for _, c := range cases {
		lo, hi, loOK, hiOK := OrderStatCI(c.n, c.p, 0.95)
		if loOK != c.loOK || hiOK != c.hiOK || (c.lo != 0 && lo != c.lo) || (c.hi != 0 && hi != c.hi) {
			t.Errorf("OrderStatCI(%d, %v) = %d, %d, %v, %v; want %d, %d, %v, %v", c.n, c.p, lo, hi, loOK, hiOK, c.lo, c.hi, c.loOK, c.hiOK)
		}
	}
	if _, _, _, ok := OrderStatCI(3687, 0.999, 0.95); ok {
		t.Error("p99.9 from 3,687 samples got an upper bound")
	}
	if got := minSamplesForUpper(0.99); got != 368 {
		t.Errorf("minSamplesForUpper(0.99) = %d, want 368", got)
	}
}

// TestOrderStatCICoverage draws from a distribution with a known quantile
// and checks that the interval covers it at least 95% of the time.
func TestOrderStatCICoverage(t *testing.T) {
	const trials, n, p = 2000, 200, 0.9
	truth := -math.Log(1 - p) // Exp(1) quantile
	rng := rand.New(rand.NewPCG(1, 2))
	covered := 0
	x := make([]float64, n)
	for range trials {
		for i := range x {
			x[i] = rng.ExpFloat64()
		}
		d := Summarize(x, []float64{p * 100})
		q := d.Quantiles[0]
		if q.CILo != nil && q.CIHi != nil && *q.CILo <= truth && truth <= *q.CIHi {
			covered++
		}
	}
	rate := float64(covered) / trials
	// The exact interval is conservative: coverage at least 95%, minus
	// Monte-Carlo noise (sd ≈ 0.5%), and not absurdly wide.
	if rate < 0.94 || rate > 0.99 {
		t.Errorf("coverage %.3f, want about 0.95-0.97", rate)
	}
}

func ptr(v int64) *int64 { return &v }

// handRows are results whose metrics are computed by hand in the test.
func handRows() []trace.Result {
	ok := func(id string, sched, sent, first, done int64, tokens int64, times []int64) trace.Result {
		return trace.Result{Identity: trace.Identity{RequestID: id}, Shape: trace.Shape{Stream: true}, ScheduledNs: sched, AdmittedNs: sched,
			SentNs: ptr(sent), FirstChunkNs: ptr(first - 1e6), FirstTokenNs: ptr(first), DoneNs: ptr(done), TokenTimesNs: times,
			ObservedOutputTokens: tokens, PromptTokensSent: 100, Outcome: trace.OutcomeOK, HTTPStatus: 200}
	}
	ms := int64(1e6)
	return []trace.Result{
		// TTFT 10 ms, tokens at 10, 20, 40 ms after send: ITL 10, 20; TPOT (50-10)/2 = 20 ms; E2E 50.
		ok("a", 0, 0, 10*ms, 50*ms, 3, []int64{10 * ms, 20 * ms, 40 * ms}),
		// sent 2 ms late: TTFT 30 ms, from scheduled 32; one token: no TPOT; E2E 40.
		ok("b", 1000*ms, 1002*ms, 1032*ms, 1042*ms, 1, []int64{30 * ms}),
		{Identity: trace.Identity{RequestID: "c"}, ScheduledNs: 2000 * ms, AdmittedNs: 2000 * ms, SentNs: ptr(2000 * ms), DoneNs: ptr(2001 * ms),
			Outcome: trace.OutcomeHTTPError, HTTPStatus: 500},
		{Identity: trace.Identity{RequestID: "w"}, Warmup: true, Outcome: trace.OutcomeOK},
		{Identity: trace.Identity{RequestID: "n"}, ScheduledNs: 3000 * ms, Outcome: trace.OutcomeNotSent},
	}
}

func TestComputeHandCheckedMetrics(t *testing.T) {
	rep := &Report{Metrics: map[string]Distribution{}}
	compute(rep, columnsOf(handRows()), Options{TTFTMode: TTFTFirstContent, Percentiles: []float64{50}})
	c := rep.Requests
	if c.Total != 5 || c.Warmup != 1 || c.Counted != 4 || c.Outcomes[trace.OutcomeOK] != 2 || c.Outcomes[trace.OutcomeHTTPError] != 1 || c.Outcomes[trace.OutcomeNotSent] != 1 || c.SuccessRate != 0.5 {
		t.Fatalf("counts %+v", c)
	}
	want := map[string][]float64{ // sorted samples
		"ttft_ms":                {10, 30},
		"ttft_from_scheduled_ms": {10, 32},
		"itl_ms":                 {10, 20},
		"tpot_ms":                {20},
		"e2e_ms":                 {40, 50},
		"e2e_from_scheduled_ms":  {42, 50},
		"lateness_ms":            {0, 0, 2},
	}
	for name, w := range want {
		d := rep.Metrics[name]
		mean := 0.0
		for _, v := range w {
			mean += v / float64(len(w))
		}
		if d.N != len(w) || math.Abs(d.Mean-mean) > 1e-9 || d.Max != slices.Max(w) || math.Abs(d.Quantiles[0].Value-Percentile(w, 0.5)) > 1e-9 {
			t.Errorf("%s: %+v, want samples %v", name, d, w)
		}
	}
	// Span: first send 0 to last done 1042 ms; 2 ok requests, 4 output tokens, 200 prompt tokens.
	tp := rep.Throughput
	if math.Abs(tp.DurationS-1.042) > 1e-9 || math.Abs(tp.RequestsPerS-2/1.042) > 1e-9 ||
		math.Abs(tp.OutputTokensPerS-4/1.042) > 1e-9 || math.Abs(tp.TotalTokensPerS-204/1.042) > 1e-9 {
		t.Errorf("throughput %+v", tp)
	}
	// First-chunk mode moves TTFT 1 ms earlier.
	rep = &Report{Metrics: map[string]Distribution{}}
	compute(rep, columnsOf(handRows()), Options{TTFTMode: TTFTFirstChunk, Percentiles: []float64{50}})
	if d := rep.Metrics["ttft_ms"]; d.Mean != 19 {
		t.Errorf("first-chunk TTFT mean %v, want 19", d.Mean)
	}
}

func TestAnalyzeRunDirAndTable(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	w, err := trace.NewResultWriter(run, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range handRows() {
		w.Write(r)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	ri := trace.RunInfo{RunID: "r1", Complete: false, Reason: "interrupted after 4 of 5", ClientSaturated: true, MaxLatenessMs: 5, Lateness: trace.LatenessSummary{P99Ms: 9},
		Client: trace.ClientHealth{CPUUtilization: 0.95, SchedLatencyP99Ms: 4}, GOMAXPROCS: 2}
	if err := trace.WriteJSONAtomic(filepath.Join(run, trace.RunInfoName), ri); err != nil {
		t.Fatal(err)
	}
	rep, err := Analyze([]string{run}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, rep); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"PARTIAL", "http_error 1", "not_sent 1", "ttft", "p99", "saturated", "is partial", "cannot bound", "client was busy (CPU 95% of 2 cores"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if _, err := Analyze([]string{t.TempDir()}, Options{}); err == nil || !strings.Contains(err.Error(), "not a servetrace run directory") {
		t.Errorf("analyze of an empty dir: %v", err)
	}
	if _, err := Analyze([]string{run}, Options{TTFTMode: "first-byte"}); err == nil || !strings.Contains(err.Error(), "TTFTMode") {
		t.Errorf("bad ttft mode: %v", err)
	}
}

func BenchmarkSummarize1M(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	x := make([]float64, 1_000_000)
	buf := make([]float64, len(x))
	for i := range x {
		x[i] = rng.ExpFloat64()
	}
	b.ReportAllocs()
	for b.Loop() {
		copy(buf, x)
		Summarize(buf, []float64{50, 90, 95, 99, 99.9})
	}
	b.ReportMetric(float64(len(x)*b.N)/b.Elapsed().Seconds(), "samples/s")
}

// TestTruncatedPromptsWarnFirst: a run whose server cut prompts says so in
// the report's first lines, in the table and in Markdown.
func TestTruncatedPromptsWarnFirst(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeSyntheticRun(t, dir, 50)
	info, err := trace.ReadRunInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	info.PromptTruncation = &trace.PromptTruncation{Requests: 12, Checked: 50, MaxDeficitTokens: 4162, P50DeficitTokens: 900}
	if err := trace.WriteJSONAtomic(filepath.Join(dir, trace.RunInfoName), info); err != nil {
		t.Fatal(err)
	}
	rep, err := Analyze([]string{dir}, Options{Bootstrap: BootstrapOptions{Resamples: 200}})
	if err != nil {
		t.Fatal(err)
	}
	var table, md strings.Builder
	WriteTable(&table, rep)
	WriteMarkdown(&md, rep)
	for name, text := range map[string]string{"table": table.String(), "markdown": md.String()} {
		head := strings.Join(strings.SplitN(text, "\n", 5)[:4], "\n")
		if !strings.Contains(head, "the server cut 12 of 50 prompts (by up to 4162 tokens") {
			t.Errorf("%s: the first lines do not warn of truncation:\n%s", name, head)
		}
	}
}
