package analyze

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// TestVsLogged: a source trace logs TTFT and E2E for 500 requests; the
// replay answers 1.5x slower on TTFT, in the same order of slowness, and
// leaves 100 requests without a logged value. The comparison pairs 400 by
// request id, finds the 1.5 ratio and a high rank correlation.
func TestVsLogged(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "trace")
	w, err := trace.NewBucketWriter(src, trace.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	logged := make([]float64, 500)
	for i := range logged {
		logged[i] = 100 * math.Exp(0.5*rng.NormFloat64())
		r := trace.Request{Identity: trace.Identity{RequestID: "q" + strconv.Itoa(i)}, TS: trace.DefaultStart.UnixMicro() + int64(i)*1000,
			Shape: trace.Shape{InputTokens: 10, OutputTokens: 2, API: trace.APIChat, Stream: true}}
		if i < 400 {
			r.TTFTMs, r.E2EMs = new(logged[i]), new(logged[i]+50)
		}
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(&trace.Manifest{}); err != nil {
		t.Fatal(err)
	}
	var rows []trace.Result
	for i := range 500 {
		sent := int64(i) * 1e7
		first := sent + int64(1.5*logged[i]*1e6)
		done := first + int64(50e6)
		rows = append(rows, trace.Result{Identity: trace.Identity{RequestID: "q" + strconv.Itoa(i)}, SentNs: &sent, FirstTokenNs: &first, FirstChunkNs: &first,
			DoneNs: &done, TokenTimesNs: []int64{first - sent, done - sent}, ObservedOutputTokens: 2, Outcome: trace.OutcomeOK, Shape: trace.Shape{Stream: true}})
	}
	run := filepath.Join(dir, "run")
	writeRun(t, run, "replay", rows, 100)
	rep, err := Analyze([]string{run}, Options{Percentiles: []float64{50, 99}, VsLogged: src, Bootstrap: BootstrapOptions{Resamples: 200}})
	if err != nil {
		t.Fatal(err)
	}
	v := rep.VsLogged
	if v == nil || v.Replayed != 500 {
		t.Fatalf("vs logged: %+v", v)
	}
	ttft := v.Metrics["ttft_ms"]
	if ttft.Paired != 400 || math.Abs(ttft.RatioP50-1.5) > 0.01 || math.Abs(ttft.RatioP99-1.5) > 0.01 || ttft.Spearman < 0.999 {
		t.Errorf("ttft: %d paired, ratios %.3f / %.3f, spearman %.3f; want 400, 1.5, 1.5, 1", ttft.Paired, ttft.RatioP50, ttft.RatioP99, ttft.Spearman)
	}
	// E2E: replayed 1.5·l + 50 against logged l + 50; the median paired
	// difference is 0.5 times the median logged TTFT.
	e2e := v.Metrics["e2e_ms"]
	lg := make([]float64, 400)
	copy(lg, logged[:400])
	if want := 0.5 * medianOf(lg); math.Abs(e2e.MedianDiffMs-want) > 0.01 {
		t.Errorf("e2e median paired difference %.3f ms, want %.3f", e2e.MedianDiffMs, want)
	}
	if _, err := Analyze([]string{run}, Options{VsLogged: filepath.Join(dir, "nope")}); err == nil {
		t.Error("a missing source trace was accepted")
	}
}

func medianOf(x []float64) float64 {
	s := append([]float64(nil), x...)
	d := Summarize(s, []float64{50})
	return d.Median
}
