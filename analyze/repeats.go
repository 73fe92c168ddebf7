package analyze

import (
	"math"
	"slices"

	"gonum.org/v1/gonum/stat/distuv"
)

// Repeats describes several runs of one configuration (run directories
// with different run ids; directories sharing a run id are shards of one
// run and are merged first). When latencies are correlated in time, the run
// is the honest unit: the interval here is a t interval across the runs'
// own estimates, which carries both between-run and within-run variation.
type Repeats struct {
	Runs    []string                `json:"runs"`
	Metrics map[string][]RepeatStat `json:"metrics"`
}

// RepeatStat is one percentile of one metric across runs.
type RepeatStat struct {
	P float64 `json:"p"`
	// PerRun holds each run's estimate, in the order of Repeats.Runs.
	PerRun []float64 `json:"per_run"`
	// Mean is the mean of the run estimates; CI95 its t interval.
	Mean float64    `json:"mean"`
	CI95 [2]float64 `json:"ci95"`
	// BetweenSD is the standard deviation of the run estimates; WithinSE
	// the root mean square of each run's own bootstrap standard error.
	BetweenSD float64 `json:"between_run_sd"`
	WithinSE  float64 `json:"within_run_se"`
	// Heterogeneity is the p-value of Cochran's Q: small means the runs
	// differ by more than their own sampling noise explains (drift, warm
	// caches, a noisy neighbour), so more runs, not longer ones, are needed.
	Heterogeneity float64 `json:"heterogeneity_p"`
	// Unbounded is set when some run's sample cannot bound this percentile.
	Unbounded bool `json:"unbounded,omitempty"`
}

// repeatMetrics are the per-request metrics compared across runs.
var repeatMetrics = []string{"ttft_ms", "tpot_ms", "e2e_ms"}

// repeats computes the across-run statistics; groups maps run ids (in
// order) to their rows.
func repeats(c *resultColumns, ids []string, groups map[string][]int32, opts Options) *Repeats {
	r := &Repeats{Runs: ids, Metrics: map[string][]RepeatStat{}}
	ps := slices.Clone(opts.Percentiles)
	slices.Sort(ps)
	levels := make([]float64, len(ps))
	for i, p := range ps {
		levels[i] = p / 100
	}
	type runEst struct{ est []percentileEstimate }
	perMetric := map[string][]runEst{}
	for _, id := range ids {
		x := extractRows(c, opts, groups[id])
		for _, m := range repeatMetrics {
			perMetric[m] = append(perMetric[m], runEst{percentileSEs(x.values(m), levels, opts.Bootstrap)})
		}
	}
	k := float64(len(ids))
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: k - 1}.Quantile(0.975)
	for _, m := range repeatMetrics {
		for i, p := range ps {
			st := RepeatStat{P: p}
			var sum, w2 float64
			for _, re := range perMetric[m] {
				e := re.est[i]
				st.PerRun = append(st.PerRun, e.value)
				sum += e.value
				w2 += e.se * e.se
				if !e.ok {
					st.Unbounded = true
				}
			}
			st.Mean = sum / k
			var ss, q float64
			for _, re := range perMetric[m] {
				e := re.est[i]
				ss += (e.value - st.Mean) * (e.value - st.Mean)
			}
			st.BetweenSD = math.Sqrt(ss / (k - 1))
			st.WithinSE = math.Sqrt(w2 / k)
			h := t * st.BetweenSD / math.Sqrt(k)
			st.CI95 = [2]float64{st.Mean - h, st.Mean + h}
			// Cochran's Q with inverse-variance weights.
			var wsum, wmean float64
			for _, re := range perMetric[m] {
				if e := re.est[i]; e.se > 0 {
					wsum += 1 / (e.se * e.se)
					wmean += e.value / (e.se * e.se)
				}
			}
			st.Heterogeneity = math.NaN()
			if wsum > 0 && !st.Unbounded {
				wmean /= wsum
				for _, re := range perMetric[m] {
					e := re.est[i]
					q += (e.value - wmean) * (e.value - wmean) / (e.se * e.se)
				}
				st.Heterogeneity = distuv.ChiSquared{K: k - 1}.Survival(q)
			}
			if math.IsNaN(st.Heterogeneity) {
				st.Heterogeneity = -1 // not computable (JSON has no NaN)
			}
			r.Metrics[m] = append(r.Metrics[m], st)
		}
	}
	return r
}
