package analyze

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/loghist"
	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/trace"
)

// writeMixedRun writes a run directory of n rows in parts of partRows, one
// every millisecond: warmup rows, failures, an unsent row, unstreamed and
// reasoning successes, a concurrency cap's queue wait, servers' prompt
// counts off the intended ones, features and prefix blocks. TTFT follows
// an AR(1) of coefficient rho in send order (a queue's memory); counted
// sent rows number a multiple of 30, so equal-count batches split evenly.
func writeMixedRun(tb testing.TB, dir string, n, partRows int, rho float64) {
	tb.Helper()
	w, err := trace.NewResultWriter(dir, partRows)
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	ar := 0.0
	for i := range n {
		sched := int64(i) * 1e6
		admitted := sched + int64(rng.IntN(3))*int64(rng.IntN(2e6)) // some wait
		sent := admitted + 50e3 + int64(rng.IntN(200e3))
		ar = rho*ar + math.Sqrt(1-rho*rho)*rng.NormFloat64()
		first := sent + int64(150e6*math.Exp(0.4*ar))
		out := int64(8 + rng.IntN(40))
		times := make([]int64, out)
		t := first - sent
		for k := range times {
			times[k] = t
			t += int64(15e6 * (0.5 + rng.ExpFloat64()*0.5))
		}
		done := sent + times[len(times)-1] + 2e5
		usage := int64(500 + rng.IntN(5))
		r := trace.Result{Identity: trace.Identity{RequestID: "r" + strconv.Itoa(i), Model: "m"},
			ScheduledNs: sched, AdmittedNs: admitted, SentNs: &sent, FirstChunkNs: &first, FirstTokenNs: &first, DoneNs: &done,
			TokenTimesNs: times, ObservedOutputTokens: out, PromptTokensSent: 500 + int64(rng.IntN(3000)), UsagePromptTokens: &usage,
			HTTPStatus: 200, Outcome: trace.OutcomeOK, RunID: "mixed", ObservedFinishReason: "stop",
			Shape: trace.Shape{Stream: true, InputTokens: 502, OutputTokens: out, MaxTokens: 64}}
		switch {
		case i < 30:
			r.Warmup = true
		case i%97 == 0:
			r.Outcome, r.HTTPStatus, r.FirstChunkNs, r.FirstTokenNs, r.TokenTimesNs, r.ObservedOutputTokens = trace.OutcomeHTTPError, 503, nil, nil, nil, 0
		case i%89 == 0:
			r.Outcome, r.ObservedFinishReason = trace.OutcomeTimeout, ""
		case i%83 == 0:
			r.Stream, r.FirstChunkNs, r.FirstTokenNs, r.TokenTimesNs = false, nil, nil, nil
		case i%13 == 0:
			answer := first + 40e6
			r.FirstAnswerNs, r.ObservedReasoningTokens = &answer, 3
		}
		if i%5 == 0 {
			r.Features, r.FeaturesSent = []string{"tools"}, []string{"tools"}
			r.PrefixBlocks = []int64{int64(i % 7), int64(i)}
		}
		if err := w.Write(r); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	ri := trace.RunInfo{SchemaVersion: 1, RunID: "mixed", Complete: true, Parts: w.Parts()}
	if err := trace.WriteJSONAtomic(filepath.Join(dir, trace.RunInfoName), ri); err != nil {
		tb.Fatal(err)
	}
}

// near reports whether a streamed figure is within the histograms' bound
// of the held one (and a nanosecond, for values rounded to whole ns).
func near(streamed, held, rel float64) bool {
	return math.Abs(streamed-held) <= rel*math.Abs(held)+1e-6
}

// TestStreamedAnalysisMatchesHeld analyzes one run held and streamed: the
// counts, rates and token figures agree exactly; every percentile and
// order-statistic end within loghist.RelErr; the batch-means and bootstrap
// ends (the sample holds every value here) within twice that; the pooled
// within-part dependence test finds the AR(1) TTFT dependent and the
// lateness not, as the whole-series test does.
func TestStreamedAnalysisMatchesHeld(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeMixedRun(t, dir, 21030, 2000, 0.9)
	opts := Options{Bootstrap: BootstrapOptions{Resamples: 400, Seed: 3}, SLO: SLO{TTFT: 200 * 1e6}}
	held, got := heldAndStreamed(t, dir, opts)
	rel := loghist.RelErr
	if held.Streamed != nil || got.Streamed == nil || got.Streamed.Rows != 21030 {
		t.Fatalf("streamed: held %+v, streamed %+v", held.Streamed, got.Streamed)
	}
	for _, c := range []struct {
		name      string
		held, got any
	}{
		{"requests", held.Requests, got.Requests},
		{"throughput", held.Throughput, got.Throughput},
		{"goodput", held.Goodput, got.Goodput},
		{"features", held.Features, got.Features},
		{"reasoning", held.Reasoning, got.Reasoning},
		{"output tokens", held.Sent.OutputTokens, got.Sent.OutputTokens},
		{"prompt gap", held.Sent.PromptGap, got.Sent.PromptGap},
		{"finish reasons", held.Sent.FinishReasons, got.Sent.FinishReasons},
		{"feature shares", held.Sent.FeatureShares, got.Sent.FeatureShares},
		{"stalls", held.Smoothness.Stalls, got.Smoothness.Stalls},
	} {
		if !reflect.DeepEqual(c.held, c.got) {
			t.Errorf("%s: held %+v, streamed %+v", c.name, c.held, c.got)
		}
	}
	// Prompts reach 3,500 tokens: above 2,048 a token count is read to
	// within its bin.
	hi, gi := held.Sent.InputTokens, got.Sent.InputTokens
	if hi.N != gi.N || hi.Max != gi.Max || !near(gi.P10, hi.P10, rel) || !near(gi.P50, hi.P50, rel) || !near(gi.P90, hi.P90, rel) || !near(gi.P99, hi.P99, rel) {
		t.Errorf("input tokens: held %+v, streamed %+v", hi, gi)
	}
	if hs, gs := held.Sent.ReusedPrefixShare, got.Sent.ReusedPrefixShare; hs == 0 || !near(gs, hs, 1e-12) || held.Sent.PrefixKnown != got.Sent.PrefixKnown {
		t.Errorf("reused prefix share: held %g over %d requests, streamed %g over %d", hs, held.Sent.PrefixKnown, gs, got.Sent.PrefixKnown)
	}
	if !near(got.Smoothness.ITLCV, held.Smoothness.ITLCV, 1e-9) {
		t.Errorf("ITL CV: held %g, streamed %g", held.Smoothness.ITLCV, got.Smoothness.ITLCV)
	}
	if len(held.Metrics) != len(got.Metrics) {
		t.Fatalf("metrics: held %d, streamed %d", len(held.Metrics), len(got.Metrics))
	}
	for name, h := range held.Metrics {
		g, ok := got.Metrics[name]
		if !ok {
			t.Errorf("%s: missing from the streamed report", name)
			continue
		}
		if g.N != h.N || !near(g.Mean, h.Mean, 1e-9) || !near(g.Std, h.Std, 1e-6) || !near(g.Max, h.Max, 1e-12) || !near(g.Median, h.Median, rel) {
			t.Errorf("%s: held n %d mean %g std %g max %g median %g; streamed %d %g %g %g %g", name, h.N, h.Mean, h.Std, h.Max, h.Median, g.N, g.Mean, g.Std, g.Max, g.Median)
		}
		for i, hq := range h.Quantiles {
			gq := g.Quantiles[i]
			ends := []struct {
				what      string
				held, got *float64
				rel       float64
			}{{"value", &hq.Value, &gq.Value, rel}, {"ci95_lo", hq.CILo, gq.CILo, rel}, {"ci95_hi", hq.CIHi, gq.CIHi, rel},
				{"bootstrap_lo", hq.BootLo, gq.BootLo, 2 * rel}, {"bootstrap_hi", hq.BootHi, gq.BootHi, 2 * rel}}
			if name == "lateness_ms" { // on every sent row: the same batches both ways
				ends = append(ends, struct {
					what      string
					held, got *float64
					rel       float64
				}{"batch_lo", hq.BatchLo, gq.BatchLo, 2 * rel}, struct {
					what      string
					held, got *float64
					rel       float64
				}{"batch_hi", hq.BatchHi, gq.BatchHi, 2 * rel})
			}
			for _, e := range ends {
				if (e.held == nil) != (e.got == nil) || e.held != nil && !near(*e.got, *e.held, e.rel) {
					t.Errorf("%s p%g %s: held %v, streamed %v", name, hq.P, e.what, deref(e.held), deref(e.got))
				}
			}
			if (hq.BatchHi == nil) != (gq.BatchHi == nil) || hq.Interval != gq.Interval {
				t.Errorf("%s p%g: held interval %s (batch hi %v), streamed %s (%v)", name, hq.P, hq.Interval, deref(hq.BatchHi), gq.Interval, deref(gq.BatchHi))
			}
		}
	}
	for name, dependent := range map[string]bool{"ttft_ms": true, "lateness_ms": false} {
		h, g := held.Metrics[name].Dependence, got.Metrics[name].Dependence
		if h.Independent == dependent || g.Independent == dependent || math.Abs(h.Lag1-g.Lag1) > 0.05 {
			t.Errorf("%s: held lag-1 %.3f (independent %v), streamed %.3f (%v); want dependent %v", name, h.Lag1, h.Independent, g.Lag1, g.Independent, dependent)
		}
	}
	if !strings.Contains(strings.Join(got.Notes, "\n"), "streamed analysis of 21030 result rows") {
		t.Errorf("no note on the streamed analysis: %q", got.Notes)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestStreamedBootstrapScalesItsSample: a bootstrap over a sample of 5,000
// of 40,000 independent values, its standard error scaled by √(m/n),
// gives the held bootstrap's interval within the resampling noise.
func TestStreamedBootstrapScalesItsSample(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeMixedRun(t, dir, 40020, 10000, 0)
	opts := Options{Bootstrap: BootstrapOptions{Resamples: 2000, Seed: 5}, Percentiles: []float64{50, 90}}
	defer func(n int) { bootstrapSample = n }(bootstrapSample)
	bootstrapSample = 5000 // the streamed analysis's sample; the held one resamples every value
	held, got := heldAndStreamed(t, dir, opts)
	for i, hq := range held.Metrics["ttft_ms"].Quantiles {
		gq := got.Metrics["ttft_ms"].Quantiles[i]
		hw, gw := *hq.BootHi-*hq.BootLo, *gq.BootHi-*gq.BootLo
		if math.Abs(gw-hw) > 0.15*hw {
			t.Errorf("p%g: held bootstrap width %.3f ms, streamed from a 5,000 sample %.3f ms", hq.P, hw, gw)
		}
	}
}

// TestStreamedRefusesWhatNeedsRows: series, curves and the comparison with
// the log need every row; the error names the limit.
func TestStreamedRefusesWhatNeedsRows(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeMixedRun(t, dir, 300, 100, 0)
	for _, o := range []Options{{Window: 1e9}, {Curves: true}, {VsLogged: VsLoggedAuto}} {
		o.InMemoryRows = 100
		_, err := Analyze([]string{dir}, o)
		oe, ok := opterr.As(err)
		if !ok || oe.Field != "InMemoryRows" || !strings.Contains(oe.Reason, "300") {
			t.Errorf("%+v: error %v, want one on InMemoryRows naming the 300 rows", o, err)
		}
	}
}

// TestSendGridEdgesSplitEvenly: over times that force the grid to fold
// many times, the k batches hold equal counts to within one bin.
func TestSendGridEdgesSplitEvenly(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		at   func(i int) int64
	}{
		{"even, 2 hours", 300000, func(i int) int64 { return int64(i) * 24e6 }},
		{"burst then trickle", 300000, func(i int) int64 {
			if i < 200000 {
				return int64(i) * 1e3
			}
			return 2e8 + int64(i-200000)*1e8
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newSendGrid()
			for i := range tc.n {
				g.add(tc.at(i))
			}
			edges := g.edges(30)
			counts := make([]int, 30)
			for i := range tc.n {
				counts[batchOf(edges, tc.at(i))]++
			}
			// A batch may be off by the sends of the bins its two edges
			// fall in, no more.
			edgeBin := func(b int) int64 {
				if b < 0 || b >= len(edges) {
					return 0
				}
				return g.counts[edges[b]/g.width-1]
			}
			for b, c := range counts {
				if tol := edgeBin(b-1) + edgeBin(b); math.Abs(float64(c-tc.n/30)) > float64(tol) {
					t.Errorf("batch %d holds %d, want %d within its edges' bins (%d)", b, c, tc.n/30, tol)
				}
			}
		})
	}
}

// TestReservoirIsUniform: offered 0..n−1, each tenth of the stream fills
// about a tenth of the sample (a binomial count, checked at 5 standard
// deviations), and every kept value is one offered.
func TestReservoirIsUniform(t *testing.T) {
	defer func(n int) { bootstrapSample = n }(bootstrapSample)
	bootstrapSample = 2000
	const n = 200000
	var r reservoir
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range n {
		r.offer(timedValue{at: int64(i)}, rng)
	}
	if len(r.items) != bootstrapSample {
		t.Fatalf("kept %d, want %d", len(r.items), bootstrapSample)
	}
	tenths := make([]int, 10)
	seen := map[int64]bool{}
	for _, it := range r.items {
		if seen[it.at] || it.at < 0 || it.at >= n {
			t.Fatalf("kept %d twice or out of range", it.at)
		}
		seen[it.at] = true
		tenths[it.at*10/n]++
	}
	sd := math.Sqrt(float64(bootstrapSample) * 0.1 * 0.9)
	for i, c := range tenths {
		if math.Abs(float64(c)-float64(bootstrapSample)/10) > 5*sd {
			t.Errorf("tenth %d holds %d of %d, want about %d", i, c, bootstrapSample, bootstrapSample/10)
		}
	}
}

// TestDistinctCounter: exact up to exactDistinct ids (seen once or
// several times), then within four standard errors of the true count
// (HyperLogLog), just past the switch and well beyond it.
func TestDistinctCounter(t *testing.T) {
	for _, tc := range []struct {
		distinct, repeats int
	}{{1000, 3}, {exactDistinct, 2}, {exactDistinct + 50_000, 1}, {3_000_000, 2}} {
		var d distinctCounter
		for range tc.repeats {
			for i := range tc.distinct {
				d.add(int64(i) * 7919) // the same ids on each repeat
			}
		}
		got, exact := d.count()
		wantExact := tc.distinct <= exactDistinct
		if exact != wantExact || wantExact && got != float64(tc.distinct) ||
			!wantExact && math.Abs(got-float64(tc.distinct)) > 4*distinctRelErr*float64(tc.distinct) {
			t.Errorf("%d distinct ids seen %d times: counted %.0f (exact %v)", tc.distinct, tc.repeats, got, exact)
		}
	}
}

// TestStreamedKeepsThePercentilesOrder: percentiles asked for out of
// order get the same bootstrap intervals streamed as held (the bootstrap's
// thresholds must ascend whatever order the report keeps).
func TestStreamedKeepsThePercentilesOrder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeMixedRun(t, dir, 6030, 1000, 0)
	opts := Options{Bootstrap: BootstrapOptions{Resamples: 300, Seed: 4}, Percentiles: []float64{99, 50, 90}}
	held, got := heldAndStreamed(t, dir, opts)
	for i, hq := range held.Metrics["e2e_ms"].Quantiles {
		gq := got.Metrics["e2e_ms"].Quantiles[i]
		same := func(g, h *float64) bool {
			return (g == nil) == (h == nil) && (h == nil || near(*g, *h, 2*loghist.RelErr))
		}
		if gq.P != hq.P || hq.BootHi == nil || !same(gq.BootLo, hq.BootLo) || !same(gq.BootHi, hq.BootHi) {
			t.Errorf("p%g: held bootstrap [%v, %v], streamed p%g [%v, %v]", hq.P, deref(hq.BootLo), deref(hq.BootHi), gq.P, deref(gq.BootLo), deref(gq.BootHi))
		}
	}
}

// TestStreamedNamesTheFaultyRow: a bad row in the middle of a later part
// is refused with the part and its row number, as the held analysis names
// it.
func TestStreamedNamesTheFaultyRow(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	w, err := trace.NewResultWriter(dir, 200)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 600 {
		r := syntheticResult(i, rng)
		if i == 350 {
			r.ObservedOutputTokens = -5
		}
		w.Write(r)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := trace.WriteJSONAtomic(filepath.Join(dir, trace.RunInfoName), trace.RunInfo{RunID: "bench", Complete: true, Parts: w.Parts()}); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{0, 1} {
		_, err := Analyze([]string{dir}, Options{InMemoryRows: limit})
		if err == nil || !strings.Contains(err.Error(), "part-00001.parquet row 151: ") || strings.Contains(err.Error(), "read ") {
			t.Errorf("in-memory limit %d: error %v, want one naming part-00001.parquet row 151", limit, err)
		}
	}
}

// TestStreamedBreakdownsMatchHeld: per group, the counts and rates equal
// the held breakdown's and every percentile and interval end is within
// loghist.RelErr; past the cap, later values are pooled into "(other)"
// and the groups still add up to the run.
func TestStreamedBreakdownsMatchHeld(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeMixedRun(t, dir, 9030, 1000, 0.5)
	opts := Options{By: []string{"input_bucket", "feature", "model"}, Bootstrap: BootstrapOptions{Resamples: 100}}
	held, got := heldAndStreamed(t, dir, opts)
	for _, dim := range opts.By {
		h, g := held.Breakdowns[dim], got.Breakdowns[dim]
		if len(h) == 0 || len(h) != len(g) {
			t.Fatalf("%s: held %d groups, streamed %d", dim, len(h), len(g))
		}
		for i := range h {
			hg, gg := h[i], g[i]
			if hg.Value != gg.Value || hg.Counted != gg.Counted || hg.OK != gg.OK || hg.SuccessRate != gg.SuccessRate ||
				!near(gg.RequestsPerS, hg.RequestsPerS, 1e-12) || !near(gg.OutputTokensPerS, hg.OutputTokensPerS, 1e-12) || len(hg.Metrics) != len(gg.Metrics) {
				t.Errorf("%s group %d: held %+v, streamed %+v", dim, i, hg, gg)
				continue
			}
			for name, hd := range hg.Metrics {
				gd := gg.Metrics[name]
				if gd.N != hd.N || !near(gd.Mean, hd.Mean, 1e-9) || !near(gd.Max, hd.Max, 1e-12) {
					t.Errorf("%s %s %s: held n %d mean %g max %g, streamed %d %g %g", dim, hg.Value, name, hd.N, hd.Mean, hd.Max, gd.N, gd.Mean, gd.Max)
				}
				for k, hq := range hd.Quantiles {
					gq := gd.Quantiles[k]
					for _, e := range [][2]*float64{{&hq.Value, &gq.Value}, {hq.CILo, gq.CILo}, {hq.CIHi, gq.CIHi}} {
						if (e[0] == nil) != (e[1] == nil) || e[0] != nil && !near(*e[1], *e[0], loghist.RelErr) {
							t.Errorf("%s %s %s p%g: held %v, streamed %v", dim, hg.Value, name, hq.P, deref(e[0]), deref(e[1]))
						}
					}
				}
			}
		}
	}
	defer func(n int) { streamGroupCap = n }(streamGroupCap)
	streamGroupCap = 1
	opts.InMemoryRows = 1
	capped, err := Analyze([]string{dir}, opts)
	if err != nil {
		t.Fatal(err)
	}
	gs := capped.Breakdowns["input_bucket"]
	counted := 0
	for _, g := range gs {
		counted += g.Counted
	}
	if len(gs) != 2 || gs[1].Value != "(other)" || counted != capped.Requests.Counted {
		t.Errorf("capped at 1: groups %+v, counted %d of %d", gs, counted, capped.Requests.Counted)
	}
}

// heldAndStreamed analyzes the run in dir held and, with an in-memory
// limit of one row, streamed.
func heldAndStreamed(t *testing.T, dir string, opts Options) (held, streamed *Report) {
	t.Helper()
	held, err := Analyze([]string{dir}, opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.InMemoryRows = 1
	streamed, err = Analyze([]string{dir}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return held, streamed
}
