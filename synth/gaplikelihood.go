package synth

import "math"

// gapLikelihood is the renewal likelihood of a set of gaps in the form one
// evaluation needs: the exact gaps' count, sum and sum of logs (sufficient
// for the Gamma law, so an evaluation costs O(1)), their logs (the Weibull's
// Σ (x/λ)^k costs one exp per gap, not a Pow and two Logs), and the
// interval-censored gaps, which still take two CDFs each. It equals the
// law's own log densities and CDFs summed gap by gap, up to rounding
// (TestGapLikelihoodMatchesLaws); the optimiser evaluates it hundreds of
// times.
type gapLikelihood struct {
	n, sum, sumLog float64
	logs           []float64
	censored       []gapObs
}

// newGapLikelihood splits obs: with censored set, a gap below twice its
// resolution is interval-censored (the observed gap g only says the true
// one lies in [max(0, g−res), g+res]); every other gap is exact, at least
// 1e-12.
func newGapLikelihood(obs []gapObs, censored bool) *gapLikelihood {
	g := &gapLikelihood{logs: make([]float64, 0, len(obs))}
	for _, o := range obs {
		if censored && o.gap < 2*o.res {
			g.censored = append(g.censored, o)
			continue
		}
		x := max(o.gap, 1e-12)
		g.n++
		g.sum += x
		l := math.Log(x)
		g.sumLog += l
		g.logs = append(g.logs, l)
	}
	return g
}

// nll is the negative log-likelihood under law dist ("weibull", else Gamma;
// the exponential is the Gamma of shape 1) of the given shape and scale.
func (g *gapLikelihood) nll(dist string, shape, scale float64) float64 {
	var ll float64
	if dist == "weibull" {
		// log f(x) = log k − k log λ + (k−1) log x − (x/λ)^k
		logScale := math.Log(scale)
		var pow float64
		for _, l := range g.logs {
			pow += math.Exp(shape * (l - logScale))
		}
		ll = g.n*(math.Log(shape)-shape*logScale) + (shape-1)*g.sumLog - pow
	} else {
		// log f(x) = a log β − lgamma(a) + (a−1) log x − βx, β = 1/scale
		lg, _ := math.Lgamma(shape)
		rate := 1 / scale
		ll = g.n*(shape*math.Log(rate)-lg) + (shape-1)*g.sumLog - rate*g.sum
	}
	if len(g.censored) > 0 {
		law := makeLaw(dist, shape, scale)
		for _, o := range g.censored {
			p := law.CDF(o.gap+o.res) - law.CDF(max(0, o.gap-o.res))
			ll += math.Log(max(p, 1e-300))
		}
	}
	return -ll
}
