package synth

import (
	"context"
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize"
)

// Periods of the Fourier harmonics, in seconds.
const (
	daySeconds  = 86400.0
	weekSeconds = 7 * daySeconds
)

// Intensity is the deterministic part of the arrival rate: how the expected
// rate moves with the time of day and week (Fourier) or, for traces shorter
// than a day, through the trace (piecewise constant).
type Intensity struct {
	// Kind is "fourier" (log-linear in daily and weekly harmonics of the
	// absolute UTC time) or "piecewise" (constant over equal pieces of the
	// fitted span, measured from the trace's start).
	Kind string `json:"kind"`
	// BinSeconds is the width of the count bins the Poisson likelihood was
	// maximised over.
	BinSeconds float64 `json:"bin_s"`
	// DailyHarmonics and WeeklyHarmonics are the numbers of harmonics kept
	// (fourier only).
	DailyHarmonics  int `json:"daily_harmonics,omitempty"`
	WeeklyHarmonics int `json:"weekly_harmonics,omitempty"`
	// Coef are the log-rate coefficients (fourier): intercept, then for each
	// daily harmonic h its cos and sin coefficients, then the weekly ones.
	// log λ(t) = Coef[0] + Σ_h Coef[2h-1]·cos(2πht/P) + Coef[2h]·sin(2πht/P).
	Coef []float64 `json:"coef,omitempty"`
	// CoefSE are the standard errors of Coef from the inverse Fisher
	// information, inflated by the overdispersion factor (quasi-Poisson).
	CoefSE []float64 `json:"coef_se,omitempty"`
	// PieceRates are the rates (requests/s) of the equal pieces of SpanS
	// (piecewise only).
	PieceRates []float64 `json:"piece_rates_per_s,omitempty"`
	// SpanS is the fitted span in seconds; past it a piecewise intensity
	// holds its mean rate.
	SpanS float64 `json:"span_s"`
	// MeanRatePerS is the mean rate over the fitted span.
	MeanRatePerS float64 `json:"mean_rate_per_s"`
	// Overdispersion is the Pearson χ² of the richest candidate over its
	// degrees of freedom (at least 1): how much burstier than Poisson the
	// binned counts are. Model choice uses QAIC = -2·logL/Overdispersion + 2k,
	// which is AIC when the counts are Poisson.
	Overdispersion float64 `json:"overdispersion"`
	// Candidates lists every model tried with its QAIC.
	Candidates []IntensityCandidate `json:"candidates"`
}

// IntensityCandidate is one intensity model tried by the fit.
type IntensityCandidate struct {
	Name   string  `json:"name"`
	Params int     `json:"params"`
	LogLik float64 `json:"log_lik"`
	QAIC   float64 `json:"qaic"`
}

// Rate returns the intensity at t: absolute Unix seconds for a fourier
// intensity, seconds since the trace start for a piecewise one.
func (in *Intensity) Rate(t float64) float64 {
	switch in.Kind {
	case "fourier":
		return math.Exp(fourierDot(in.Coef, in.DailyHarmonics, in.WeeklyHarmonics, t))
	default:
		k := len(in.PieceRates)
		if k == 0 {
			return in.MeanRatePerS
		}
		if t < 0 || t >= in.SpanS {
			return in.MeanRatePerS
		}
		return in.PieceRates[min(k-1, int(t/in.SpanS*float64(k)))]
	}
}

func fourierFeatures(dst []float64, hd, hw int, t float64) []float64 {
	dst = append(dst[:0], 1)
	for h := 1; h <= hd; h++ {
		a := 2 * math.Pi * float64(h) * t / daySeconds
		dst = append(dst, math.Cos(a), math.Sin(a))
	}
	for h := 1; h <= hw; h++ {
		a := 2 * math.Pi * float64(h) * t / weekSeconds
		dst = append(dst, math.Cos(a), math.Sin(a))
	}
	return dst
}

func fourierDot(coef []float64, hd, hw int, t float64) float64 {
	var buf [64]float64
	x := fourierFeatures(buf[:0], hd, hw, t)
	s := 0.0
	for i, v := range x {
		if i < len(coef) {
			s += coef[i] * v
		}
	}
	return s
}

// binnedCounts holds arrivals counted in equal bins: Start is the first bin's
// start (absolute Unix seconds).
type binnedCounts struct {
	Start, Width float64
	Counts       []float64
}

func (b *binnedCounts) mid(i int) float64 { return b.Start + (float64(i)+0.5)*b.Width }

// maxIntensityBins bounds the count bins of the intensity fit: a long span
// gets wider bins, so the work follows the rows, not the span.
const maxIntensityBins = 20_000

// fitIntensity chooses and fits the deterministic intensity to binned counts
// over a span of spanS seconds starting at start (absolute Unix seconds).
func fitIntensity(ctx context.Context, b binnedCounts, spanS float64) (Intensity, error) {
	total := 0.0
	for _, c := range b.Counts {
		total += c
	}
	if total == 0 || spanS <= 0 {
		return Intensity{}, fmt.Errorf("no arrivals to fit an intensity to")
	}
	mean := total / spanS
	if spanS >= daySeconds {
		return fitFourier(ctx, b, spanS, mean)
	}
	return fitPiecewise(b, spanS, mean), nil
}

// minBinMean floors a bin's expected count in the likelihood and the
// dispersion: a mean that underflows to 0 would make them infinite.
const minBinMean = 1e-300

// poissonLogLik is Σ y log μ − μ − log y! over bins.
func poissonLogLik(y, mu []float64) float64 {
	ll := 0.0
	for i := range y {
		lg, _ := math.Lgamma(y[i] + 1)
		ll += y[i]*math.Log(max(mu[i], minBinMean)) - mu[i] - lg
	}
	return ll
}

// maxOverdispersion bounds the Pearson dispersion factor: beyond it the
// counts say nothing more, and QAIC must stay finite.
const maxOverdispersion = 1e6

func pearsonDispersion(y, mu []float64, params int) float64 {
	chi := 0.0
	for i := range y {
		chi += (y[i] - mu[i]) * (y[i] - mu[i]) / max(mu[i], minBinMean)
	}
	df := len(y) - params
	if df <= 0 || math.IsNaN(chi) {
		return 1
	}
	return min(max(1, chi/float64(df)), maxOverdispersion)
}

// fitFourier fits log-linear daily (and, over two weeks or more, weekly)
// harmonics by Poisson maximum likelihood and keeps the set with the lowest
// QAIC. A harmonic shorter than four bins is not fitted, and a fit whose
// coefficients leave the model's ranges is dropped.
func fitFourier(ctx context.Context, b binnedCounts, spanS, mean float64) (Intensity, error) {
	maxD, maxW := min(4, int(daySeconds/(4*b.Width))), 0
	if spanS >= 2*weekSeconds {
		maxW = min(2, int(weekSeconds/(4*b.Width)))
	}
	type fitted struct {
		hd, hw int
		coef   []float64
		mu     []float64
		ll     float64
		info   *mat.SymDense
	}
	var fits []fitted
	for hd := 0; hd <= maxD; hd++ {
		for hw := 0; hw <= maxW; hw++ {
			coef, mu, info, err := poissonGLM(ctx, b, hd, hw, math.Log(mean))
			if err := ctx.Err(); err != nil {
				return Intensity{}, err
			}
			if err != nil {
				return Intensity{}, fmt.Errorf("fit %d daily, %d weekly harmonics: %w", hd, hw, err)
			}
			in := Intensity{Kind: "fourier", DailyHarmonics: hd, WeeklyHarmonics: hw, Coef: coef, MeanRatePerS: mean}
			var c checker
			in.checkCoef(&c)
			if ll := poissonLogLik(b.Counts, mu); len(c.probs) == 0 && !math.IsInf(ll, 0) && !math.IsNaN(ll) || hd+hw == 0 {
				fits = append(fits, fitted{hd, hw, coef, mu, ll, info})
			}
		}
	}
	richest := fits[len(fits)-1]
	c := pearsonDispersion(b.Counts, richest.mu, len(richest.coef))
	in := Intensity{Kind: "fourier", BinSeconds: b.Width, SpanS: spanS, MeanRatePerS: mean, Overdispersion: c}
	best := -1
	for i, f := range fits {
		k := len(f.coef)
		q := -2*f.ll/c + 2*float64(k)
		in.Candidates = append(in.Candidates, IntensityCandidate{Name: fmt.Sprintf("fourier daily=%d weekly=%d", f.hd, f.hw), Params: k, LogLik: f.ll, QAIC: q})
		if best < 0 || q < in.Candidates[best].QAIC {
			best = i
		}
	}
	f := fits[best]
	in.DailyHarmonics, in.WeeklyHarmonics, in.Coef = f.hd, f.hw, f.coef
	in.CoefSE = standardErrors(f.info, c)
	return in, nil
}

// standardErrors returns sqrt(c · diag(info⁻¹)), nil when info is singular
// or its inverse has a diagonal that is not a positive finite number.
func standardErrors(info *mat.SymDense, c float64) []float64 {
	var inv mat.Dense
	if err := inv.Inverse(info); err != nil {
		return nil
	}
	n, _ := info.Dims()
	se := make([]float64, n)
	for i := range se {
		se[i] = math.Sqrt(c * inv.At(i, i))
		if !(se[i] < math.Inf(1)) {
			return nil
		}
	}
	return se
}

// fitFourierFixed fits given numbers of harmonics and returns the
// coefficients with their standard errors (quasi-Poisson).
func fitFourierFixed(b binnedCounts, hd, hw int) ([]float64, []float64, error) {
	total := 0.0
	for _, y := range b.Counts {
		total += y
	}
	coef, mu, info, err := poissonGLM(context.Background(), b, hd, hw, math.Log(max(total, 1)/(b.Width*float64(len(b.Counts)))))
	if err != nil {
		return nil, nil, err
	}
	return coef, standardErrors(info, pearsonDispersion(b.Counts, mu, len(coef))), nil
}

// poissonGLM maximises the Poisson likelihood of the binned counts under
// log μ_b = log(width) + x_bᵀβ with BFGS, and returns β, the fitted means and
// the Fisher information Σ μ_b x_b x_bᵀ.
func poissonGLM(ctx context.Context, b binnedCounts, hd, hw int, logMean float64) ([]float64, []float64, *mat.SymDense, error) {
	k := 1 + 2*hd + 2*hw
	n := len(b.Counts)
	xs := make([][]float64, n)
	for i := range xs {
		xs[i] = fourierFeatures(make([]float64, 0, k), hd, hw, b.mid(i))
	}
	logW := math.Log(b.Width)
	mu := make([]float64, n)
	eval := func(beta []float64) {
		for i, x := range xs {
			s := logW
			for j, v := range x {
				s += beta[j] * v
			}
			mu[i] = math.Exp(min(max(s, -700), 700))
		}
	}
	p := optimize.Problem{
		Func: func(beta []float64) float64 {
			eval(beta)
			f := 0.0
			for i, y := range b.Counts {
				f += mu[i] - y*math.Log(mu[i])
			}
			return f
		},
		Grad: func(grad, beta []float64) {
			eval(beta)
			clear(grad)
			for i, x := range xs {
				r := mu[i] - b.Counts[i]
				for j, v := range x {
					grad[j] += r * v
				}
			}
		},
	}
	init := make([]float64, k)
	init[0] = logMean
	res, err := optimize.Minimize(p, init, &optimize.Settings{GradientThreshold: 1e-6, Recorder: ctxRecorder{ctx}}, &optimize.BFGS{})
	if err != nil && res == nil {
		return nil, nil, nil, err
	}
	beta := res.X
	eval(beta)
	info := mat.NewSymDense(k, nil)
	for i, x := range xs {
		for a := 0; a < k; a++ {
			for c := a; c < k; c++ {
				info.SetSym(a, c, info.At(a, c)+mu[i]*x[a]*x[c])
			}
		}
	}
	return beta, slices.Clone(mu), info, nil
}

// fitPiecewise fits equal-width constant pieces (1 to 24, each at least five
// minutes) to a trace shorter than a day and keeps the count with the lowest
// QAIC; the rate of each piece is its maximum-likelihood count over width.
func fitPiecewise(b binnedCounts, spanS, mean float64) Intensity {
	in := Intensity{Kind: "piecewise", BinSeconds: b.Width, SpanS: spanS, MeanRatePerS: mean}
	type fitted struct {
		rates []float64
		mu    []float64
		ll    float64
	}
	var fits []fitted
	for _, k := range []int{1, 2, 3, 4, 6, 8, 12, 24} {
		if k > 1 && spanS/float64(k) < 300 {
			break
		}
		counts := make([]float64, k)
		for i, c := range b.Counts {
			counts[min(k-1, int((b.mid(i)-b.Start)/spanS*float64(k)))] += c
		}
		rates := make([]float64, k)
		for j := range rates {
			rates[j] = max(counts[j], 0.5) / (spanS / float64(k)) // half a count keeps an empty piece's rate positive
		}
		mu := make([]float64, len(b.Counts))
		for i := range mu {
			mu[i] = rates[min(k-1, int((b.mid(i)-b.Start)/spanS*float64(k)))] * b.Width
		}
		fits = append(fits, fitted{rates, mu, poissonLogLik(b.Counts, mu)})
	}
	richest := fits[len(fits)-1]
	c := pearsonDispersion(b.Counts, richest.mu, len(richest.rates))
	in.Overdispersion = c
	best := 0
	for i, f := range fits {
		q := -2*f.ll/c + 2*float64(len(f.rates))
		in.Candidates = append(in.Candidates, IntensityCandidate{Name: fmt.Sprintf("piecewise pieces=%d", len(f.rates)), Params: len(f.rates), LogLik: f.ll, QAIC: q})
		if q < in.Candidates[best].QAIC {
			best = i
		}
	}
	in.PieceRates = fits[best].rates
	return in
}

// ctxRecorder stops an optimisation when its context is done.
type ctxRecorder struct{ ctx context.Context }

func (ctxRecorder) Init() error { return nil }

func (r ctxRecorder) Record(*optimize.Location, optimize.Operation, *optimize.Stats) error {
	return r.ctx.Err()
}
