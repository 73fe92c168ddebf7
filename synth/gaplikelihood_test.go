package synth

import (
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"
)

// renewalNLLByLaw is the renewal likelihood written plainly with the law's
// own LogProb and CDF per gap: the reference gapLikelihood must equal.
func renewalNLLByLaw(law renewalLaw, obs []gapObs, censored bool) float64 {
	nll := 0.0
	for _, o := range obs {
		if censored && o.gap < 2*o.res {
			p := law.CDF(o.gap+o.res) - law.CDF(max(0, o.gap-o.res))
			nll -= math.Log(max(p, 1e-300))
			continue
		}
		nll -= law.LogProb(max(o.gap, 1e-12))
	}
	return nll
}

// TestGapLikelihoodMatchesLaws checks the sufficient-statistics likelihood
// against gonum's laws, gap by gap, with and without censoring and with
// zero gaps (floored at 1e-12).
func TestGapLikelihoodMatchesLaws(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	g := distuv.Gamma{Alpha: 0.5, Beta: 0.5, Src: rand.NewPCG(1, 2)}
	obs := make([]gapObs, 5000)
	for i := range obs {
		obs[i] = gapObs{gap: g.Rand(), res: 0.05 * rng.Float64()}
	}
	obs[0].gap, obs[1].gap = 0, 1e-15
	for _, censored := range []bool{false, true} {
		lik := newGapLikelihood(obs, censored)
		if censored && len(lik.censored) == 0 {
			t.Fatal("no gap was censored: the test does not cover the censored path")
		}
		for _, c := range []struct {
			dist         string
			shape, scale float64
		}{
			{"exponential", 1, 1}, {"exponential", 1, 0.3},
			{"gamma", 0.5, 2}, {"gamma", 3, 0.1}, {"gamma", 0.05, 40},
			{"weibull", 0.6, 0.8}, {"weibull", 2.5, 1.2}, {"weibull", 0.1, 5},
		} {
			want := renewalNLLByLaw(makeLaw(c.dist, c.shape, c.scale), obs, censored)
			got := lik.nll(c.dist, c.shape, c.scale)
			if math.Abs(got-want) > 1e-9*math.Abs(want) {
				t.Errorf("censored %v, %s(%g, %g): nll %.12g, by the law %.12g", censored, c.dist, c.shape, c.scale, got, want)
			}
		}
	}
}
