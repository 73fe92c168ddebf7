package analyze

import (
	"fmt"
	"math"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"
)

// IntervalMethod chooses the interval a report shows for each per-request
// percentile (its headline interval); JSON carries every computed interval
// whichever is chosen.
type IntervalMethod string

const (
	// IntervalAuto shows the order-statistic interval when the run's
	// latencies look independent in time and the batch-means interval when
	// they do not.
	IntervalAuto IntervalMethod = "auto"
	// IntervalOrder always shows the order-statistic interval, which
	// assumes independent requests.
	IntervalOrder IntervalMethod = "order"
	// IntervalBatch always shows the batch-means interval.
	IntervalBatch IntervalMethod = "batch"
)

// Names of the intervals a Quantile's headline can be (Quantile.Interval).
const (
	intervalOrderName = "order_statistic"
	intervalBatchName = "batch_means"
)

// Dependence is what the independence test found in one metric's series,
// in the order the requests were sent.
type Dependence struct {
	// Lag1 is the lag-1 autocorrelation of the series' ranks; Limit is
	// 2/√n, beyond which the series is called dependent (a 5% test).
	Lag1  float64 `json:"lag1_rank_autocorrelation"`
	Limit float64 `json:"limit"`
	// Independent: |Lag1| < Limit.
	Independent bool `json:"independent"`
	// Batches is how many consecutive batches the batch-means interval
	// splits the series into.
	Batches int `json:"batches"`
}

// The batch-means interval for a percentile is a Woodruff interval on the
// empirical CDF, F̂(q̂p) ± t·se mapped back through the sorted sample, where
// se is the standard error of the mean of the indicators 1{x_t ≤ q̂p}
// estimated from k consecutive batches, and t the Student quantile with
// k−1 degrees of freedom: batches long against the series' memory are
// nearly independent, and the t quantile pays for estimating se from only
// k of them. It covers where the moving-block bootstrap of the same CDF
// does not (docs/measurements.md, "Headline intervals").

// batchesFor is the number of batches for n samples: n/500, at least 10
// and at most 30, so batches stay long against a queue's memory while the
// variance estimate gains degrees of freedom on long runs.
func batchesFor(n int) int { return min(30, max(10, n/500)) }

// minBatchSamples is the smallest series the batch-means interval is
// computed for: 10 batches of at least 5.
const minBatchSamples = 50

// dependenceOf tests the series for serial correlation by the lag-1
// autocorrelation of its ranks, which one extreme value cannot dominate;
// tied values share their mean rank, so a constant series is not called
// dependent.
func (s *sample) dependenceOf() Dependence {
	n := len(s.rank)
	d := Dependence{Limit: 2 / math.Sqrt(float64(n)), Batches: batchesFor(n), Independent: true}
	if n < 3 {
		return d
	}
	mid := make([]float64, n) // mid[r]: the mean rank of sorted[r]'s ties
	for i := 0; i < n; {
		j := i + 1
		for j < n && s.sorted[j] == s.sorted[i] {
			j++
		}
		for k := i; k < j; k++ {
			mid[k] = float64(i+j-1) / 2
		}
		i = j
	}
	mean := float64(n-1) / 2
	var c0, c1 float64
	for i, r := range s.rank {
		dv := mid[r] - mean
		c0 += dv * dv
		if i > 0 {
			c1 += dv * (mid[s.rank[i-1]] - mean)
		}
	}
	if c0 > 0 {
		d.Lag1 = c1 / c0
	}
	d.Independent = math.Abs(d.Lag1) < d.Limit
	return d
}

// batchInterval is the batch-means interval of one percentile.
type batchInterval struct {
	lo, hi     float64
	loOK, hiOK bool
	// se is the standard error of F̂ at the estimate; effectiveN is
	// F̂(1−F̂)/se², the number of independent samples worth as much.
	se, effectiveN float64
	// toBound is about how many samples would bound an unbounded side
	// (0 when both are bounded).
	toBound int
}

// batchMeans computes the batch-means interval at level conf for each
// level ps[j] (fractions) with k batches.
func (s *sample) batchMeans(ps []float64, k int, conf float64) []batchInterval {
	n := len(s.sorted)
	out := make([]batchInterval, len(ps))
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(k - 1)}.Quantile(1 - (1-conf)/2)
	means := make([]float64, k)
	for j, p := range ps {
		q := Percentile(s.sorted, p)
		threshold := int32(atOrBelow(s.sorted, q))
		f := float64(threshold) / float64(n)
		for b := range k {
			lo, hi := b*n/k, (b+1)*n/k
			below := 0
			for _, r := range s.rank[lo:hi] {
				if r < threshold {
					below++
				}
			}
			means[b] = float64(below) / float64(hi-lo)
		}
		out[j] = woodruffFromShares(sortedQuantile(s.sorted), n, p, f, means, t)
	}
	return out
}

// chooseHeadline sets each quantile's headline interval by method, given
// the series' dependence.
func chooseHeadline(d *Distribution, method IntervalMethod) {
	setHeadlines(d, method == IntervalBatch || (method != IntervalOrder && d.Dependence != nil && !d.Dependence.Independent))
}

// setHeadlines makes each quantile's headline its batch-means interval
// where batch is set and one was computed, its order-statistic one
// otherwise.
func setHeadlines(d *Distribution, batch bool) {
	for i := range d.Quantiles {
		q := &d.Quantiles[i]
		if batch && q.EffectiveN != nil { // batch means were computed
			q.Interval, q.Lo, q.Hi = intervalBatchName, q.BatchLo, q.BatchHi
			continue
		}
		q.Interval, q.Lo, q.Hi = intervalOrderName, q.CILo, q.CIHi
	}
}

// requestGroup is one request's run of pooled values (its token gaps):
// values[start : start+n], the request sent at at.
type requestGroup struct {
	at       int64
	start, n int
}

// pooledBatchMeans is the batch-means interval for pooled values with
// requests as the unit: the gaps within one request are strongly alike, so
// requests in time order, not gaps, are split into k batches (batchesFor
// the number of requests), and each batch's share of gaps at or below the
// estimate is its gaps below over its gaps. sorted is values sorted; groups
// are in time order. ok is false for fewer than minBatchSamples requests.
func pooledBatchMeans(sorted, values []float64, groups []requestGroup, ps []float64, conf float64) (k int, out []batchInterval, ok bool) {
	if len(groups) < minBatchSamples || len(sorted) == 0 {
		return 0, nil, false
	}
	k = batchesFor(len(groups))
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(k - 1)}.Quantile(1 - (1-conf)/2)
	n := len(sorted)
	shares := make([]float64, k)
	for _, p := range ps {
		q := Percentile(sorted, p)
		f := float64(atOrBelow(sorted, q)) / float64(n)
		for b := range k {
			below, all := 0, 0
			for _, g := range groups[b*len(groups)/k : (b+1)*len(groups)/k] {
				for _, v := range values[g.start : g.start+g.n] {
					if v <= q {
						below++
					}
				}
				all += g.n
			}
			shares[b] = f // a batch of requests without gaps says nothing
			if all > 0 {
				shares[b] = float64(below) / float64(all)
			}
		}
		out = append(out, woodruffFromShares(sortedQuantile(sorted), n, p, f, shares, t))
	}
	return k, out, true
}

// woodruffFromShares maps p ± t·se through the quantile function of n
// values, se being the standard error of the mean of the batch shares; f
// is F̂ at the estimate.
func woodruffFromShares(quantile quantileFunc, n int, p, f float64, shares []float64, t float64) batchInterval {
	k := float64(len(shares))
	var m, ss float64
	for _, v := range shares {
		m += v
	}
	m /= k
	for _, v := range shares {
		ss += (v - m) * (v - m)
	}
	se := math.Sqrt(ss / (k - 1) / k)
	bi := batchInterval{se: se, effectiveN: float64(n)}
	if se > 0 {
		bi.effectiveN = f * (1 - f) / (se * se)
	}
	bi.lo, bi.hi, bi.loOK, bi.hiOK = woodruffAt(quantile, p, se, t)
	if !bi.hiOK || !bi.loOK {
		// se shrinks as 1/√n: the side is bounded once t·se fits
		// within the distance to 0 or 1.
		room := math.Min(1-p, p)
		if !bi.hiOK {
			room = 1 - p
		}
		if room > 0 {
			bi.toBound = int(math.Ceil(float64(n) * (t * se / room) * (t * se / room)))
		}
	}
	return bi
}

// unboundedNotes says which of a metric's percentiles the sample cannot
// bound from above: for batch-means headlines one note with the requests
// each would need, for order statistics one note per percentile.
func unboundedNotes(name string, d Distribution) []string {
	var notes, needs []string
	for _, q := range d.Quantiles {
		if q.Hi != nil {
			continue
		}
		if q.Interval == intervalBatchName && q.SamplesToBound != nil {
			needs = append(needs, fmt.Sprintf("p%g (about %d requests would)", q.P, *q.SamplesToBound))
			continue
		}
		notes = append(notes, fmt.Sprintf("%s p%g: %d samples cannot bound its upper end (a 95%% interval needs at least %d): treat it as a floor",
			name, q.P, d.N, minSamplesForUpper(q.P/100)))
	}
	if len(needs) > 0 {
		lag1 := 0.0
		if d.Dependence != nil {
			lag1 = d.Dependence.Lag1
		}
		notes = append(notes, fmt.Sprintf("%s: its %d samples are correlated in time (lag-1 rank autocorrelation %.2f) and cannot bound the upper end of %s: treat those as floors",
			name, d.N, lag1, strings.Join(needs, ", ")))
	}
	return notes
}
