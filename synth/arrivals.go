package synth

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/diff/fd"
	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize"
	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/servetrace/servetrace/internal/rank"
)

// ArrivalModel describes when requests (or, with sessions, first turns)
// arrive: a deterministic intensity, a renewal process in the time that
// intensity rescales, and an optional latent rate that wanders.
type ArrivalModel struct {
	Intensity Intensity `json:"intensity"`
	Renewal   Renewal   `json:"renewal"`
	Latent    Latent    `json:"latent"`
	// InterArrivalCV is the coefficient of variation of the raw gaps; a
	// Poisson process has 1.
	InterArrivalCV float64 `json:"inter_arrival_cv"`
	// Dispersion is the index of dispersion of counts of the fitted trace
	// beside the fitted model's (by simulation over the same span).
	Dispersion []DispersionPoint `json:"dispersion"`
	// GapQuantiles are the inter-arrival gap quantiles of the trace beside
	// the fitted model's.
	GapQuantiles []GapQuantile `json:"gap_quantiles"`
	// RenewalGaps says which gaps the renewal law was fitted to:
	// "intensity-rescaled" or "local-rate-rescaled (W s window)".
	RenewalGaps string `json:"renewal_gaps"`
	// Chosen summarises the chosen model in words.
	Chosen string `json:"chosen"`
	// Notes say where the fit bounded its work on a long span (wider count
	// bins, a shorter simulated span).
	Notes []string `json:"notes,omitempty"`
}

// DispersionPoint is the index of dispersion of counts at one window.
type DispersionPoint struct {
	WindowS float64 `json:"window_s"`
	Trace   float64 `json:"trace"`
	Model   float64 `json:"model"`
}

// GapQuantile is one inter-arrival gap quantile, in seconds.
type GapQuantile struct {
	P      float64 `json:"p"`
	TraceS float64 `json:"trace_s"`
	ModelS float64 `json:"model_s"`
}

// Renewal is the inter-arrival distribution in rescaled time (mean gap 1),
// fitted by maximum likelihood.
type Renewal struct {
	// Dist is "exponential", "gamma" or "weibull", chosen by AIC.
	Dist string `json:"dist"`
	// Shape is the Gamma or Weibull shape (1 for exponential) with its 95%
	// interval (from the observed information, on the log scale).
	Shape     float64    `json:"shape"`
	ShapeCI95 [2]float64 `json:"shape_ci95"`
	// KS is the Kolmogorov–Smirnov distance of the chosen fit to the gaps:
	// how well any renewal law describes them.
	KS float64 `json:"ks"`
	// Gaps is the number of gaps fitted (a uniform sample when the trace
	// has more).
	Gaps int `json:"gaps"`
	// ResolutionCensored is true when gaps were treated as interval-censored
	// at the trace's time resolution.
	ResolutionCensored bool               `json:"resolution_censored"`
	Candidates         []RenewalCandidate `json:"candidates"`
	// Chain, when set, replaces Dist: gaps follow this Markov chain over
	// gap classes (a Markov renewal process), chosen because it reproduces
	// the trace's dispersion curve and gap quantiles better. Dist and Shape
	// stay as fitted, for reference.
	Chain *GapChain `json:"chain,omitempty"`
}

// RenewalCandidate is one renewal law tried with its AIC.
type RenewalCandidate struct {
	Dist   string  `json:"dist"`
	Shape  float64 `json:"shape"`
	LogLik float64 `json:"log_lik"`
	AIC    float64 `json:"aic"`
}

// Latent is a log-Gaussian Cox layer: the rate is multiplied by
// Floor + (1−Floor)·exp(Σ X_j − Σ σ_j²/2), each X_j an Ornstein–Uhlenbeck process with
// stationary standard deviation Sigma[j] and correlation time TauS[j], so its
// mean is 1 and it adds dispersion that grows with the window up to the
// slowest correlation time.
type Latent struct {
	// Kind is "none" or "lgcp".
	Kind  string    `json:"kind"`
	Sigma []float64 `json:"sigma,omitempty"`
	TauS  []float64 `json:"tau_s,omitempty"`
	// Floor is the share of the rate that does not wander: the multiplier
	// is Floor + (1−Floor)·exp(Σ X_j − Σ σ_j²/2), still of mean 1. A floor
	// keeps a steady background under the bursts, as API traffic has.
	Floor float64 `json:"floor"`
	// Loss is the mean squared log error between the trace's and the
	// model's dispersion curves after the fit.
	Loss float64 `json:"loss"`
	Note string  `json:"note,omitempty"`
}

// dispersionWindows are the windows (seconds) of the dispersion curve.
var dispersionWindows = []float64{1, 2, 5, 10, 20, 30, 60, 120, 300}

// maxRenewalGaps bounds the gaps kept for the renewal fit.
const maxRenewalGaps = 100_000

// gapObs is one inter-arrival gap in rescaled time with the time
// resolution, rescaled alike, it was observed at.
type gapObs struct{ gap, res float64 }

// renewalLaw is a positive distribution with CDF and log density.
type renewalLaw interface {
	CDF(x float64) float64
	LogProb(x float64) float64
}

func makeLaw(dist string, shape, scale float64) renewalLaw {
	switch dist {
	case "weibull":
		return distuv.Weibull{K: shape, Lambda: scale}
	default:
		return distuv.Gamma{Alpha: shape, Beta: 1 / scale}
	}
}

// fitRenewal fits exponential, Gamma and Weibull laws to the gaps by maximum
// likelihood and keeps the lowest AIC.
func fitRenewal(ctx context.Context, obs []gapObs, censored bool) (Renewal, error) {
	if len(obs) < 10 {
		return Renewal{}, fmt.Errorf("%d inter-arrival gaps; a renewal fit needs at least 10", len(obs))
	}
	gaps := make([]float64, len(obs))
	for i, o := range obs {
		gaps[i] = o.gap
	}
	mean := stat.Mean(gaps, nil)
	if !(mean > 0) || math.IsInf(mean, 0) {
		return Renewal{}, fmt.Errorf("inter-arrival gaps of mean %v; a renewal fit needs a positive mean", mean)
	}
	r := Renewal{Gaps: len(gaps), ResolutionCensored: censored}
	type result struct {
		dist         string
		shape, scale float64
		nll          float64
		shapeSE      float64 // of log shape
	}
	var results []result
	lik := newGapLikelihood(obs, censored)
	for _, dist := range []string{"exponential", "gamma", "weibull"} {
		nll := func(p []float64) float64 {
			shape := 1.0
			scale := math.Exp(p[0])
			if dist != "exponential" {
				shape, scale = math.Exp(p[0]), math.Exp(p[1])
			}
			if shape < minRenewalShape || shape > maxRenewalShape || math.IsInf(scale, 0) || scale == 0 {
				return math.Inf(1)
			}
			return lik.nll(dist, shape, scale)
		}
		init := []float64{math.Log(mean)}
		if dist != "exponential" {
			init = []float64{0, math.Log(mean)}
		}
		out, err := optimize.Minimize(optimize.Problem{Func: nll}, init, &optimize.Settings{Converger: &optimize.FunctionConverge{Absolute: 1e-7, Iterations: 200}, MajorIterations: 2000, Recorder: ctxRecorder{ctx}}, &optimize.NelderMead{})
		if err := ctx.Err(); err != nil {
			return Renewal{}, err
		}
		if out == nil || math.IsInf(out.F, 0) || math.IsNaN(out.F) {
			return Renewal{}, fmt.Errorf("renewal fit %s: %w", dist, err)
		}
		rr := result{dist: dist, shape: 1, scale: math.Exp(out.X[0]), nll: out.F}
		if dist != "exponential" {
			rr.shape, rr.scale = math.Exp(out.X[0]), math.Exp(out.X[1])
			h := mat.NewSymDense(2, nil)
			fd.Hessian(h, nll, out.X, nil)
			var inv mat.Dense
			if inv.Inverse(h) == nil && inv.At(0, 0) > 0 && !math.IsInf(inv.At(0, 0), 0) {
				rr.shapeSE = math.Sqrt(inv.At(0, 0))
			}
		}
		results = append(results, rr)
	}
	best := 0
	for i, x := range results {
		k := 2
		if x.dist == "exponential" {
			k = 1
		}
		aic := 2*float64(k) + 2*x.nll
		r.Candidates = append(r.Candidates, RenewalCandidate{Dist: x.dist, Shape: x.shape, LogLik: -x.nll, AIC: aic})
		if aic < r.Candidates[best].AIC {
			best = i
		}
	}
	b := results[best]
	r.Dist, r.Shape = b.dist, b.shape
	r.ShapeCI95 = [2]float64{b.shape * math.Exp(-1.96*b.shapeSE), b.shape * math.Exp(1.96*b.shapeSE)}
	if b.dist == "exponential" {
		r.ShapeCI95 = [2]float64{1, 1}
	}
	// KS of the chosen law against the gaps.
	law := makeLaw(b.dist, b.shape, b.scale)
	slices.Sort(gaps)
	n := float64(len(gaps))
	for i, g := range gaps {
		f := law.CDF(g)
		r.KS = max(r.KS, math.Abs(f-float64(i)/n), math.Abs(float64(i+1)/n-f))
	}
	return r, nil
}

// gapSampler returns a sampler of renewal gaps with mean 1.
func (r *Renewal) gapSampler(src rand.Source) func() float64 {
	if r.Chain != nil {
		return r.Chain.sampler(src)
	}
	switch r.Dist {
	case "gamma":
		g := distuv.Gamma{Alpha: r.Shape, Beta: r.Shape, Src: src}
		return g.Rand
	case "weibull":
		scale := 1 / math.Gamma(1+1/r.Shape)
		w := distuv.Weibull{K: r.Shape, Lambda: scale, Src: src}
		return w.Rand
	default:
		e := distuv.Exponential{Rate: 1, Src: src}
		return e.Rand
	}
}

// arrivalGen draws arrival times of a doubly stochastic renewal process: a
// renewal process with mean-1 gaps in operational time, where operational
// time runs at base(t)·Z(t), Z the latent layer. It works on a grid of dt
// seconds, over which base and Z are held constant.
type arrivalGen struct {
	base  func(t float64) float64
	dt    float64
	gap   func() float64
	rng   *rand.Rand
	ou    []ouState
	corr  float64
	floor float64

	t, cellEnd, rate float64 // current time, end of the current cell, its rate
	u, target        float64 // operational time now and of the next arrival

	// ctx, when set, is checked every few thousand cells; err is why next
	// stopped early.
	ctx   context.Context
	cells int
	err   error
}

type ouState struct{ x, a, s float64 }

func newArrivalGen(base func(float64) float64, r *Renewal, l *Latent, seed uint64) *arrivalGen {
	g := &arrivalGen{base: base, dt: 1, rng: rand.New(rand.NewPCG(seed, 0x0a11)), gap: r.gapSampler(rand.NewPCG(seed, 0x6a95))}
	if l.Kind == "lgcp" {
		g.floor = l.Floor
		for _, tau := range l.TauS {
			g.dt = min(g.dt, max(tau/5, 0.02))
		}
		for j, sigma := range l.Sigma {
			a := math.Exp(-g.dt / l.TauS[j])
			g.ou = append(g.ou, ouState{x: sigma * g.rng.NormFloat64(), a: a, s: sigma * math.Sqrt(1-a*a)})
			g.corr -= sigma * sigma / 2
		}
	}
	g.startCell()
	return g
}

func (g *arrivalGen) startCell() {
	g.cellEnd = (math.Floor(g.t/g.dt+1e-9) + 1) * g.dt
	z := g.corr
	for _, o := range g.ou {
		z += o.x
	}
	if len(g.ou) == 0 {
		g.rate = g.base(g.t)
		return
	}
	g.rate = g.base(g.t) * (g.floor + (1-g.floor)*math.Exp(z))
}

// next returns the next arrival time at or before limit, or false when
// there is none.
func (g *arrivalGen) next(limit float64) (float64, bool) {
	if g.target <= g.u {
		g.target = g.u + g.gap()
	}
	for {
		if g.t >= limit {
			return 0, false
		}
		room := g.rate * (g.cellEnd - g.t)
		if g.rate > 0 && g.u+room >= g.target {
			g.t += (g.target - g.u) / g.rate
			g.u = g.target
			if g.t >= limit {
				return 0, false
			}
			return g.t, true
		}
		g.u += room
		g.t = g.cellEnd
		if g.cells++; g.cells&4095 == 0 && g.ctx != nil && g.ctx.Err() != nil {
			g.err = g.ctx.Err()
			return 0, false
		}
		for j := range g.ou {
			o := &g.ou[j]
			o.x = o.a*o.x + o.s*g.rng.NormFloat64()
		}
		g.startCell()
	}
}

// gapProbs are the gap quantiles the latent fit matches besides the
// dispersion curve.
var gapProbs = []float64{0.1, 0.5, 0.9, 0.99}

// simulateDispersion draws reps realisations over [0, span) and returns the
// typical (geometric mean over realisations) index of dispersion at each
// window, followed by the typical gap quantiles at gapProbs. A geometric
// mean, because a heavy-tailed latent rate makes the arithmetic mean of the
// index follow rare realisations, not the one a trace is.
func simulateDispersion(ctx context.Context, base func(float64) float64, r *Renewal, l *Latent, span float64, windows []float64, reps int, seed uint64) []float64 {
	sum := make([]float64, len(windows)+len(gapProbs))
	var ts, gs []float64
	for rep := range reps {
		ts = ts[:0]
		g := newArrivalGen(base, r, l, seed+uint64(rep)*7919)
		g.ctx = ctx
		for {
			t, ok := g.next(span)
			if !ok {
				break
			}
			if ts = append(ts, t); len(ts)&0xffff == 0 && ctx.Err() != nil {
				break
			}
		}
		if ctx.Err() != nil {
			return sum // the caller sees ctx.Err()
		}
		for i, w := range windows {
			d := DispersionIndex(ts, 0, span, w)
			if math.IsNaN(d) {
				d = 1
			}
			sum[i] += math.Log(max(d, 1e-3))
		}
		gs = gs[:0]
		for i := 1; i < len(ts); i++ {
			gs = append(gs, ts[i]-ts[i-1])
		}
		qs := rank.Percentiles(gs, gapProbs)
		for j, q := range qs {
			if len(gs) == 0 {
				q = span // no gap seen: every gap is longer than the span
			}
			sum[len(windows)+j] += math.Log(max(q, 1e-6))
		}
	}
	for i := range sum {
		sum[i] = math.Exp(sum[i] / float64(reps))
	}
	return sum
}

// fitLatent fits a two-component log-Gaussian Cox layer to the trace's
// dispersion curve and gap quantiles by simulation (the same span, the fitted
// intensity and renewal), minimising the mean squared log error with
// Nelder–Mead. Simulating the same span keeps the windows' finite-sample bias
// on both sides. target holds the dispersion at windows, then the gap
// quantiles at gapProbs. It returns the layer and its simulated curve (the
// caller scores it).
func fitLatent(ctx context.Context, base func(float64) float64, r *Renewal, span float64, windows, target []float64, expected float64) (Latent, []float64) {
	reps := max(2, min(4, int(300_000/max(expected, 1))))
	loss := func(model []float64) float64 { return curveLoss(model, target) }
	none := Latent{Kind: "none"}
	noneCurve := simulateDispersion(ctx, base, r, &none, span, windows, reps, 1)
	noneLoss := loss(noneCurve)
	// Does the dispersion keep growing beyond what the renewal layer gives?
	last := len(windows) - 1
	if last < 1 || target[last]/target[0] < 1.5*noneCurve[last]/noneCurve[0] && noneLoss < 0.05 {
		none.Note = "the dispersion curve does not grow beyond what the renewal layer gives: no latent layer"
		return none, noneCurve
	}
	decode := func(p []float64) Latent {
		return Latent{Kind: "lgcp",
			Sigma: []float64{math.Exp(p[0]), math.Exp(p[2])},
			TauS:  []float64{0.2 + math.Exp(p[1]), 0.2 + math.Exp(p[1]) + math.Exp(p[3])},
			Floor: 1 / (1 + math.Exp(-p[4]))}
	}
	obj := func(p []float64) float64 {
		if ctx.Err() != nil {
			return math.Inf(1)
		}
		for _, v := range p {
			if v > 8 || v < -8 {
				return math.Inf(1)
			}
		}
		l := decode(p)
		if l.Sigma[0] > 3.5 || l.Sigma[1] > 3.5 || l.TauS[1] > span {
			return math.Inf(1)
		}
		return loss(simulateDispersion(ctx, base, r, &l, span, windows, reps, 1))
	}
	init := []float64{math.Log(0.7), math.Log(2), math.Log(0.7), math.Log(60), math.Log(0.3 / 0.7)}
	res, _ := optimize.Minimize(optimize.Problem{Func: obj}, init, &optimize.Settings{FuncEvaluations: 200, Converger: &optimize.FunctionConverge{Absolute: 1e-4, Iterations: 40}, Recorder: ctxRecorder{ctx}}, &optimize.NelderMead{})
	if res == nil || !(res.F < noneLoss) || ctx.Err() != nil {
		none.Note = "a latent layer did not improve the dispersion fit"
		return none, noneCurve
	}
	l := decode(res.X)
	return l, simulateDispersion(ctx, base, r, &l, span, windows, reps, 1)
}
