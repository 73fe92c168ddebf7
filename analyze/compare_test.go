package analyze

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

func TestHolmHandComputed(t *testing.T) {
	// p-values 0.01, 0.04, 0.03, 0.20 with m = 4: adjusted 0.04, 0.09, 0.09,
	// 0.20 (step-down, monotone); at alpha 0.05 only the first is flagged.
	rows := []ComparisonRow{{PValue: 0.01, Diff: 1}, {PValue: 0.04, Diff: -1}, {PValue: 0.03, Diff: 1}, {PValue: 0.20, Diff: 1}}
	holm(rows, 0.05)
	want := []float64{0.04, 0.09, 0.09, 0.20}
	for i, r := range rows {
		if math.Abs(r.PHolm-want[i]) > 1e-12 {
			t.Errorf("row %d: Holm p %v, want %v", i, r.PHolm, want[i])
		}
	}
	if rows[0].Verdict != VerdictWorse || rows[1].Verdict != "" || rows[2].Verdict != "" {
		t.Errorf("verdicts %q %q %q, want worse and two unset", rows[0].Verdict, rows[1].Verdict, rows[2].Verdict)
	}
}

// TestLongCompareCalibration calibrates the verdicts: lognormal σ = 0.5,
// 20,000 samples per side, 200 seeds. A/A must flag no metric in at least
// 93% of seeds; B 10% slower must be "worse" on p99 in at least 95%.
func TestLongCompareCalibration(t *testing.T) {
	skipLong(t)
	const seeds, n = 200, 20000
	draw := func(rng *rand.Rand, scale float64) map[string][]float64 {
		out := map[string][]float64{}
		for _, m := range ComparedMetrics {
			x := make([]float64, n)
			for i := range x {
				x[i] = scale * math.Exp(0.5*rng.NormFloat64())
			}
			out[m] = x
		}
		return out
	}
	o := CompareOptions{Confidence: 0.95, Bootstrap: BootstrapOptions{Resamples: 2000, Block: BlockAuto}}
	quiet, worse, rowFP := 0, 0, 0
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 99))
		o.Bootstrap.Seed = uint64(seed)
		a, a2, b := draw(rng, 1), draw(rng, 1), draw(rng, 1.1)
		flagged := false
		for _, r := range compareSamples(a, a2, o) {
			if r.Verdict != VerdictInconclusive {
				flagged = true
			}
			if r.PValue < 0.05 {
				rowFP++
			}
		}
		if !flagged {
			quiet++
		}
		for _, r := range compareSamples(a, b, o) {
			if r.Metric == "ttft_ms" && r.Stat == "p99" && r.Verdict == VerdictWorse {
				worse++
			}
		}
	}
	t.Logf("A/A: no metric flagged in %d of %d seeds (unadjusted p < 0.05 in %.1f%% of rows); 10%% slower: p99 worse in %d of %d",
		quiet, seeds, 100*float64(rowFP)/float64(seeds*len(ComparedMetrics)*len(comparedPercentiles)), worse, seeds)
	if float64(quiet) < 0.93*seeds {
		t.Errorf("A/A flagged a metric in %d of %d seeds; want inconclusive in at least 93%%", seeds-quiet, seeds)
	}
	if float64(worse) < 0.95*seeds {
		t.Errorf("a 10%% p99 shift was called worse in %d of %d seeds; want at least 95%%", worse, seeds)
	}
}

// TestLongCompareCalibrationCorrelated is the calibration on correlated
// runs: every metric an AR(1) at φ = 0.9 on the log scale, 20,000 requests
// a side, 200 seeds. A/A must flag no metric in at least 93% of seeds; B
// 10% slower must be "worse" on TTFT p99 in at least 90%. The log-scale
// spread is σ = 0.3: at σ = 0.5 the p99 exceedances' own correlation
// leaves a 10% shift about 2.4 standard errors wide, which no valid test
// finds 90% of the time (docs/measurements.md).
func TestLongCompareCalibrationCorrelated(t *testing.T) {
	skipLong(t)
	t.Parallel()
	const seeds, n, sigma = 200, 20000, 0.3
	draw := func(rng *rand.Rand, scale float64) map[string][]float64 {
		out := map[string][]float64{}
		for _, m := range ComparedMetrics {
			x := make([]float64, n)
			logAR1(0.9, sigma).fill(rng, x)
			for i := range x {
				x[i] *= scale
			}
			out[m] = x
		}
		return out
	}
	o := CompareOptions{Confidence: 0.95, Bootstrap: BootstrapOptions{Resamples: 1000, Block: BlockAuto}}
	quiet, worse := 0, 0
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 404))
		o.Bootstrap.Seed = uint64(seed)
		a, a2, b := draw(rng, 1), draw(rng, 1), draw(rng, 1.1)
		if !slices.ContainsFunc(compareSamples(a, a2, o), func(r ComparisonRow) bool { return r.Verdict != VerdictInconclusive }) {
			quiet++
		}
		if slices.ContainsFunc(compareSamples(a, b, o), func(r ComparisonRow) bool {
			return r.Metric == "ttft_ms" && r.Stat == "p99" && r.Verdict == VerdictWorse
		}) {
			worse++
		}
	}
	t.Logf("AR(1) 0.9, %d a side: A/A inconclusive in %d of %d seeds; 10%% slower: TTFT p99 worse in %d of %d", n, quiet, seeds, worse, seeds)
	if float64(quiet) < 0.93*seeds {
		t.Errorf("A/A flagged a metric in %d of %d seeds; want inconclusive in at least 93%%", seeds-quiet, seeds)
	}
	if float64(worse) < 0.90*seeds {
		t.Errorf("a 10%% p99 shift was called worse in %d of %d seeds; want at least 90%%", worse, seeds)
	}
}

// TestServerIdentityDiffs: sides served by different engines, versions,
// weights or context lengths are not comparable unless the server is the
// label under test; runs recorded before identities are not judged on them.
func TestServerIdentityDiffs(t *testing.T) {
	id := func(engine, version string, ctx int64) *trace.ServerIdentity {
		return &trace.ServerIdentity{Engine: engine, Version: version, Model: "m", ContextTokens: ctx}
	}
	run := func(s *trace.ServerIdentity) []*trace.RunInfo {
		return []*trace.RunInfo{{ServerHeader: "x", ServerModels: "y", Server: s}}
	}
	for _, c := range []struct {
		a, b    *trace.ServerIdentity
		testing string
		want    []string
	}{
		{id("vllm", "0.11.0", 32768), id("vllm", "0.11.0", 32768), "", nil},
		{id("vllm", "0.11.0", 32768), id("vllm", "0.11.1", 32768), "", []string{"server version (0.11.0 vs 0.11.1)"}},
		{id("vllm", "0.11.0", 32768), id("sglang", "0.5.4", 8192), "", []string{"server engine (vllm vs sglang)", "server version (0.11.0 vs 0.5.4)", "server context length (32768 vs 8192)"}},
		{id("vllm", "0.11.0", 32768), id("sglang", "0.5.4", 8192), "server", nil},
		{nil, id("vllm", "0.11.0", 32768), "", nil},
	} {
		got := fingerprintDiffs(run(c.a), run(c.b), c.testing)
		if !slices.Equal(got, c.want) {
			t.Errorf("%+v vs %+v (testing %q): %q, want %q", c.a, c.b, c.testing, got, c.want)
		}
	}
}
