package synth

import (
	"context"
	"fmt"
	"slices"
	"time"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/servetrace/servetrace/internal/rank"
	"github.com/servetrace/servetrace/trace"
)

// FitOptions controls Fit.
type FitOptions struct {
	// Knots is the number of quantile-table knots per marginal (default 257).
	Knots int
}

// Fit reads the bucket at dir and fits a Model to it.
func Fit(ctx context.Context, dir string, opts FitOptions) (*Model, error) {
	if opts.Knots < 2 {
		opts.Knots = 257
	}
	b, err := trace.OpenBucket(dir)
	if err != nil {
		return nil, err
	}
	n := b.Manifest.Rows
	ts := make([]float64, 0, n)
	in := make([]float64, 0, n)
	out := make([]float64, 0, n)
	apis := map[string]float64{}
	models := map[string]float64{}
	streams := 0.0
	err = b.Scan(ctx, func(r *trace.Request) error {
		ts = append(ts, float64(r.TS)/1e6)
		in = append(in, float64(r.InputTokens))
		out = append(out, float64(r.OutputTokens))
		apis[r.API]++
		if r.Model != "" {
			models[r.Model]++
		}
		if r.Stream {
			streams++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fit %s: %w", dir, err)
	}
	if len(ts) < 2 {
		return nil, fmt.Errorf("fit %s: %d requests; a fit needs at least 2", dir, len(ts))
	}
	arr, err := fitPoisson(ts)
	if err != nil {
		return nil, fmt.Errorf("fit %s: %w", dir, err)
	}
	var res int64
	for _, s := range b.Manifest.Sources {
		res = max(res, s.TimeResolutionUs)
	}
	total := float64(len(ts))
	for k := range apis {
		apis[k] /= total
	}
	for k := range models {
		models[k] /= total
	}
	return &Model{
		Version:   ModelVersion,
		CreatedAt: time.Now().UTC().Truncate(time.Second),
		Source:    SourceInfo{Dir: dir, Rows: int64(len(ts)), Start: b.Manifest.Start, End: b.Manifest.End, TimeResolutionUs: res},
		Arrivals:  arr,
		Lengths: LengthModel{
			Input:    marginal(in, opts.Knots),
			Output:   marginal(out, opts.Knots),
			Spearman: rank.Spearman(in, out),
		},
		Mix: Mix{API: apis, StreamShare: streams / total, Models: models},
	}, nil
}

// fitPoisson fits a constant rate to sorted arrival times in seconds. The
// maximum-likelihood rate given n arrivals observed over the span between the
// first and last is (n-1)/span; the exact 95% interval comes from the
// chi-square distribution of the summed gaps.
func fitPoisson(ts []float64) (ArrivalModel, error) {
	span := ts[len(ts)-1] - ts[0]
	if !(span > 0) {
		return ArrivalModel{}, fmt.Errorf("all %d arrivals share one timestamp; a rate needs a time span", len(ts))
	}
	gaps := make([]float64, len(ts)-1)
	for i := range gaps {
		gaps[i] = ts[i+1] - ts[i]
	}
	k := float64(len(gaps))
	mean, sd := stat.MeanStdDev(gaps, nil)
	// The sum of k Exp(λ) gaps is Gamma(k, λ), so 2λ·span ~ χ²(2k).
	lo := distuv.ChiSquared{K: 2 * k}.Quantile(0.025) / (2 * span)
	hi := distuv.ChiSquared{K: 2 * k}.Quantile(0.975) / (2 * span)
	a := ArrivalModel{Kind: "poisson", RatePerS: k / span, RateCI95: [2]float64{lo, hi}, DurationS: span, InterArrivalCV: sd / mean}
	if a.InterArrivalCV > 1.5 {
		a.Note = fmt.Sprintf("inter-arrival CV %.1f is far above Poisson's 1: the trace is bursty and a constant-rate Poisson model understates its bursts", a.InterArrivalCV)
	}
	return a, nil
}

// marginal builds a quantile table with k knots from x (type-1 quantiles:
// every knot is an observed value, so atoms such as a context cap survive).
func marginal(x []float64, k int) Marginal {
	s := slices.Clone(x)
	slices.Sort(s)
	knots := make([]float64, k)
	for i := range knots {
		p := float64(i) / float64(k-1)
		if i == 0 {
			knots[i] = s[0] // type 1 at p=0 is the minimum
			continue
		}
		knots[i] = stat.Quantile(p, stat.Empirical, s, nil)
	}
	return Marginal{N: int64(len(s)), Mean: stat.Mean(s, nil), Knots: knots}
}
