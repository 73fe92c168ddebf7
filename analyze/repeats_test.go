package analyze

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/servetrace/servetrace/trace"
)

// repeatRuns builds runs of n requests each, lognormal TTFT scaled per run.
func repeatRuns(scales []float64, n int, seed uint64) (*resultColumns, []string, map[string][]int32) {
	rng := rand.New(rand.NewPCG(seed, 1))
	var rows []trace.Result
	var ids []string
	groups := map[string][]int32{}
	for r, scale := range scales {
		id := string(rune('a' + r))
		ids = append(ids, id)
		for i := range n {
			sent := int64(i) * 1e7
			first := sent + int64(scale*100e6*math.Exp(0.5*rng.NormFloat64()))
			done := first + 1e6
			groups[id] = append(groups[id], int32(len(rows)))
			rows = append(rows, trace.Result{SentNs: &sent, FirstTokenNs: &first, FirstChunkNs: &first, DoneNs: &done, TokenTimesNs: []int64{first - sent},
				ObservedOutputTokens: 1, Outcome: trace.OutcomeOK, RunID: id, Shape: trace.Shape{Stream: true}})
		}
	}
	return columnsOf(rows), ids, groups
}

func TestRepeatsIntervalAndHeterogeneity(t *testing.T) {
	opts := Options{Percentiles: []float64{50, 99}, Bootstrap: BootstrapOptions{Resamples: 500, Seed: 1}}
	// Same configuration five times: runs agree within sampling noise.
	c, ids, groups := repeatRuns([]float64{1, 1, 1, 1, 1}, 3000, 7)
	same := repeats(c, ids, groups, opts).Metrics["ttft_ms"][0]
	// A t interval by hand: mean ± t(4, 0.975)·sd/√5, t = 2.7764451.
	var mean, ss float64
	for _, v := range same.PerRun {
		mean += v / 5
	}
	for _, v := range same.PerRun {
		ss += (v - mean) * (v - mean)
	}
	h := 2.7764451051977987 * math.Sqrt(ss/4) / math.Sqrt(5)
	if math.Abs(same.Mean-mean) > 1e-9 || math.Abs(same.CI95[0]-(mean-h)) > 1e-6 || math.Abs(same.CI95[1]-(mean+h)) > 1e-6 {
		t.Errorf("interval %v around %v, want %v ± %v", same.CI95, same.Mean, mean, h)
	}
	if same.Heterogeneity < 0.01 {
		t.Errorf("identical runs judged heterogeneous (p %.3g; between sd %.2f, within se %.2f)", same.Heterogeneity, same.BetweenSD, same.WithinSE)
	}
	// Drifting runs: ±20% between runs, far beyond within-run noise.
	c, ids, groups = repeatRuns([]float64{1, 1.1, 0.9, 1.2, 0.8}, 3000, 8)
	drift := repeats(c, ids, groups, opts).Metrics["ttft_ms"][0]
	if drift.Heterogeneity > 0.001 || drift.BetweenSD < 3*drift.WithinSE {
		t.Errorf("drifting runs: heterogeneity p %.3g, between sd %.2f, within se %.2f", drift.Heterogeneity, drift.BetweenSD, drift.WithinSE)
	}
	if w := drift.CI95[1] - drift.CI95[0]; w < 5*(same.CI95[1]-same.CI95[0]) {
		t.Errorf("drift widened the interval only to %.2f ms", w)
	}
}
