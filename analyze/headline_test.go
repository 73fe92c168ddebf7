package analyze

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/servetrace/servetrace/trace"
)

// latencySeries is a generator of time-ordered latencies with a known
// marginal quantile function.
type latencySeries struct {
	name     string
	fill     func(rng *rand.Rand, x []float64)
	quantile func(p float64) float64
}

// logAR1 is exp(σ·z_t) with z an AR(1) of unit variance and coefficient
// φ (φ = 0: independent lognormal).
func logAR1(phi, sigma float64) latencySeries {
	return latencySeries{
		name: fmt.Sprintf("lognormal AR(1) φ=%g", phi),
		fill: func(rng *rand.Rand, x []float64) {
			z := rng.NormFloat64()
			for i := range x {
				z = phi*z + math.Sqrt(1-phi*phi)*rng.NormFloat64()
				x[i] = math.Exp(sigma * z)
			}
		},
		quantile: func(p float64) float64 { return math.Exp(sigma * distuv.UnitNormal.Quantile(p)) },
	}
}

// calmQueued is a two-regime Markov-modulated series: calm requests are
// lognormal(0, 0.3), queued ones lognormal(1, 0.5); each request the calm
// regime turns queued with probability up and the queued one calm with
// probability down, started from the stationary mix.
func calmQueued(up, down float64) latencySeries {
	share := up / (up + down)
	cdf := func(x float64) float64 {
		l := math.Log(x)
		return (1-share)*distuv.UnitNormal.CDF(l/0.3) + share*distuv.UnitNormal.CDF((l-1)/0.5)
	}
	return latencySeries{
		name: fmt.Sprintf("calm/queued %g/%g", up, down),
		fill: func(rng *rand.Rand, x []float64) {
			queued := rng.Float64() < share
			for i := range x {
				if queued {
					x[i] = math.Exp(1 + 0.5*rng.NormFloat64())
					queued = rng.Float64() >= down
				} else {
					x[i] = math.Exp(0.3 * rng.NormFloat64())
					queued = rng.Float64() < up
				}
			}
		},
		quantile: func(p float64) float64 { // bisection on the mixture's CDF
			lo, hi := 1e-3, 1e3
			for range 200 {
				if m := math.Sqrt(lo * hi); cdf(m) < p {
					lo = m
				} else {
					hi = m
				}
			}
			return math.Sqrt(lo * hi)
		},
	}
}

// TestLongHeadlineCoverage draws 300 series of 5,000 latencies from each
// process and checks that the headline 95% interval (auto) covers the true
// p50, p90 and p99 in 92–98% of the trials where it is bounded, and that it
// is never the order-statistic interval where the test found dependence.
// The calm/queued process switches regimes about 80 times per series. At
// 2,000 latencies two cells fall to about 0.91 (docs/measurements.md).
func TestLongHeadlineCoverage(t *testing.T) {
	skipLong(t)
	t.Parallel()
	const trials, n = 300, 5000
	pcts := []float64{50, 90, 99}
	for _, proc := range []latencySeries{logAR1(0, 0.5), logAR1(0.5, 0.5), logAR1(0.9, 0.5), calmQueued(0.02, 0.1)} {
		var covered, bounded [3]int
		batch := 0
		x := make([]float64, n)
		for trial := range trials {
			proc.fill(rand.New(rand.NewPCG(uint64(trial), 2026)), x)
			d := SummarizeBootstrap(x, pcts, BootstrapOptions{Resamples: 100, Seed: uint64(trial)}, 0.05, IntervalAuto)
			if !d.Dependence.Independent {
				batch++
			}
			for j, q := range d.Quantiles {
				if !d.Dependence.Independent && q.Interval != intervalBatchName {
					t.Fatalf("%s trial %d: dependence found (r1 %.3f) but the headline is %s", proc.name, trial, d.Dependence.Lag1, q.Interval)
				}
				if q.Lo == nil || q.Hi == nil {
					continue
				}
				bounded[j]++
				if truth := proc.quantile(q.P / 100); *q.Lo <= truth && truth <= *q.Hi {
					covered[j]++
				}
			}
		}
		for j, p := range pcts {
			rate := float64(covered[j]) / float64(bounded[j])
			t.Logf("%s: p%g covered in %.3f of %d bounded trials (%.0f%% unbounded); batch means chosen in %d of %d",
				proc.name, p, rate, bounded[j], 100*(1-float64(bounded[j])/trials), batch, trials)
			if rate < 0.92 || rate > 0.98 {
				t.Errorf("%s: the headline interval covers the true p%g in %.3f of bounded trials, want 0.92-0.98", proc.name, p, rate)
			}
		}
	}
}

func TestDependenceOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ar, constant := make([]float64, 4000), make([]float64, 4000)
	z := 0.0
	for i := range ar {
		z = 0.5*z + rng.NormFloat64()
		ar[i] = math.Exp(z)
		constant[i] = 0.1
	}
	// Ranks of an AR(1) at 0.5 on the log scale correlate at lag 1 by
	// (6/π)·asin(0.25) ≈ 0.48 (Spearman's rho of a bivariate normal).
	if d := newSample(ar).dependenceOf(); d.Independent || d.Lag1 < 0.44 || d.Lag1 > 0.52 {
		t.Errorf("AR(1) 0.5: lag-1 rank autocorrelation %.3f (independent %v), want 0.44-0.52 and dependent", d.Lag1, d.Independent)
	}
	// Ties share their mean rank: a constant series is not dependent.
	if d := newSample(constant).dependenceOf(); !d.Independent || d.Lag1 != 0 {
		t.Errorf("constant series: r1 %v, independent %v", d.Lag1, d.Independent)
	}
	// Independent series: a 5% test rejects about 5% of them.
	rejected := 0
	x := make([]float64, 4000)
	for range 400 {
		for i := range x {
			x[i] = rng.ExpFloat64()
		}
		d := newSample(x).dependenceOf()
		if d.Limit != 2/math.Sqrt(4000) || d.Batches != 10 {
			t.Fatalf("limit %v batches %d, want 2/√n and 10", d.Limit, d.Batches)
		}
		if !d.Independent {
			rejected++
		}
	}
	if rejected < 8 || rejected > 36 {
		t.Errorf("independence rejected for %d of 400 independent series, want about 20 (8-36)", rejected)
	}
}

// TestBatchMeansHandComputed: the values 1..100 in time order, 10 batches
// of 10. The p50 estimate is 50.5; the first five batches lie wholly at or
// below it and the last five above, so the batch means are five 1s and
// five 0s, their mean 0.5, and se = √(Σ(m−0.5)² / 9 / 10) = √(2.5/90).
func TestBatchMeansHandComputed(t *testing.T) {
	x := make([]float64, 100)
	for i := range x {
		x[i] = float64(i + 1)
	}
	s := newSample(x)
	bi := s.batchMeans([]float64{0.5}, 10, 0.95)[0]
	wantSE := math.Sqrt(2.5 / 90)
	if math.Abs(bi.se-wantSE) > 1e-12 {
		t.Fatalf("se %v, want %v", bi.se, wantSE)
	}
	tq := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: 9}.Quantile(0.975) // 2.262
	lo, hi := Percentile(s.sorted, 0.5-tq*wantSE), Percentile(s.sorted, 0.5+tq*wantSE)
	if !bi.loOK || !bi.hiOK || math.Abs(bi.lo-lo) > 1e-9 || math.Abs(bi.hi-hi) > 1e-9 {
		t.Errorf("interval [%v, %v], want [%v, %v]", bi.lo, bi.hi, lo, hi)
	}
	if want := 0.25 / (wantSE * wantSE); math.Abs(bi.effectiveN-want) > 1e-9 {
		t.Errorf("effective n %v, want %v (F̂(1−F̂)/se²)", bi.effectiveN, want)
	}
	// At p99 the upper end is past the sample: about n·(t·se/(1−p))²
	// samples would bound it.
	bi = s.batchMeans([]float64{0.99}, 10, 0.95)[0]
	if bi.hiOK || bi.toBound != int(math.Ceil(100*math.Pow(tq*bi.se/0.01, 2))) {
		t.Errorf("p99: hiOK %v, toBound %d", bi.hiOK, bi.toBound)
	}
}

// TestIntervalMethodChoosesTheHeadline: auto follows the dependence test,
// order and batch force one interval whatever the test says.
func TestIntervalMethodChoosesTheHeadline(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	x := make([]float64, 3000)
	logAR1(0.9, 0.5).fill(rng, x)
	for _, c := range []struct {
		method IntervalMethod
		want   string
	}{{IntervalAuto, intervalBatchName}, {IntervalOrder, intervalOrderName}, {IntervalBatch, intervalBatchName}} {
		d := SummarizeBootstrap(x, []float64{50, 99}, BootstrapOptions{Resamples: 100, Seed: 1}, 0.05, c.method)
		for _, q := range d.Quantiles {
			lo, hi := q.CILo, q.CIHi
			if c.want == intervalBatchName {
				lo, hi = q.BatchLo, q.BatchHi
			}
			if q.Interval != c.want || q.Lo != lo || q.Hi != hi {
				t.Errorf("%s p%g: headline %s [%v, %v], want %s", c.method, q.P, q.Interval, q.Lo, q.Hi, c.want)
			}
		}
	}
}

// TestCorrelatedRunGetsBatchHeadline runs compute on 3,000 requests whose
// TTFTs follow an AR(1) at 0.9 on the log scale: the TTFT headline is
// batch means, the table's cells and the notes say how many requests would
// bound the p99.9, and forcing order statistics shows those instead.
func TestCorrelatedRunGetsBatchHeadline(t *testing.T) {
	const n, ms = 3000, int64(1e6)
	ttft := make([]float64, n)
	logAR1(0.9, 0.5).fill(rand.New(rand.NewPCG(4, 4)), ttft)
	rows := make([]trace.Result, n)
	for i := range rows {
		sent, first := int64(i)*10*ms, int64(i)*10*ms+int64(ttft[i]*100*float64(ms))
		rows[i] = trace.Result{Identity: trace.Identity{RequestID: fmt.Sprint(i)}, Shape: trace.Shape{Stream: true}, ScheduledNs: sent, AdmittedNs: sent,
			SentNs: ptr(sent), FirstChunkNs: ptr(first), FirstTokenNs: ptr(first), DoneNs: ptr(first + 5*ms), TokenTimesNs: []int64{first - sent, first - sent + 5*ms},
			ObservedOutputTokens: 2, PromptTokensSent: 10, Outcome: trace.OutcomeOK, HTTPStatus: 200}
	}
	pcts := []float64{50, 99, 99.9}
	rep := &Report{Metrics: map[string]Distribution{}}
	compute(rep, columnsOf(rows), Options{TTFTMode: TTFTFirstContent, Percentiles: pcts, Bootstrap: BootstrapOptions{Resamples: 200}, Precision: 0.05, Interval: IntervalAuto})
	d := rep.Metrics["ttft_ms"]
	if d.Dependence == nil || d.Dependence.Independent || d.Dependence.Lag1 < 0.8 {
		t.Fatalf("dependence %+v, want lag-1 rank autocorrelation near 0.89", d.Dependence)
	}
	top := d.Quantiles[2]
	if top.Interval != intervalBatchName || top.Hi != nil || top.SamplesToBound == nil || *top.SamplesToBound <= n || top.EffectiveN == nil || *top.EffectiveN >= n {
		t.Fatalf("p99.9 headline %+v, want batch means, unbounded above, with more than %d requests to bound it", top, n)
	}
	if cell := quantileCell(top); !strings.HasPrefix(cell, "≥") || !strings.Contains(cell, "bound needs ~") {
		t.Errorf("p99.9 cell %q", cell)
	}
	if !slices.ContainsFunc(rep.Notes, func(s string) bool {
		return strings.HasPrefix(s, "ttft_ms:") && strings.Contains(s, "correlated in time") && strings.Contains(s, fmt.Sprintf("p99.9 (about %d requests would)", *top.SamplesToBound))
	}) {
		t.Errorf("no note on the correlated p99.9: %q", rep.Notes)
	}
	rep = &Report{Metrics: map[string]Distribution{}}
	compute(rep, columnsOf(rows), Options{TTFTMode: TTFTFirstContent, Percentiles: pcts, Bootstrap: BootstrapOptions{Resamples: 200}, Precision: 0.05, Interval: IntervalOrder})
	if q := rep.Metrics["ttft_ms"].Quantiles[0]; q.Interval != intervalOrderName || q.Lo != q.CILo || q.BatchLo == nil {
		t.Errorf("forced order: p50 %+v, want the order-statistic headline and the batch interval still in JSON", q)
	}
}

// TestLongPooledITLCoverage: 300 runs of 1,000 requests, each with 5–50
// token gaps exp(a + e), a request's own speed a ~ N(0, 0.3²) shared by
// its gaps and e ~ N(0, 0.2²) per gap, so the pooled gaps are lognormal
// with σ = √0.13 but far from independent. The headline (batch means with
// requests as the unit) must cover the true p50, p90 and p99 in 92–98% of
// runs; the order-statistic interval, which counts every gap as
// independent, is logged for contrast.
func TestLongPooledITLCoverage(t *testing.T) {
	skipLong(t)
	t.Parallel()
	const trials, requests = 300, 1000
	pcts := []float64{50, 90, 99}
	sigma := math.Sqrt(0.13)
	var covered, orderCovered [3]int
	for trial := range trials {
		rng := rand.New(rand.NewPCG(uint64(trial), 5150))
		var values []float64
		var groups []requestGroup
		for r := range requests {
			a, n := 0.3*rng.NormFloat64(), 5+rng.IntN(46)
			groups = append(groups, requestGroup{at: int64(r), start: len(values), n: n})
			for range n {
				values = append(values, math.Exp(a+0.2*rng.NormFloat64()))
			}
		}
		d := summarizePooled(values, groups, pcts, IntervalAuto)
		for j, q := range d.Quantiles {
			truth := math.Exp(sigma * distuv.UnitNormal.Quantile(q.P/100))
			if q.Interval != intervalBatchName || q.Lo == nil || q.Hi == nil {
				t.Fatalf("trial %d p%g: headline %s [%v, %v], want a bounded batch-means interval", trial, q.P, q.Interval, q.Lo, q.Hi)
			}
			if *q.Lo <= truth && truth <= *q.Hi {
				covered[j]++
			}
			if *q.CILo <= truth && truth <= *q.CIHi {
				orderCovered[j]++
			}
		}
	}
	for j, p := range pcts {
		rate := float64(covered[j]) / trials
		t.Logf("pooled ITL p%g: batch means over requests cover %.3f, order statistics over gaps %.3f", p, rate, float64(orderCovered[j])/trials)
		if rate < 0.92 || rate > 0.98 {
			t.Errorf("pooled ITL p%g: the headline covers %.3f, want 0.92-0.98", p, rate)
		}
	}
}
