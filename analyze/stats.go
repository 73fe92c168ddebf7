package analyze

import (
	"cmp"
	"math"
	"slices"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/servetrace/servetrace/internal/rank"
)

// Percentile returns the p-quantile (0 ≤ p ≤ 1) of sorted data by linear
// interpolation between order statistics: Hyndman–Fan type 7, numpy's and
// R's default (on [1 2 3 4] the median is 2.5). It returns NaN for no data.
func Percentile(sorted []float64, p float64) float64 { return rank.Percentile(sorted, p) }

// OrderStatCI returns the 1-based ranks lo ≤ hi of the exact,
// distribution-free confidence interval [x(lo), x(hi)] for the p-quantile
// from n independent samples: with B ~ Binomial(n, p), it takes the largest
// lo with P(B ≤ lo−1) ≤ α/2 and the smallest hi with P(B ≤ hi−1) ≥ 1−α/2,
// so the coverage P(lo ≤ B < hi) is at least conf. A side that n is too
// small to bound is reported with ok false: for p99 at 95% an upper bound
// needs n ≥ 368, and even then it is the sample maximum.
func OrderStatCI(n int, p, conf float64) (lo, hi int, loOK, hiOK bool) {
	if n <= 0 || p <= 0 || p >= 1 {
		return 0, 0, false, false
	}
	alpha := 1 - conf
	b := distuv.Binomial{N: float64(n), P: p}
	cdf := func(k int) float64 { // P(B ≤ k)
		if k < 0 {
			return 0
		}
		return b.CDF(float64(k))
	}
	// lo: largest k in [1, n] with cdf(k-1) ≤ α/2 (cdf is non-decreasing).
	if cdf(0) <= alpha/2 {
		l, h := 1, n
		for l < h {
			m := (l + h + 1) / 2
			if cdf(m-1) <= alpha/2 {
				l = m
			} else {
				h = m - 1
			}
		}
		lo, loOK = l, true
	}
	// hi: smallest k in [1, n] with cdf(k-1) ≥ 1-α/2.
	if cdf(n-1) >= 1-alpha/2 {
		l, h := 1, n
		for l < h {
			m := (l + h) / 2
			if cdf(m-1) >= 1-alpha/2 {
				h = m
			} else {
				l = m + 1
			}
		}
		hi, hiOK = l, true
	}
	return lo, hi, loOK, hiOK
}

// Quantile is one reported percentile with its confidence interval.
type Quantile struct {
	// P is the percentile in percent (99 for p99).
	P     float64 `json:"p"`
	Value float64 `json:"value"`
	// Interval names the headline interval Lo..Hi, the one the reports
	// show: "order_statistic" (CILo..CIHi) or "batch_means"
	// (BatchLo..BatchHi); nil ends are sides the sample cannot bound.
	Interval string   `json:"interval"`
	Lo       *float64 `json:"headline_ci95_lo"`
	Hi       *float64 `json:"headline_ci95_hi"`
	// CILo and CIHi bound the 95% order-statistic interval; nil where the
	// sample is too small to bound that side.
	CILo *float64 `json:"ci95_lo"`
	CIHi *float64 `json:"ci95_hi"`
	// BootLo and BootHi bound the 95% bootstrap interval (moving blocks when
	// the series is correlated in time); nil where none was computed.
	BootLo *float64 `json:"bootstrap_ci95_lo,omitempty"`
	BootHi *float64 `json:"bootstrap_ci95_hi,omitempty"`
	// BatchLo and BatchHi bound the 95% batch-means interval, valid when
	// the series is correlated in time; EffectiveN is the number of
	// independent samples its standard error is worth, and SamplesToBound
	// about how many samples would bound a side it cannot (nil: bounded).
	// All nil where none was computed.
	BatchLo        *float64 `json:"batch_ci95_lo,omitempty"`
	BatchHi        *float64 `json:"batch_ci95_hi,omitempty"`
	EffectiveN     *float64 `json:"effective_n,omitempty"`
	SamplesToBound *int     `json:"samples_to_bound,omitempty"`
	// RelHalfWidth is the bootstrap interval's half-width over the value;
	// NeededN is about how many samples a half-width of Options.Precision
	// needs (half-widths shrink as 1/√n).
	RelHalfWidth *float64 `json:"rel_half_width,omitempty"`
	NeededN      *int     `json:"samples_for_precision,omitempty"`
}

// Distribution summarises one metric's samples.
type Distribution struct {
	N int `json:"n"`
	// Block is the bootstrap's block length in samples (1: independent
	// resampling; 0: no bootstrap for this metric).
	Block int `json:"bootstrap_block,omitempty"`
	// Dependence is the independence test of the series in time order
	// (nil for pooled samples, which have no single order).
	Dependence *Dependence `json:"dependence,omitempty"`
	Mean       float64     `json:"mean"`
	// Std is the population standard deviation (numpy's default, as vLLM
	// reports it); Median is the type-7 p50.
	Std       float64    `json:"std"`
	Median    float64    `json:"median"`
	Max       float64    `json:"max"`
	Quantiles []Quantile `json:"percentiles"`
}

// Summarize sorts x in place and describes it at the given percentiles
// (in percent), each with its 95% order-statistic interval.
func Summarize(x []float64, percentiles []float64) Distribution {
	if len(x) == 0 {
		return Distribution{}
	}
	sortFloatsParallel(x)
	return summarizeSorted(x, percentiles)
}

// summarizeSorted is Summarize of an already sorted sample.
func summarizeSorted(x []float64, percentiles []float64) Distribution {
	d := Distribution{N: len(x)}
	if len(x) == 0 {
		return d
	}
	sum := 0.0
	for _, v := range x {
		sum += v
	}
	d.Mean, d.Max, d.Median = sum/float64(len(x)), x[len(x)-1], Percentile(x, 0.5)
	var ss float64
	for _, v := range x {
		ss += (v - d.Mean) * (v - d.Mean)
	}
	d.Std = math.Sqrt(ss / float64(len(x)))
	for _, pc := range percentiles {
		q := Quantile{P: pc, Value: Percentile(x, pc/100)}
		lo, hi, loOK, hiOK := OrderStatCI(len(x), pc/100, 0.95)
		if loOK {
			q.CILo = new(x[lo-1])
		}
		if hiOK {
			q.CIHi = new(x[hi-1])
		}
		q.Interval, q.Lo, q.Hi = intervalOrderName, q.CILo, q.CIHi
		d.Quantiles = append(d.Quantiles, q)
	}
	return d
}

// summarizePooled is Summarize for values pooled over requests (token
// gaps), plus the batch-means interval with requests as the unit: groups
// are the requests' runs of values, sorted here by send time. The headline
// is batch means unless method is IntervalOrder, since gaps of one request
// are never independent. It sorts values in place.
func summarizePooled(values []float64, groups []requestGroup, percentiles []float64, method IntervalMethod) Distribution {
	groups = slices.Clone(groups)
	slices.SortStableFunc(groups, func(a, b requestGroup) int { return cmp.Compare(a.at, b.at) })
	timeOrdered := slices.Clone(values)
	d := Summarize(values, percentiles)
	ps := make([]float64, len(percentiles))
	for i, pc := range percentiles {
		ps[i] = pc / 100
	}
	if _, bis, ok := pooledBatchMeans(values, timeOrdered, groups, ps, 0.95); ok {
		for i, bi := range bis {
			setBatch(&d.Quantiles[i], bi)
		}
	}
	setHeadlines(&d, method != IntervalOrder)
	return d
}

// setBatch records a batch-means interval on q.
func setBatch(q *Quantile, bi batchInterval) {
	q.EffectiveN = new(bi.effectiveN)
	if bi.loOK {
		q.BatchLo = new(bi.lo)
	}
	if bi.hiOK {
		q.BatchHi = new(bi.hi)
	}
	if bi.toBound > 0 {
		q.SamplesToBound = new(bi.toBound)
	}
}

// SummarizeBootstrap is Summarize plus, for each percentile, a bootstrap
// interval from o (blocks chosen from the data unless o.Block says
// otherwise), the stability figures for a target relative half-width
// precision, the series' independence test, the batch-means interval, and
// the headline interval chosen by method. timeOrdered holds the values in
// the order they happened.
func SummarizeBootstrap(timeOrdered []float64, percentiles []float64, o BootstrapOptions, precision float64, method IntervalMethod) Distribution {
	if len(timeOrdered) < 2 || len(percentiles) == 0 {
		return Summarize(slices.Clone(timeOrdered), percentiles)
	}
	smp := newSample(timeOrdered)
	d := summarizeSorted(smp.sorted, percentiles)
	order, ps := ascending(percentiles)
	se, block := smp.cdfStandardErrors(ps, o)
	d.Block = block
	dep := smp.dependenceOf()
	d.Dependence = &dep
	if d.N >= minBatchSamples {
		for k, bi := range smp.batchMeans(ps, dep.Batches, 0.95) {
			setBatch(&d.Quantiles[order[k]], bi)
		}
	}
	chooseHeadline(&d, method)
	for k, i := range order {
		lo, hi, loOK, hiOK := smp.woodruff(ps[k], se[k], 0.95)
		setBootstrap(&d.Quantiles[i], lo, hi, loOK, hiOK, d.N, precision)
	}
	return d
}

// ascending orders percentiles (in percent) for the bootstrap, whose
// thresholds must ascend: ps[k] is percentiles[order[k]] as a fraction.
func ascending(percentiles []float64) (order []int, ps []float64) {
	order = make([]int, len(percentiles))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(percentiles[a], percentiles[b]) })
	ps = make([]float64, len(order))
	for k, i := range order {
		ps[k] = percentiles[i] / 100
	}
	return order, ps
}

// setBootstrap records a bootstrap interval on q, and the stability
// figures that follow from it for n samples and a target relative
// half-width precision.
func setBootstrap(q *Quantile, lo, hi float64, loOK, hiOK bool, n int, precision float64) {
	if loOK {
		q.BootLo = new(lo)
	}
	if !hiOK {
		return // the upper end is beyond the sample: no stability figure
	}
	q.BootHi = new(hi)
	if q.Value > 0 {
		rel := (hi - q.Value) / q.Value // one-sided when the lower end is unbounded
		if loOK {
			rel = (hi - lo) / 2 / q.Value
		}
		q.RelHalfWidth = new(rel)
		if precision > 0 {
			q.NeededN = new(int(math.Ceil(float64(n) * (rel / precision) * (rel / precision))))
		}
	}
}
