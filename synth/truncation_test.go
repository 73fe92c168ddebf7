package synth

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRightTruncatedMassesRecoverTheLaw draws distances from a known law
// (exponential, mean 1,000), keeps each only when it is at most its limit
// (uniform on 0–6,000, as the blocks used before a request grow through a
// trace), and checks that the Lynden-Bell masses give back the law's CDF,
// where the naive sample, short by construction, does not.
func TestRightTruncatedMassesRecoverTheLaw(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	var kept []truncatedSample
	for len(kept) < 40000 {
		x, limit := math.Round(rng.ExpFloat64()*1000), rng.Float64()*6000
		if x <= limit {
			kept = append(kept, truncatedSample{x: x, limit: limit})
		}
	}
	vals, masses := rightTruncatedMasses(kept)
	cdf := func(v float64) (lb, naive float64) {
		for i, x := range vals {
			if x <= v {
				lb += masses[i]
			}
		}
		for _, o := range kept {
			if o.x <= v {
				naive++
			}
		}
		return lb, naive / float64(len(kept))
	}
	for _, v := range []float64{200, 700, 1500, 3000} {
		want := 1 - math.Exp(-(v+0.5)/1000) // the law rounded to integers
		lb, naive := cdf(v)
		if math.Abs(lb-want) > 0.015 {
			t.Errorf("P(X ≤ %g): Lynden-Bell %.4f, the law %.4f", v, lb, want)
		}
		if v == 700 && naive-want < 0.03 {
			t.Errorf("P(X ≤ %g): the naive sample gives %.4f against the law's %.4f: the check cannot tell the estimator from none", v, naive, want)
		}
	}
	total := 0.0
	for _, m := range masses {
		total += m
	}
	if math.Abs(total-1) > 1e-9 {
		t.Errorf("masses sum to %v, want 1", total)
	}
}
