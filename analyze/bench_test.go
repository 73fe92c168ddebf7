package analyze

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// writeSyntheticRun writes a run directory of n successful streamed
// results with 16 content events each: lognormal TTFT, gamma-ish gaps.
func writeSyntheticRun(tb testing.TB, dir string, n int) {
	tb.Helper()
	w, err := trace.NewResultWriter(dir, 128<<10)
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		w.Write(syntheticResult(i, rng))
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	ri := trace.RunInfo{SchemaVersion: 1, RunID: "bench", Complete: true, Parts: w.Parts()}
	if err := trace.WriteJSONAtomic(filepath.Join(dir, trace.RunInfoName), ri); err != nil {
		tb.Fatal(err)
	}
}

// syntheticResult is request i of a synthetic run, sent every millisecond.
func syntheticResult(i int, rng *rand.Rand) trace.Result {
	sched := int64(i) * 1e6
	sent := sched + 100e3
	first := sent + int64(200e6*math.Exp(0.5*rng.NormFloat64()))
	times := make([]int64, 16)
	t := first - sent
	for k := range times {
		times[k] = t
		t += int64(20e6 * (0.5 + rng.ExpFloat64()*0.5))
	}
	done := sent + times[15] + 1e5
	r := trace.Result{Identity: trace.Identity{RequestID: "r" + strconv.Itoa(i), Tenant: "t" + strconv.Itoa(i%3), Turn: int32(i % 4), Model: "m"},
		ScheduledNs: sched, AdmittedNs: sched, SentNs: &sent,
		FirstChunkNs: &first, FirstTokenNs: &first, DoneNs: &done, TokenTimesNs: times, ObservedOutputTokens: 16, PromptTokensSent: 512,
		HTTPStatus: 200, Outcome: trace.OutcomeOK, RunID: "bench", ObservedFinishReason: "length",
		Shape: trace.Shape{Stream: true, InputTokens: 512, OutputTokens: 16, MaxTokens: 16}}
	if i%5 == 0 {
		r.Features = []string{"tools", "json"}
		r.PrefixBlocks = []int64{int64(i % 7), int64(i)}
	}
	return r
}

// BenchmarkFullReport1M measures a full report on
// 1,000,000 result rows with 16 content events each (16 million ITL
// samples), with 2,000 bootstrap resamples for every per-request
// percentile. SERVETRACE_BENCH_ROWS overrides the row count.
func BenchmarkFullReport1M(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("SERVETRACE_BENCH_ROWS")); err == nil {
		n = v
	}
	dir := filepath.Join(b.TempDir(), "run")
	writeSyntheticRun(b, dir, n)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rep, err := Analyze([]string{dir}, Options{Bootstrap: BootstrapOptions{Resamples: 2000, Seed: 1}})
		if err != nil {
			b.Fatal(err)
		}
		if rep.Metrics["itl_ms"].N != 15*n {
			b.Fatalf("itl samples %d, want %d", rep.Metrics["itl_ms"].N, 15*n)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
